package main

import "sync"

// blockSet is every block the engines of a fleet have computed, never
// evicted: a prompt's leading blocks in it are the most that any router
// could have found cached, with caches large enough to keep everything.
// It is the ceiling the oracle is measured against.
type blockSet struct {
	mu     sync.Mutex
	blocks map[uint64]struct{}
}

func newBlockSet() *blockSet { return &blockSet{blocks: map[uint64]struct{}{}} }

// admit returns how many leading blocks of blocks[:prompt] were in the
// set, then adds every block.
func (s *blockSet) admit(blocks []uint64, prompt int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	hit := 0
	for hit < prompt {
		if _, ok := s.blocks[blocks[hit]]; !ok {
			break
		}
		hit++
	}
	for _, b := range blocks[hit:] {
		s.blocks[b] = struct{}{}
	}
	return hit
}
