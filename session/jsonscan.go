package session

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
)

// This file skims JSON: it finds the extent of values without decoding them.
//
// LLM request bodies are mostly long strings (prompts, code, tool output), and
// the fields we need often sit after them: Claude Code sends "metadata" after
// the whole "messages" array. gjson finds such a field correctly but walks
// every byte of every string; skipping strings with bytes.IndexByte (SIMD)
// instead makes the skim several times faster on real bodies. gjson is still
// what decodes the small values once they are found.
//
// The skimmer is tolerant, not a validator: on malformed or truncated input it
// reports "not found" and never reads out of bounds.

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
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

// skipString returns the index just past the string whose opening quote is at
// b[i], or -1 if it is not terminated.
//
// Code in prompts and tool output escapes a quote every few dozen bytes, and
// each escaped quote stops the search for the closing one. bytes.IndexByte is
// fastest over long runs but costs a call and setup per stop, which made it
// the bulk of a skim of such text; so the search first tests the next few
// words in place and calls IndexByte only when they hold no quote.
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := -1
		for end := min(len(b), j+swarSpan) - 8; j <= end; j += 8 {
			if m := byteMask(binary.LittleEndian.Uint64(b[j:j+8]), '"'); m != 0 {
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

// swarSpan is how many bytes skipString (and unescapeInto) test a word at a
// time before calling bytes.IndexByte: enough to span the usual gap between
// escapes in code, little enough that a long plain run soon gets the
// vectorised scan.
const swarSpan = 128

// byteMask returns a nonzero mask when byte c is among the 8 bytes of the
// little-endian word w; the lowest set bit is then bit 7 of the first such
// byte. It is the classic zero-byte test on x = w XOR c-repeated:
// (x-0x0101..) &^ x & 0x8080.. sets the high bit of every zero byte of x, and
// may also set it in a byte above a zero byte (through the borrow), but never
// below the first one.
func byteMask(w uint64, c byte) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ (uint64(c) * ones)
	return (x - ones) &^ x & highs
}

// skipValue returns the index just past the value that starts at b[i] (no
// leading whitespace), or -1 if it is malformed or truncated.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
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

// eachMember calls fn with the raw key (without quotes, escapes left as they
// are) and the raw value of every member of the object in b, in order, until
// fn returns false. It reports false when b is not a well-formed object as
// far as it was read.
func eachMember(b []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		if b[i] != '"' {
			return false
		}
		end := skipString(b, i)
		if end < 0 {
			return false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		end = skipValue(b, i)
		if end < 0 {
			return false
		}
		if !fn(key, b[i:end]) {
			return true
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}

// maxFields bounds how many top-level members one skim collects.
const maxFields = 32

// fields holds the raw values of selected top-level members of a JSON object,
// found in one skim. The first occurrence of a duplicated key wins, as in
// gjson.
type fields struct {
	names []string // wanted names, at most maxFields; shared, read-only
	vals  [maxFields][]byte
	body  []byte // the whole body skimmed
}

// skim fills f from body. It stops as soon as every wanted member is found.
// It reports false when body is not a JSON object.
func (f *fields) skim(body []byte) bool {
	f.body = body
	missing := len(f.names)
	return eachMember(body, func(key, value []byte) bool {
		for i, name := range f.names {
			if f.vals[i] == nil && len(name) == len(key) && string(key) == name {
				f.vals[i] = value
				missing--
				break
			}
		}
		return missing > 0
	})
}

// get returns the raw value of the wanted member name, or nil if the body has
// none (or name was not wanted).
func (f *fields) get(name string) []byte {
	if i := slices.Index(f.names, name); i >= 0 {
		return f.vals[i]
	}
	return nil
}
