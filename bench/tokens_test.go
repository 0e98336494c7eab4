package main

import (
	"slices"
	"testing"
)

func TestBlocksChainOverThePrefix(t *testing.T) {
	hash := func(words string) []uint64 {
		h := newBlockHasher(4)
		h.words(words)
		return h.blocks
	}
	a := hash("a b c d e f g h i j")
	if len(a) != 2 {
		t.Fatalf("10 tokens in blocks of 4: %d full blocks, want 2", len(a))
	}
	if b := hash("a b c d e f g h x y z"); !slices.Equal(a, b[:2]) {
		t.Errorf("same first 8 tokens, different blocks: %x vs %x", a, b)
	}
	if b := hash("z b c d e f g h"); b[0] == a[0] || b[1] == a[1] {
		t.Errorf("a different first token must change every block: %x vs %x", a, b)
	}
	if b := hash("ab c d e f g h"); b[0] == a[0] {
		t.Errorf("token boundaries must count: %x vs %x", a, b)
	}
	if b := hash("  a b  c d e f g h "); !slices.Equal(a, b) {
		t.Errorf("extra spaces changed the tokens: %x vs %x", a, b)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	// Three blocks leave the original's slice room to grow in place, so a
	// clone that shared it would see the original's next block.
	h := newBlockHasher(2)
	h.words("a b c d e f")
	c := h.clone()
	c.words("g h")
	cloneBlock := c.blocks[3]
	h.words("x y")
	if len(h.blocks) != 4 || len(c.blocks) != 4 || c.blocks[3] != cloneBlock || h.blocks[3] == cloneBlock {
		t.Fatalf("clone and original share blocks: %x and %x", h.blocks, c.blocks)
	}
}
