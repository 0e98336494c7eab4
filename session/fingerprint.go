package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// This file derives a session id from the opening of a conversation, for
// clients that send no session header or body field.
//
// The id must be the same for every request of one conversation, although
// each request carries more turns than the one before, and the same request
// may be re-serialised by a proxy or SDK on the way. So the fingerprint covers
// only what a conversation fixes at its start (model, system part, tools, the
// items through the first user turn), and hashes JSON by meaning, not by
// bytes: whitespace is ignored, object members are combined in an
// order-independent way, strings are hashed as decoded text, numbers as
// values. What varies per request without changing the conversation is left
// out on purpose: "cache_control" markers (clients move them to the newest
// turn), Claude Code's x-anthropic-billing-header system line (it may carry
// a per-request token), context blocks that agents inject into the first
// user turn (injected.go), and dates in the system part and the first user
// turn (dates.go). A body with none of these hashes as it did before they
// were left out, so its id stays the same.
//
// Each part is reduced to a 64-bit structural hash (xxhash plus a mixer);
// the parts, the scope values and the model then go through SHA-256, so the
// id reveals nothing about the prompt and cannot be steered from one scope
// into another.

// fingerprintFields lists the top-level members that fingerprint and modelOf
// read. The resolver adds these names to the set a body skim collects.
var fingerprintFields = []string{
	"model",
	"messages",           // OpenAI chat, Anthropic
	"system",             // Anthropic
	"tools",              // all
	"functions",          // legacy OpenAI chat
	"input",              // OpenAI Responses
	"instructions",       // OpenAI Responses
	"contents",           // Gemini
	"systemInstruction",  // Gemini
	"system_instruction", // Gemini, snake-case spelling
}

const (
	// autoIDPrefix starts every fingerprint id, so that it can never be
	// mistaken for an id a client sent.
	autoIDPrefix = "auto-"
	// fingerprintDomain separates fingerprints from every other hash the
	// plugin makes. Bump the version when the hashed content changes.
	fingerprintDomain = "caddy-session-keeping/auto/v1\x00"
	// maxOpeningItems bounds how many conversation items are hashed when no
	// user turn comes early.
	maxOpeningItems = 8
	// maxHashDepth bounds JSON nesting in hashed values. Real requests nest a
	// few levels (tool schemas perhaps a dozen); a deeper body is refused
	// rather than recursed into.
	maxHashDepth = 128
	// billingHeaderPrefix starts the system line Claude Code adds to every
	// request. Its cch= token may change per request.
	billingHeaderPrefix = "x-anthropic-billing-header:"
)

// shape is the API dialect a conversation body was recognised as.
type shape byte

const (
	shapeNone      shape = iota
	shapeMessages        // OpenAI chat or Anthropic "messages"
	shapeResponses       // OpenAI Responses "input"
	shapeGemini          // Gemini "contents"
)

// mode says how the hasher treats a value: most values are hashed as they
// are; the system part and the first user turn have parts that vary per
// request, which their modes leave out.
type mode byte

const (
	modePlain       mode = iota
	modeSystem           // a system part: billing header left out, dates masked
	modeUserTurn         // the first user item: its content or parts are modeUserContent
	modeUserContent      // that turn's content: injected parts left out
	modeUserPart         // one part of that content: its text is modeUserText
	modeUserText         // text of that turn: injected blocks cut, dates masked
)

// memberMode returns the mode of the value of member key in an object of
// mode m.
func memberMode(m mode, key []byte) mode {
	switch m {
	case modeSystem:
		if textIs(key, "content") || textIs(key, "parts") || textIs(key, "text") {
			return modeSystem
		}
	case modeUserTurn:
		if textIs(key, "content") || textIs(key, "parts") {
			return modeUserContent
		}
	case modeUserContent, modeUserPart:
		if textIs(key, "text") {
			return modeUserText
		}
	}
	return modePlain
}

// role is the speaker of a conversation item, as far as the fingerprint
// cares.
type role byte

