// Package jsonscan finds the extent of JSON values without decoding them:
// the skimming that session resolution does over request bodies and that
// usage reading does over answers.
//
// LLM request bodies are mostly long strings (prompts, code, tool output),
// and the fields wanted often sit after them: Claude Code sends "metadata"
// after the whole "messages" array. Skipping strings a word at a time and
// with bytes.IndexByte (SIMD) is several times faster on real bodies than
// walking every byte.
//
// The scanner is tolerant, not a validator: on malformed or truncated input
// it reports "not found" and never reads out of bounds.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// SkipSpace returns the index of the first non-whitespace byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// SkipString returns the index just past the string whose opening quote is at
// b[i], or -1 if it is not terminated.
//
// Code in prompts and tool output escapes a quote every few dozen bytes, and
// each escaped quote stops the search for the closing one. bytes.IndexByte is
// fastest over long runs but costs a call and setup per stop, which made it
// the bulk of a skim of such text; so the search first tests the next few
// words in place and calls IndexByte only when they hold no quote.
func SkipString(b []byte, i int) int {
	j := i + 1
	for {
		k := -1
		for end := min(len(b), j+SWARSpan) - 8; j <= end; j += 8 {
			if m := ByteMask(binary.LittleEndian.Uint64(b[j:j+8]), '"'); m != 0 {
				k = j + bits.TrailingZeros64(m)>>3
				break
			}
		}
		if k < 0 {
			if k = bytes.IndexByte(b[j:], '"'); k < 0 {
				return -1
			}
			k += j
		}
		if b[k-1] != '\\' {
			return k + 1
		}
		// The quote is escaped when an odd number of backslashes precede
		// it.
		p := k - 2
		for p > i && b[p] == '\\' {
			p--
		}
		if (k-1-p)%2 == 0 {
			return k + 1
		}
		j = k + 1
	}
}

// SWARSpan is how many bytes SkipString (and unescapeInto) test a word at a
// time before calling bytes.IndexByte: enough to span the usual gap between
// escapes in code, little enough that a long plain run soon gets the
// vectorised scan.
const SWARSpan = 128

// ByteMask returns a nonzero mask when byte c is among the 8 bytes of the
// little-endian word w; the lowest set bit is then bit 7 of the first such
// byte. It is the classic zero-byte test on x = w XOR c-repeated:
// (x-0x0101..) &^ x & 0x8080.. sets the high bit of every zero byte of x, and
// may also set it in a byte above a zero byte (through the borrow), but never
// below the first one.
func ByteMask(w uint64, c byte) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ (uint64(c) * ones)
	return (x - ones) &^ x & highs
}

// SkipValue returns the index just past the value that starts at b[i] (no
// leading whitespace), or -1 if it is malformed or truncated.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = SkipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	case '}', ']', ',', ':':
		return -1
	default: // number, true, false, null
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

// EachMember calls fn with the raw key (without quotes, escapes left as they
// are) and the raw value of every member of the object in b, in order, until
// fn returns false. It reports false when b is not a well-formed object as
// far as it was read.
func EachMember(b []byte, fn func(key, value []byte) bool) bool {
	i := SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end := SkipString(b, i)
		if end < 0 {
			return false
		}
		key := b[i+1 : end-1]
		i = SkipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = SkipSpace(b, i+1)
		end = SkipValue(b, i)
		if end < 0 {
			return false
		}
		if !fn(key, b[i:end]) {
			return true
		}
		i = SkipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = SkipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}
