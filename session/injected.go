package session

import "bytes"

// This file recognises context that agents inject into a user turn: blocks
// of text wrapped in a tag of the agents' own, such as
//
//	<system-reminder>
//	The current date is: Thursday, December 3, 2026.
//	</system-reminder>
//
// Agents add, drop and rewrite such blocks in the first user turn from one
// request to the next (Qwen Code moves its date reminder to the newest turn
// once the conversation goes on; Gemini CLI rebuilds its session context on
// a resume), so the fingerprint leaves them out of that turn whenever the
// turn has something else: the user's own words.
//
// Only the tags below count. Users wrap their own text in tags too (a
// pasted <file>, a <task>), and two prompts that differ only there must
// keep two ids.

// contextTags are the tags of injected context, by the agents that use
// them.
var contextTags = []string{
	"system-reminder",     // Claude Code, Qwen Code
	"session_context",     // Gemini CLI
	"environment_details", // Cline, Kilo Code, Roo Code
	"environment_context", // Codex CLI
	"user_instructions",   // Codex CLI
}

// maxTagName bounds the tag names recognised.
const maxTagName = 64

// cutInjected returns text without the injected blocks at its start and its
// end and the white space around them, or text as it is when nothing else
// would remain; only reports that case, text of injected blocks only.
func cutInjected(text []byte) (kept []byte, only bool) {
	rest := bytes.TrimSpace(text)
	cut := false
	for {
		end := blockAt(rest)
		if end < 0 {
			break
		}
		rest, cut = bytes.TrimLeft(rest[end:], " \t\r\n"), true
	}
	for {
		start := blockEndingAt(rest)
		if start < 0 {
			break
		}
		rest, cut = bytes.TrimRight(rest[:start], " \t\r\n"), true
	}
	if !cut || len(rest) == 0 {
		return text, cut
	}
	return rest, false
}

// blockAt returns the end of the context block <name …>…</name> that
// starts text, or -1.
func blockAt(text []byte) int {
	name, open := tagAt(text)
	if open < 0 || !isContextTag(name) {
		return -1
	}
	var stack [maxTagName + 3]byte
	closing := append(append(append(stack[:0], "</"...), name...), '>')
	k := bytes.Index(text[open:], closing)
	if k < 0 {
		return -1
	}
	return open + k + len(closing)
}

// blockEndingAt returns the start of the context block <name …>…</name>
// that ends text, or -1.
func blockEndingAt(text []byte) int {
	if len(text) < 4 || text[len(text)-1] != '>' {
		return -1
	}
	lt := bytes.LastIndex(text, []byte("</"))
	if lt < 0 {
		return -1
	}
	name := text[lt+2 : len(text)-1]
	if !isContextTag(name) {
		return -1
	}
	// The last opening tag of that name before the closing one.
	var stack [maxTagName + 1]byte
	opening := append(append(stack[:0], '<'), name...)
	for end := lt; ; {
		i := bytes.LastIndex(text[:end], opening)
		if i < 0 {
			return -1
		}
		if n, open := tagAt(text[i:]); open > 0 && bytes.Equal(n, name) && i+open <= lt {
			return i
		}
		end = i
	}
}

// tagAt parses an opening tag <name> or <name attributes…> at the start of
// text and returns its name and the index past its '>', or -1.
func tagAt(text []byte) (name []byte, end int) {
	if len(text) < 3 || text[0] != '<' {
		return nil, -1
	}
	n := 1
	for n < len(text) && n <= maxTagName && isTagByte(text[n]) {
		n++
	}
	name = text[1:n]
	if !isTagName(name) || n >= len(text) {
		return nil, -1
	}
	switch text[n] {
	case '>':
		return name, n + 1
	case ' ', '\t', '\n', '\r':
		gt := bytes.IndexByte(text[n:], '>')
		if gt < 0 || text[n+gt-1] == '/' { // <name/> is empty: no block
			return nil, -1
		}
		return name, n + gt + 1
	}
	return nil, -1
}

// isContextTag reports whether name is one of contextTags.
func isContextTag(name []byte) bool {
	for _, t := range contextTags {
		if string(name) == t {
			return true
		}
	}
	return false
}

// isTagName reports whether name is a tag name: a letter, then letters,
// digits, '-', '_', '.' or ':'.
func isTagName(name []byte) bool {
	if len(name) == 0 || len(name) > maxTagName || name[0]|0x20 < 'a' || name[0]|0x20 > 'z' {
		return false
	}
	for _, c := range name {
		if !isTagByte(c) {
			return false
		}
	}
	return true
}

func isTagByte(c byte) bool { return isAlnum(c) || c == '-' || c == '_' || c == '.' || c == ':' }