const (
	roleAbsent role = iota // the item has no "role" member
	roleUser
	roleSystem // "system" or "developer"
	roleOther
)

// Tags keep hashes of different kinds of values apart, so that for example
// the string "1" and the number 1, or [] and {}, never hash alike.
const (
	tagString uint64 = iota + 1
	tagNumber
	tagLiteral
	tagArray
	tagObject
	tagMember
	tagOpening
)

// fingerprint returns "auto-" followed by 32 lowercase hex digits when the
// body whose wanted top-level members are in f has a conversation shape, and
// ok=false otherwise. path is the request URL path; model is the request's
// model as modelOf finds it; scope is the list of scope values (tenant
// identity). The model and the scope are mixed into the fingerprint.
func fingerprint(f *fields, path, model string, scope []string) (id string, ok bool) {
	if !conversationPath(path) {
		return "", false
	}
	conv, sh := conversationOf(f, path)
	if sh == shapeNone {
		return "", false
	}

	var h hasher
	defer h.free()
	opening, items := h.opening(conv, sh)
	if items == 0 {
		// An empty conversation has nothing that tells it apart from any
		// other empty one of the same tenant.
		return "", false
	}
	// Each part goes in its own slot, with a presence bit, so that a
	// system prompt can never stand in for an instructions field and so on.
	var parts [6]uint64
	var present byte
	part := func(slot int, v []byte, m mode) {
		if v == nil {
			return
		}
		present |= 1 << slot
		parts[slot] = h.value(v, m)
	}
	parts[0], present = opening, 1
	part(1, f.get("system"), modeSystem)
	part(2, f.get("instructions"), modeSystem)
	gemini := f.get("systemInstruction")
	if gemini == nil {
		gemini = f.get("system_instruction")
	}
	part(3, gemini, modeSystem)
	part(4, f.get("tools"), modePlain)
	part(5, f.get("functions"), modePlain)
	if h.bad {
		return "", false
	}

	// Everything that goes into SHA-256 is length-prefixed or fixed-size,
	// so that no two different inputs share an encoding. The stack buffer
	// covers the common case without allocating.
	var stack [512]byte
	buf := append(stack[:0], fingerprintDomain...)
	buf = append(buf, byte(sh), present)
	buf = binary.AppendUvarint(buf, uint64(len(scope)))
	for _, s := range scope {
		buf = appendLenPrefixed(buf, s)
	}
	buf = appendLenPrefixed(buf, model)
	for _, p := range parts {
		buf = binary.LittleEndian.AppendUint64(buf, p)
	}
	sum := sha256.Sum256(buf)

	var out [len(autoIDPrefix) + 32]byte
	copy(out[:], autoIDPrefix)
	hex.Encode(out[len(autoIDPrefix):], sum[:16])
	return string(out[:]), true
}

// conversationOf finds the conversation array (or the Responses string
// input) of the body and the dialect it belongs to.
func conversationOf(f *fields, path string) ([]byte, shape) {
	if v := f.get("messages"); isArray(v) {
		return v, shapeMessages
	}
	if v := f.get("contents"); isArray(v) {
		return v, shapeGemini
	}
	if v := f.get("input"); len(v) > 0 {
		switch v[0] {
		case '[':
			return v, shapeResponses
		case '"':
			// Embeddings send a bare string input too; only the
			// Responses endpoint or its instructions field make one a
			// conversation.
			if f.get("instructions") != nil || hasPathSuffix(path, "/responses") {
				return v, shapeResponses
			}
		}
	}
	return nil, shapeNone
}

// isArray reports whether the raw value v is a JSON array. Values from a
// skim start at their first byte, so no whitespace needs skipping.
func isArray(v []byte) bool { return len(v) > 0 && v[0] == '[' }

// modelOf returns the model of the request: the top-level "model" string of
// the body (decoded, so JSON escapes are resolved), or for Gemini-style paths
// (".../models/<model>:<method>") the model in the path; "" if none.
func modelOf(f *fields, path string) string {
	if c, ok := stringContent(f.get("model")); ok {
		if bytes.IndexByte(c, '\\') < 0 {
			return string(c)
		}
		var stack [128]byte
		return string(appendUnescaped(stack[:0], c))
	}
	return pathModel(path)
}

