package main

import "github.com/sessionkeeping/caddy-session-keeping/upstreams"

// Role markers open every message in the token stream, and genMarker ends
// a prompt, the way chat templates frame messages before an engine
// tokenizes them. The reply then continues the same stream, so the next
// turn's prompt starts with exactly the tokens the engine cached.
const genMarker = "<|assistant|>"

// roleMarker returns the token that opens a message of role.
func roleMarker(role string) string { return "<|" + role + "|>" }

// FNV-1a, 64 bit: the running hash of a token stream.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// blockHasher turns a token stream into chained block hashes. The hash of
// a block is the running hash at its end, so it covers every token before
// it: two streams share a block hash only when they agree on the whole
// prefix, which is how vLLM and SGLang key their prefix caches.
type blockHasher struct {
	size   int      // tokens per block
	h      uint64   // running hash of every token so far
	n      int      // tokens so far
	blocks []uint64 // the running hash at each full block's end
}

// newBlockHasher returns a hasher of blocks of size tokens.
func newBlockHasher(size int) *blockHasher {
	return &blockHasher{size: size, h: fnvOffset}
}

// token adds one token.
func (b *blockHasher) token(t string) {
	h := b.h
	for i := 0; i < len(t); i++ {
		h ^= uint64(t[i])
		h *= fnvPrime
	}
	// A separator, so that "ab"+"c" and "a"+"bc" differ.
	h ^= 0xff
	h *= fnvPrime
	b.h = h
	b.n++
	if b.n%b.size == 0 {
		// Mixed, because FNV's low bits are weak.
		b.blocks = append(b.blocks, upstreams.Mix64(h))
	}
}

// words adds the space-separated words of s, one token each: synthetic
// text is made of whole words, so a word is a token.
func (b *blockHasher) words(s string) {
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' {
			if i > start {
				b.token(s[start:i])
			}
			start = i + 1
		}
	}
}

// message adds one chat message: its role marker, then its words.
func (b *blockHasher) message(role, content string) {
	b.token(roleMarker(role))
	b.words(content)
}

// clone returns an independent copy, so a prompt can be hashed on top of
// a conversation's history without changing the history's hasher.
func (b *blockHasher) clone() *blockHasher {
	c := *b
	c.blocks = append([]uint64(nil), b.blocks...)
	return &c
}
