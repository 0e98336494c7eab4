package main

import (
	"math/rand/v2"
	"strings"
)

// vocabSize is the number of distinct synthetic words. Words are made of
// lowercase letters only, so message text never needs JSON escaping.
const vocabSize = 4096

// vocab is the fixed word list of synthetic text, the same in every run.
var vocab = func() []string {
	const consonants, vowels = "bcdfghklmnprstvz", "aeiou"
	rng := rand.New(rand.NewPCG(0x766f636162, 1))
	seen := make(map[string]bool, vocabSize)
	words := make([]string, 0, vocabSize)
	var sb strings.Builder
	for len(words) < vocabSize {
		sb.Reset()
		for range 1 + rng.IntN(4) {
			sb.WriteByte(consonants[rng.IntN(len(consonants))])
			sb.WriteByte(vowels[rng.IntN(len(vowels))])
		}
		if w := sb.String(); !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	return words
}()

// text returns n space-separated words drawn from rng.
func text(rng *rand.Rand, n int) string {
	var sb strings.Builder
	sb.Grow(n * 7)
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocab[rng.IntN(vocabSize)])
	}
	return sb.String()
}