// pathModel returns the model named in a Gemini-style path such as
// /v1beta/models/gemini-2.5-pro:generateContent or
// /v1/projects/p/locations/l/publishers/google/models/m:streamGenerateContent,
// or "" when the path has none.
func pathModel(path string) string {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	seg := path[i+len("/models/"):]
	if strings.IndexByte(seg, '/') >= 0 {
		return ""
	}
	colon := strings.LastIndexByte(seg, ':')
	if colon <= 0 || colon == len(seg)-1 {
		return ""
	}
	return seg[:colon]
}

// conversationPath reports false for known non-conversation endpoints: paths
// ending in /embeddings, /moderations or /files, paths with an audio or
// images segment (/v1/audio/speech, /v1/images/generations), and Gemini
// embedding methods. Their bodies may look like a Responses input, but they
// never get an auto id.
func conversationPath(path string) bool {
	path = trimPath(path)
	for {
		i := strings.IndexByte(path, '/')
		if i < 0 {
			break
		}
		seg := path[:i]
		if strings.EqualFold(seg, "audio") || strings.EqualFold(seg, "images") {
			return false
		}
		path = path[i+1:]
	}
	// path is now the last segment.
	if strings.EqualFold(path, "embeddings") || strings.EqualFold(path, "moderations") || strings.EqualFold(path, "files") {
		return false
	}
	if c := strings.LastIndexByte(path, ':'); c >= 0 {
		method := path[c+1:]
		if strings.EqualFold(method, "embedContent") || strings.EqualFold(method, "batchEmbedContents") {
			return false
		}
	}
	return true
}

// hasPathSuffix reports whether path, without query and trailing slashes,
// ends in suffix (ASCII case-insensitively).
func hasPathSuffix(path, suffix string) bool {
	path = trimPath(path)
	return len(path) >= len(suffix) && strings.EqualFold(path[len(path)-len(suffix):], suffix)
}

// trimPath cuts a query string (in case a caller passes a request URI) and
// trailing slashes from path.
func trimPath(path string) string {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.TrimRight(path, "/")
}

// hasher computes structural hashes of JSON values. It parses and hashes in
// one pass, so that a nested value is walked once rather than once per
// level. It lives on the stack of one fingerprint call; bad records that a
// value turned out to be malformed or nested too deeply, after which the
// result is not used.
type hasher struct {
	bad    bool
	depth  int
	digest xxhash.Digest
	// buf receives decoded text of escaped strings on its way to digest.
	buf [1024]byte
	// text holds the decoded text of an escaped string whose text is read
	// whole (dates, injected blocks); from textPool, given back by free.
	text *[]byte
	// injected reports that the last text, part or content hashed in a
	// user mode was injected context only.
	injected bool
}

// textPool recycles the buffers that escaped texts are decoded into.
var textPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// free gives back the hasher's text buffer.
func (h *hasher) free() {
	if h.text != nil {
		*h.text = (*h.text)[:0]
		textPool.Put(h.text)
		h.text = nil
	}
}

// decoded returns the decoded text of the raw string content c: c itself
// when it has no escapes, else a buffer that the next call reuses.
func (h *hasher) decoded(c []byte, escaped bool) []byte {
	if !escaped {
		return c
	}
	if h.text == nil {
		h.text = textPool.Get().(*[]byte)
	}
	// Decoded text is never longer than its escaped form.
	buf := slices.Grow((*h.text)[:0], len(c)+utf8.UTFMax)
	buf = buf[:cap(buf)]
	n := 0
	for len(c) > 0 {
		k, used := unescapeInto(buf[n:], c)
		n += k
		c = c[used:]
	}
	*h.text = buf[:0]
	return buf[:n]
}

