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
	h := newBlockHasher(2)
	h.words("a b c d")
	c := h.clone()
	c.words("e f")
	if len(h.blocks) != 2 || len(c.blocks) != 3 || h.n != 4 {
		t.Fatalf("clone changed the original: %d blocks, %d tokens", len(h.blocks), h.n)
	}
}
