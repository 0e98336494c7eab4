package main

import "sync"

// prefixCache emulates an inference engine's prefix (KV) cache: a bounded
// set of token blocks, keyed by chained block hash, evicted least recently
// used first. A request hits the leading blocks of its prompt that are all
// present; a block whose predecessor is missing does not count, because
// its KV entries depend on everything before it.
type prefixCache struct {
	mu    sync.Mutex
	index map[uint64]int32 // block hash → node
	nodes []lruNode        // nodes[0] is the head of a circular list, most recent first
}

// lruNode is one cached block in the recency list.
type lruNode struct {
	key        uint64
	prev, next int32
}

// newPrefixCache returns an empty cache of capacity blocks (at least one).
func newPrefixCache(capacity int) *prefixCache {
	capacity = max(capacity, 1)
	// The zero head links to itself: an empty list.
	return &prefixCache{
		index: make(map[uint64]int32, capacity),
		nodes: make([]lruNode, 1, capacity+1),
	}
}

// capacity is the most blocks the cache holds.
func (c *prefixCache) capacity() int { return cap(c.nodes) - 1 }

// len returns the number of cached blocks.
func (c *prefixCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.index)
}

// peek returns how many leading blocks of blocks are cached, without
// changing recency: what a router that can see the cache would learn.
func (c *prefixCache) peek(blocks []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits(blocks)
}

// admit serves a request: it returns how many leading blocks of
// blocks[:prompt] were cached, then caches every block (the prompt's and
// the reply's). Blocks are touched last to first, so the prefix ends up
// most recent and a conversation's tail is evicted before its head, as
// engines free blocks in reverse order.
func (c *prefixCache) admit(blocks []uint64, prompt int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := c.hits(blocks[:prompt])
	for i := len(blocks) - 1; i >= 0; i-- {
		c.touch(blocks[i])
	}
	return hit
}

// hits counts the leading cached blocks.
func (c *prefixCache) hits(blocks []uint64) int {
	for i, k := range blocks {
		if _, ok := c.index[k]; !ok {
			return i
		}
	}
	return len(blocks)
}

// touch makes key the most recently used block, adding it (and evicting
// the least recently used block when full) if it is missing.
func (c *prefixCache) touch(key uint64) {
	if i, ok := c.index[key]; ok {
		c.unlink(i)
		c.pushFront(i)
		return
	}
	var i int32
	if len(c.nodes) < cap(c.nodes) {
		c.nodes = append(c.nodes, lruNode{})
		i = int32(len(c.nodes) - 1)
	} else {
		i = c.nodes[0].prev // the least recently used
		c.unlink(i)
		delete(c.index, c.nodes[i].key)
	}
	c.nodes[i].key = key
	c.index[key] = i
	c.pushFront(i)
}

func (c *prefixCache) unlink(i int32) {
	n := c.nodes[i]
	c.nodes[n.prev].next = n.next
	c.nodes[n.next].prev = n.prev
}

func (c *prefixCache) pushFront(i int32) {
	first := c.nodes[0].next
	c.nodes[i].prev, c.nodes[i].next = 0, first
	c.nodes[first].prev = i
	c.nodes[0].next = i
}