// fail records a malformed value and returns what a parse step returns on
// failure: no hash, and an index past the end of b so that loops stop.
func (h *hasher) fail(b []byte) (uint64, int) {
	h.bad = true
	return 0, len(b)
}

// opening hashes the conversation items through the first user turn, at
// most maxOpeningItems of them, and reports how many it hashed. A user item
// of injected context only that another user item follows is not the first
// user turn and is left out (Codex sends its instructions and environment
// that way, and Gemini CLI's model router its session context): the turn is
// the next one. A Responses
// string input is hashed as the one-item list [{"role":"user","content":s}]
// that SDKs replay it as on the next turn.
func (h *hasher) opening(conv []byte, sh shape) (sum uint64, items int) {
	acc := combine(tagOpening, tagArray)
	if conv[0] == '"' {
		item := combine(combine(tagMember, h.name("role")), h.name("user")) +
			combine(combine(tagMember, h.name("content")), h.value(conv, modeUserContent))
		acc = combine(acc, combine(combine(tagObject, item), 2))
		return combine(acc, 1), 1
	}
	i := skipSpace(conv, 1)
	if i < len(conv) && conv[i] == ']' {
		return combine(acc, 0), 0
	}
	for i < len(conv) && items < maxOpeningItems {
		// The role decides how the item is hashed, and it may come after
		// the content, so it is looked up first; the lookup stops at the
		// role member.
		r := roleOf(conv[i:])
		// Gemini defaults a content without a role to the user.
		user := r == roleUser || (r == roleAbsent && sh == shapeGemini)
		m := modePlain
		switch {
		case user:
			m = modeUserTurn
		case r == roleSystem:
			m = modeSystem
		}
		var item uint64
		h.injected = false
		at := i
		item, i = h.valueAt(conv, i, m)
		if h.bad {
			return 0, 0
		}
		if user && h.injected && h.userFollows(conv, at, sh) {
			// Context only, and the turn is the next item.
			i = skipSpace(conv, skipSpace(conv, i)+1)
			continue
		}
		acc = combine(acc, item)
		items++
		if user {
			break
		}
		i = skipSpace(conv, i)
		if i >= len(conv) || (conv[i] != ',' && conv[i] != ']') {
			h.bad = true
			return 0, 0
		}
		if conv[i] == ']' {
			break
		}
		i = skipSpace(conv, i+1)
	}
	return combine(acc, uint64(items)), items
}

// userFollows reports whether the conversation item after the one at
// conv[i] is a user item.
func (h *hasher) userFollows(conv []byte, i int, sh shape) bool {
	if i = skipValue(conv, i); i < 0 {
		return false
	}
	if i = skipSpace(conv, i); i >= len(conv) || conv[i] != ',' {
		return false
	}
	r := roleOf(conv[skipSpace(conv, i+1):])
	return r == roleUser || (r == roleAbsent && sh == shapeGemini)
}

// roleOf returns the role of the conversation item at the start of b: the
// decoded "role" string of an object (the first one, if the member is
// duplicated). b may extend past the item.
func roleOf(b []byte) role {
	r := roleAbsent
	eachMember(b, func(key, value []byte) bool {
		if !textIs(key, "role") {
			return true
		}
		r = roleOther
		if c, ok := stringContent(value); ok {
			switch {
			case textIs(c, "user"):
				r = roleUser
			case textIs(c, "system"), textIs(c, "developer"):
				r = roleSystem
			}
		}
		return false
	})
	return r
}

// value returns the structural hash of the raw JSON value v (see valueAt).
func (h *hasher) value(v []byte, m mode) uint64 {
	sum, end := h.valueAt(v, 0, m)
	if end != len(v) {
		h.bad = true
	}
	return sum
}

