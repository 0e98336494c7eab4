package session

import (
	"bytes"
	"strings"
)

// This file finds dates (and the time of day that follows one) in the text
// of a conversation's opening. Agents write today's date into their system
// prompt or first user turn, and some rebuild it for every request, so a
// session that runs past midnight would otherwise get a new id. The
// fingerprint hashes each date found here as one fixed marker.
//
// A date is recognised by its year, 2000–2099, written as four digits:
//
//	2026-12-03, 2026/12/03, 2026-12-03T07:24:29Z, 2026-12-03 07:24
//	12/3/2026, 3.12.2026, 12/3/2026, 7:30:00 AM
//	Thursday, December 3, 2026   Thu Dec 03 2026   3 December 2026
//
// A year alone is not a date, nor is a number that merely starts with 20.

// dateMarker stands for every date in a hashed text.
const dateMarker = "\x00date\x00"

// nextDate returns the bounds of the first date in text at or after from,
// or -1, -1 when there is none.
func nextDate(text []byte, from int) (start, end int) {
	for i := from; i < len(text); {
		k := bytes.Index(text[i:], []byte("20"))
		if k < 0 {
			break
		}
		y := i + k
		i = y + 1
		if y+4 > len(text) || !isDigit(text[y+2]) || !isDigit(text[y+3]) ||
			(y > 0 && isAlnum(text[y-1])) || (y+4 < len(text) && isAlnum(text[y+4])) {
			continue
		}
		if e := numericAfterYear(text, y+4); e > 0 {
			return y, timeAfter(text, e)
		}
		if s := dateBeforeYear(text, y); s >= 0 {
			return s, timeAfter(text, y+4)
		}
	}
	return -1, -1
}

// numericAfterYear matches -MM-DD (or with / or .) at text[p], after a
// year, and returns the end of the date, or -1.
func numericAfterYear(text []byte, p int) int {
	if p >= len(text) || !isDateSep(text[p]) {
		return -1
	}
	sep := text[p]
	p = digitsAt(text, p+1, 1, 2)
	if p < 0 || p >= len(text) || text[p] != sep {
		return -1
	}
	p = digitsAt(text, p+1, 1, 2)
	if p < 0 || (p < len(text) && isDigit(text[p])) {
		return -1
	}
	return p
}

// dateBeforeYear matches what comes before a year at text[y]: D/M/ or M/D/
// (or with - or .), or words and numbers such as "Thursday, December 3, "
// that include a month's name. It returns the start of the date, or -1.
func dateBeforeYear(text []byte, y int) int {
	if y >= 5 && isDateSep(text[y-1]) {
		sep := text[y-1]
		p := digitsBack(text, y-1, 1, 2)
		if p > 0 && text[p-1] == sep {
			if q := digitsBack(text, p-1, 1, 2); q >= 0 && (q == 0 || !isAlnum(text[q-1])) {
				return q
			}
		}
		return -1
	}
	// Words and numbers, each followed by a space or ", ".
	start, month := -1, false
	p := y
	for range 4 {
		if p >= 2 && text[p-1] == ' ' && text[p-2] == ',' {
			p -= 2
		} else if p >= 1 && text[p-1] == ' ' {
			p--
		} else {
			break
		}
		e := p
		if e > 0 && text[e-1] == '.' { // "Dec." is "Dec"
			e--
		}
		w := e
		for w > 0 && isAlnum(text[w-1]) {
			w--
		}
		tok := text[w:e]
		switch {
		case isMonth(tok):
			month = true
		case isWeekday(tok):
			if month {
				return w
			}
			return -1
		case isDay(tok):
		default:
			if month {
				return start
			}
			return -1
		}
		start, p = w, w
	}
	if month {
		return start
	}
	return -1
}

// timeAfter extends a date ending at text[p] by a time of day that follows
// it ("T07:24:29Z", " 07:24", ", 7:30:00 AM") and returns the new end.
func timeAfter(text []byte, p int) int {
	q := p
	switch {
	case q < len(text) && (text[q] == 'T' || text[q] == ' '):
		q++
	case q+1 < len(text) && text[q] == ',' && text[q+1] == ' ':
		q += 2
	default:
		return p
	}
	q = digitsAt(text, q, 1, 2)
	if q < 0 || q >= len(text) || text[q] != ':' {
		return p
	}
	if q = digitsAt(text, q+1, 2, 2); q < 0 {
		return p
	}
	if q < len(text) && text[q] == ':' { // seconds
		if r := digitsAt(text, q+1, 2, 2); r > 0 {
			q = r
			if q < len(text) && text[q] == '.' {
				if r := digitsAt(text, q+1, 1, 9); r > 0 {
					q = r
				}
			}
		}
	}
	r := q
	if r < len(text) && text[r] == ' ' {
		r++
	}
	if r+1 < len(text) && (text[r]|0x20 == 'a' || text[r]|0x20 == 'p') && text[r+1]|0x20 == 'm' &&
		(r+2 == len(text) || !isAlnum(text[r+2])) {
		return r + 2
	}
	if q < len(text) && text[q] == 'Z' {
		return q + 1
	}
	if q < len(text) && (text[q] == '+' || text[q] == '-') {
		if r := digitsAt(text, q+1, 2, 2); r > 0 {
			if r < len(text) && text[r] == ':' {
				r++
			}
			if r2 := digitsAt(text, r, 2, 2); r2 > 0 {
				return r2
			}
		}
	}
	return q
}

// digitsAt returns the index past min to max digits at text[p], or -1.
func digitsAt(text []byte, p, min, max int) int {
	n := 0
	for p+n < len(text) && n < max && isDigit(text[p+n]) {
		n++
	}
	if n < min {
		return -1
	}
	return p + n
}

// digitsBack returns the index of the first of min to max digits that end
// just before text[p], or -1 (also when more digits precede them).
func digitsBack(text []byte, p, min, max int) int {
	n := 0
	for p-n > 0 && n < max && isDigit(text[p-n-1]) {
		n++
	}
	if n < min || (p-n > 0 && isDigit(text[p-n-1])) {
		return -1
	}
	return p - n
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlnum(c byte) bool   { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isDateSep(c byte) bool { return c == '-' || c == '/' || c == '.' }

// isDay reports whether tok is a day of the month: 1–2 digits, perhaps with
// an English ordinal suffix.
func isDay(tok []byte) bool {
	n := digitsAt(tok, 0, 1, 2)
	if n < 0 {
		return false
	}
	suffix := string(tok[n:])
	return suffix == "" || strings.EqualFold(suffix, "st") || strings.EqualFold(suffix, "nd") ||
		strings.EqualFold(suffix, "rd") || strings.EqualFold(suffix, "th")
}

var (
	monthNames   = []string{"january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "sept"}
	weekdayNames = []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)

// isMonth reports whether tok is an English month name or its first three
// letters, in any case.
func isMonth(tok []byte) bool { return isName(tok, monthNames) }

// isWeekday reports whether tok is an English weekday name or its first
// three letters, in any case.
func isWeekday(tok []byte) bool { return isName(tok, weekdayNames) }

func isName(tok []byte, names []string) bool {
	if len(tok) < 3 || len(tok) > 9 {
		return false
	}
	var lower [9]byte
	for i, c := range tok {
		lower[i] = c | 0x20
	}
	w := string(lower[:len(tok)])
	for _, n := range names {
		if w == n || (len(w) == 3 && n[:3] == w) {
			return true
		}
	}
	return false
}
