package main

import "testing"

func TestPrefixCacheCountsLeadingBlocks(t *testing.T) {
	c := newPrefixCache(100)
	if hit := c.admit([]uint64{1, 2, 3}, 3); hit != 0 {
		t.Fatalf("empty cache hit %d blocks", hit)
	}
	if hit := c.admit([]uint64{1, 2, 3, 4, 5}, 4); hit != 3 {
		t.Errorf("hit %d blocks, want 3", hit)
	}
	// Block 5 was a reply block: cached, but not counted as a hit above.
	if hit := c.peek([]uint64{1, 2, 3, 4, 5, 6}); hit != 5 {
		t.Errorf("peek: %d blocks, want 5", hit)
	}
	if hit := c.peek([]uint64{9, 2, 3}); hit != 0 {
		t.Errorf("a missing first block must hide the rest: %d", hit)
	}
}

func TestPrefixCacheEvictsTailsFirst(t *testing.T) {
	c := newPrefixCache(4)
	c.admit([]uint64{1, 2, 3}, 3) // LRU order, most recent first: 1 2 3
	c.admit([]uint64{10, 11}, 2)  // 10 11 1 2; 3 is evicted
	if got := c.peek([]uint64{1, 2, 3}); got != 2 {
		t.Errorf("after eviction %d leading blocks of 1 2 3 cached, want 2", got)
	}
	if c.len() != 4 || c.capacity() != 4 {
		t.Errorf("len %d, capacity %d, want 4 and 4", c.len(), c.capacity())
	}
	c.admit([]uint64{1}, 1)      // 1 10 11 2
	c.admit([]uint64{20, 21}, 2) // 20 21 1 10
	if got := c.peek([]uint64{10, 11}); got != 1 {
		t.Errorf("%d blocks of 10 11 cached, want 1", got)
	}
	if got := c.peek([]uint64{1}); got != 1 {
		t.Errorf("the recently used block 1 was evicted")
	}
}