// valueAt hashes the JSON value that starts at b[i] and returns its hash and
// the index just past it. The hash is equal for values that decode to the
// same data, whatever the whitespace, member order and string escapes, and
// ignores every object member named cache_control.
//
// The mode leaves out what varies per request (see mode): in a system part,
// a Claude Code billing header (a leading line of a string, or an array
// element whose "text" starts with "x-anthropic-billing-header:") and dates;
// in the first user turn, injected context blocks and dates. Modes pass to
// the "content", "parts" and "text" members of objects and to the elements
// of arrays (see memberMode).
func (h *hasher) valueAt(b []byte, i int, m mode) (uint64, int) {
	if i >= len(b) {
		return h.fail(b)
	}
	switch c := b[i]; {
	case c == '"':
		return h.stringAt(b, i, m)
	case c == '{':
		return h.objectAt(b, i, m)
	case c == '[':
		return h.arrayAt(b, i, m)
	case c == 't':
		return h.literalAt(b, i, "true")
	case c == 'f':
		return h.literalAt(b, i, "false")
	case c == 'n':
		return h.literalAt(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		j := i + 1
		for j < len(b) && isNumberByte(b[j]) {
			j++
		}
		return h.number(b[i:j]), j
	default:
		return h.fail(b)
	}
}

// isNumberByte reports whether c may appear in a JSON number.
func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// literalAt hashes the literal lit, expected at b[i].
func (h *hasher) literalAt(b []byte, i int, lit string) (uint64, int) {
	end := i + len(lit)
	if end > len(b) || string(b[i:end]) != lit || (end < len(b) && isNumberByte(b[end])) {
		return h.fail(b)
	}
	return combine(tagLiteral, xxhash.Sum64String(lit)), end
}

// stringAt hashes the string whose opening quote is at b[i] (see
// stringHash). In a system part a leading billing-header line is left out;
// in the first user turn, injected blocks at its start and end are; in
// both, dates are masked.
func (h *hasher) stringAt(b []byte, i int, m mode) (uint64, int) {
	c, end, escaped := stringAt(b, i)
	if end < 0 {
		return h.fail(b)
	}
	switch m {
	case modePlain, modeUserTurn:
	case modeSystem:
		if hasDecodedPrefix(c, billingHeaderPrefix) {
			c = afterFirstLine(c)
			escaped = escaped && bytes.IndexByte(c, '\\') >= 0
		}
		if mayHaveDate(c) {
			return h.textHash(h.decoded(c, escaped)), end
		}
	default:
		tagged := mayBeTagged(c)
		if tagged || mayHaveDate(c) {
			text := h.decoded(c, escaped)
			kept, only := cutInjected(text)
			h.injected = only
			return h.textHash(kept), end
		}
	}
	// Nothing to leave out: the text as it is, decoded on the fly.
	if !escaped {
		return combine(tagString, xxhash.Sum64(c)), end
	}
	return h.stringHash(c), end
}

// mayHaveDate reports whether the raw string content c may hold a date: a
// year of the 2000s has its digits unescaped in any JSON encoder's output.
func mayHaveDate(c []byte) bool { return bytes.Contains(c, []byte("20")) }

// mayBeTagged reports whether the raw string content c may start or end
// with a tag, after white space: with '<' or '>', or their \u escapes.
func mayBeTagged(c []byte) bool {
	i := 0
	for i < len(c) {
		if c[i] == ' ' {
			i++
		} else if c[i] == '\\' && i+1 < len(c) && (c[i+1] == 'n' || c[i+1] == 't' || c[i+1] == 'r') {
			i += 2
		} else {
			break
		}
	}
	if i < len(c) && (c[i] == '<' || (c[i] == '\\' && i+6 <= len(c) && bytes.EqualFold(c[i:i+6], []byte(`\u003c`)))) {
		return true
	}
	j := len(c)
	for j > 0 {
		if c[j-1] == ' ' {
			j--
		} else if j >= 2 && c[j-2] == '\\' && (c[j-1] == 'n' || c[j-1] == 't' || c[j-1] == 'r') {
			j -= 2
		} else {
			break
		}
	}
	return j > 0 && (c[j-1] == '>' || (j >= 6 && bytes.EqualFold(c[j-6:j], []byte(`\u003e`))))
}

// textHash returns the hash of decoded text with every date in it replaced
// by dateMarker; for a text without dates, the hash of the text as it is.
func (h *hasher) textHash(text []byte) uint64 {
	start, end := nextDate(text, 0)
	if start < 0 {
		return combine(tagString, xxhash.Sum64(text))
	}
	h.digest.Reset()
	at := 0
	for start >= 0 {
		h.digest.Write(text[at:start])
		h.digest.WriteString(dateMarker)
		at = end
		start, end = nextDate(text, end)
	}
	h.digest.Write(text[at:])
	return combine(tagString, h.digest.Sum64())
}

// stringAt returns the raw content of the string whose opening quote is at
// b[i], the index just past it (-1 if it is not terminated), and whether the
// content has escapes. An unescaped string, the common case, costs two
// vectorised scans.
func stringAt(b []byte, i int) (content []byte, end int, escaped bool) {
	q := bytes.IndexByte(b[i+1:], '"')
	if q < 0 {
		return nil, -1, false
	}
	if bytes.IndexByte(b[i+1:i+1+q], '\\') < 0 {
		return b[i+1 : i+1+q], i + q + 2, false
	}
	end = skipString(b, i)
	if end < 0 {
		return nil, -1, false
	}
	return b[i+1 : end-1], end, true
}

// objectAt hashes the object that starts at b[i] independently of member
// order: member hashes are summed, which commutes, and the count is mixed in
// so that duplicate members do not cancel out.
func (h *hasher) objectAt(b []byte, i int, m mode) (uint64, int) {
	if h.depth >= maxHashDepth {
		return h.fail(b)
	}
	h.depth++
	defer func() { h.depth-- }()
	var sum, n uint64
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return combine(combine(tagObject, 0), 0), i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return h.fail(b)
		}
		key, end, escaped := stringAt(b, i)
		if end < 0 {
			return h.fail(b)
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return h.fail(b)
		}
		i = skipSpace(b, i+1)
		if textIs(key, "cache_control") {
			// Left out unhashed, and so unchecked beyond its extent.
			if i = skipValue(b, i); i < 0 {
				return h.fail(b)
			}
		} else {
			var kh, vh uint64
			if escaped {
				kh = h.stringHash(key)
			} else {
				kh = combine(tagString, xxhash.Sum64(key))
			}
			vh, i = h.valueAt(b, i, memberMode(m, key))
			if h.bad {
				return 0, len(b)
			}
			sum += combine(combine(tagMember, kh), vh)
			n++
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return h.fail(b)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return combine(combine(tagObject, sum), n), i + 1
		default:
			return h.fail(b)
		}
	}
}

// arrayAt hashes the array that starts at b[i], in order. Billing-header
// blocks of a system part are left out, as if the client had not sent them,
// and so are the injected parts of the first user turn's content when it has
// other parts: the array is then hashed as if only those were there.
func (h *hasher) arrayAt(b []byte, i int, m mode) (uint64, int) {
	if h.depth >= maxHashDepth {
		return h.fail(b)
	}
	h.depth++
	defer func() { h.depth-- }()
	acc, n := tagArray, uint64(0)
	// kept and nKept hash the elements that are not injected parts.
	kept, nKept := tagArray, uint64(0)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return combine(acc, 0), i + 1
	}
	em := modePlain
	switch m {
	case modeSystem:
		em = modeSystem
	case modeUserContent:
		em = modeUserPart
	}
	for {
		if m == modeSystem && isBillingBlock(b[i:]) {
			if i = skipValue(b, i); i < 0 {
				return h.fail(b)
			}
		} else {
			var eh uint64
			h.injected = false
			eh, i = h.valueAt(b, i, em)
			if h.bad {
				return 0, len(b)
			}
			acc = combine(acc, eh)
			n++
			if !h.injected {
				kept = combine(kept, eh)
				nKept++
			}
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return h.fail(b)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			if m != modeUserContent {
				return combine(acc, n), i + 1
			}
			// The content is injected context only when every part is.
			h.injected = n > 0 && nKept == 0
			if nKept > 0 && nKept < n {
				return combine(kept, nKept), i + 1
			}
			return combine(acc, n), i + 1
		default:
			return h.fail(b)
		}
	}
}

// isBillingBlock reports whether the value at the start of b is an object
// whose "text" member starts with the billing header. b may extend past the
// value.
func isBillingBlock(b []byte) bool {
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	billing := false
	eachMember(b, func(key, value []byte) bool {
		if !textIs(key, "text") {
			return true
		}
		if c, ok := stringContent(value); ok {
			billing = hasDecodedPrefix(c, billingHeaderPrefix)
		}
		return false
	})
	return billing
}

// stringHash returns the hash of the string whose raw content (between the
// quotes) is c, as decoded text. A string without escapes is its own decoded
// text and is hashed in place; an escaped one is decoded a buffer at a time
// into the streaming digest, which gives the same hash.
func (h *hasher) stringHash(c []byte) uint64 {
	if bytes.IndexByte(c, '\\') < 0 {
		return combine(tagString, xxhash.Sum64(c))
	}
	h.digest.Reset()
	for len(c) > 0 {
		n, used := unescapeInto(h.buf[:], c)
		h.digest.Write(h.buf[:n])
		c = c[used:]
	}
	return combine(tagString, h.digest.Sum64())
}

// name returns the hash of a Go string, equal to stringHash of a JSON string
// with that text.
func (h *hasher) name(s string) uint64 {
	return combine(tagString, xxhash.Sum64String(s))
}

// number hashes a JSON number by value, so that 100, 100.0 and 1e2 agree.
// Integers of up to 15 digits, the usual case, skip strconv.
func (h *hasher) number(v []byte) uint64 {
	if i, ok := smallInt(v); ok {
		return combine(tagNumber, math.Float64bits(float64(i)))
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			// Valid JSON beyond float64: hash the digits as they are.
			return combine(tagNumber, xxhash.Sum64(v))
		}
		h.bad = true
		return 0
	}
	if f == 0 {
		f = 0 // -0 and 0 are the same number
	}
	return combine(tagNumber, math.Float64bits(f))
}

// smallInt parses v as a JSON integer of at most 15 digits.
func smallInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 15 || (v[0] == '0' && len(v) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// combine mixes v into h. It is not commutative, and for a fixed h it maps
// distinct v to distinct results.
func combine(h, v uint64) uint64 {
	return mix64(h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2))
}

// mix64 is the 64-bit finaliser of MurmurHash3: a bijection whose every
// output bit depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// stringContent returns the raw content between the quotes of the JSON
// string v, and false when v is not a string.
func stringContent(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	return v[1 : len(v)-1], true
}

// textIs reports whether the raw string content c decodes to s. Only short
// escaped strings are decoded; the names compared here are short.
func textIs(c []byte, s string) bool {
	if bytes.IndexByte(c, '\\') < 0 {
		return string(c) == s
	}
	if len(c) > 6*len(s) {
		return false // more bytes than s could take even fully escaped
	}
	var stack [96]byte
	return string(appendUnescaped(stack[:0], c)) == s
}

// hasDecodedPrefix reports whether the raw string content c decodes to text
// starting with prefix.
func hasDecodedPrefix(c []byte, prefix string) bool {
	var stack [64]byte
	dst := stack[:]
	if len(prefix) < len(dst) {
		dst = dst[:len(prefix)]
	}
	n, _ := unescapeInto(dst, c)
	return n == len(prefix) && string(dst[:n]) == prefix
}

// afterFirstLine returns the raw string content c from just after its first
// newline (a raw byte, \n, or \u000a), or an empty slice if it has none.
func afterFirstLine(c []byte) []byte {
	for i := 0; i < len(c); i++ {
		switch c[i] {
		case '\n':
			return c[i+1:]
		case '\\':
			if i+1 >= len(c) {
				return c[len(c):]
			}
			if c[i+1] == 'n' {
				return c[i+2:]
			}
			if c[i+1] == 'u' && i+6 <= len(c) {
				if r, ok := hex4(c[i+2 : i+6]); ok && r == '\n' {
					return c[i+6:]
				}
			}
			i++ // the escaped character cannot end the line
		}
	}
	return c[len(c):]
}

// appendUnescaped appends the decoded text of the raw string content src to
// dst. Invalid escapes are kept as they are; lone surrogates become U+FFFD.
func appendUnescaped(dst, src []byte) []byte {
	for len(src) > 0 {
		k := bytes.IndexByte(src, '\\')
		if k < 0 {
			return append(dst, src...)
		}
		dst = append(dst, src[:k]...)
		var unit [utf8.UTFMax]byte
		n, w := unescapeOne(unit[:], src[k:])
		dst = append(dst, unit[:n]...)
		src = src[k+w:]
	}
	return dst
}

// unescapeInto decodes as much of the raw string content src into dst as
// fits and reports the bytes written and the bytes of src consumed. It
// consumes at least one byte when dst has room for utf8.UTFMax bytes.
func unescapeInto(dst, src []byte) (n, used int) {
	for used < len(src) && n < len(dst) {
		// Copy plain bytes a word at a time, and decode two-byte escapes
		// such as \n or \" on the way. Code escapes a character every few
		// bytes, too often for a call to bytes.IndexByte and unescapeOne
		// per escape to pay off. A word is stored whole: the bytes after a
		// backslash in it are overwritten next.
		for plain := 0; plain < swarSpan && used+8 <= len(src) && n+8 <= len(dst); {
			w := binary.LittleEndian.Uint64(src[used : used+8])
			binary.LittleEndian.PutUint64(dst[n:n+8], w)
			m := byteMask(w, '\\')
			if m == 0 {
				n += 8
				used += 8
				plain += 8
				continue
			}
			k := bits.TrailingZeros64(m) >> 3
			n += k
			used += k
			if used+1 >= len(src) || shortEscapes[src[used+1]] == 0 {
				break
			}
			dst[n] = shortEscapes[src[used+1]]
			n++
			used += 2
			plain = 0
		}
		if used >= len(src) || n >= len(dst) {
			break
		}
		if src[used] != '\\' {
			// A long run, or the last few bytes: look for an escape only
			// as far as the room left in dst, so that a long run is
			// scanned once, not once per call.
			end := min(len(src), used+len(dst)-n)
			k := bytes.IndexByte(src[used:end], '\\')
			if k < 0 {
				k = end - used
			}
			copy(dst[n:], src[used:used+k])
			n += k
			used += k
			continue
		}
		var unit [utf8.UTFMax]byte
		u, w := unescapeOne(unit[:], src[used:])
		if n+u > len(dst) {
			break
		}
		copy(dst[n:], unit[:u])
		n += u
		used += w
	}
	return n, used
}

// unescapeOne decodes the escape sequence at the start of s (s[0] is a
// backslash) into out and reports the bytes written and the bytes of s it
// spans. An invalid escape decodes to the backslash alone, so that the
// characters after it are kept as they are.
func unescapeOne(out []byte, s []byte) (n, width int) {
	if len(s) < 2 {
		out[0] = '\\'
		return 1, 1
	}
	if c := shortEscapes[s[1]]; c != 0 {
		out[0] = c
		return 1, 2
	}
	if s[1] != 'u' {
		out[0] = '\\'
		return 1, 1
	}
	r, ok := hex4(s[2:])
	if !ok {
		out[0] = '\\'
		return 1, 1
	}
	width = 6
	if utf16.IsSurrogate(r) {
		r2, ok := rune(0), false
		if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			r2, ok = hex4(s[8:])
		}
		if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
			r, width = d, 12
		} else {
			r = utf8.RuneError
		}
	}
	return utf8.EncodeRune(out, r), width
}

// shortEscapes maps the character after a backslash to what the two-byte
// escape decodes to, and every other character to 0.
var shortEscapes = [256]byte{
	'"': '"', '\\': '\\', '/': '/',
	'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t',
}

// hex4 parses the four hex digits at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
