// Package usage reads the token usage that LLM APIs report in their
// answers, as the answer streams past, without changing or holding it: the
// prompt tokens of a request and how many of them the upstream found in its
// prompt cache, and the id of a stored response (OpenAI Responses).
//
// It knows the usage objects of OpenAI chat completions
// (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens), OpenAI
// Responses (usage.input_tokens, usage.input_tokens_details.cached_tokens),
// Anthropic messages (usage.input_tokens, cache_read_input_tokens,
// cache_creation_input_tokens) and Gemini (usageMetadata.promptTokenCount,
// cachedContentTokenCount), in JSON answers and in server-sent event
// streams. vLLM and SGLang answer in the OpenAI forms.
package usage

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sessionkeeping/caddy-session-keeping/internal/jsonscan"
)

// Usage is what an answer reported.
type Usage struct {
	// Prompt is every prompt token of the request, cached or not.
	Prompt int64
	// Cached is the prompt tokens the upstream read from its prompt cache.
	Cached int64
	// Found reports that the answer carried a usage object.
	Found bool
	// ResponseID is the id of an OpenAI Responses answer ("resp_…"), which
	// a later request may continue with previous_response_id.
	ResponseID string
}

// Outcome says why an answer's usage was or was not read.
type Outcome byte

const (
	Read        Outcome = iota // usage found
	NoUsage                    // a JSON or event-stream answer without a usage object
	Compressed                 // the answer has a Content-Encoding: not decoded
	Unsupported                // neither JSON nor an event stream
)

// String returns the outcome's metric label.
func (o Outcome) String() string {
	switch o {
	case Read:
		return "read"
	case NoUsage:
		return "no_usage"
	case Compressed:
		return "compressed"
	default:
		return "unsupported"
	}
}

// Bounds of what a Reader keeps of one JSON document (the whole answer, or
// one event's data): its start, where Responses put the id, and its end,
// where every API puts the usage. A document of up to both together is kept
// whole.
const (
	headSize = 1 << 10
	tailSize = 16 << 10
)

// Reader reads the usage of one answer from the bytes written to it. It
// keeps at most headSize+tailSize bytes of the answer whatever its length,
// and as much again to read them together.
// The zero Reader reads nothing; use NewReader.
type Reader struct {
	mode  byte // modeOff, modeJSON or modeSSE
	usage Usage
	off   Outcome

	// The document being read: its first headSize bytes, then a ring of
	// its last tailSize bytes.
	head   [headSize]byte
	nHead  int
	tail   [tailSize]byte
	nTail  int    // bytes written to tail in all; tail[nTail%tailSize] is next
	doc    []byte // head and tail put together, when the document outgrew head
	inData bool   // SSE: within a data: line (the rest of the line is the document)
	atLine bool   // SSE: at the start of a line
}

const (
	modeOff byte = iota
	modeJSON
	modeSSE
)

// NewReader returns a Reader for an answer with these Content-Type and
// Content-Encoding headers.
func NewReader(contentType, contentEncoding string) *Reader {
	r := &Reader{}
	r.Reset(contentType, contentEncoding)
	return r
}

// Reset makes r read a new answer.
func (r *Reader) Reset(contentType, contentEncoding string) {
	// Field by field: the buffers need no clearing, only their counts.
	r.mode, r.usage, r.off = modeOff, Usage{}, Read
	r.nHead, r.nTail, r.doc = 0, 0, r.doc[:0]
	r.inData, r.atLine = false, true
	if contentEncoding != "" && !strings.EqualFold(contentEncoding, "identity") {
		r.off = Compressed
		return
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	switch {
	case strings.EqualFold(mt, "text/event-stream"):
		r.mode = modeSSE
	case strings.EqualFold(mt, "application/json") || (len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json")):
		r.mode = modeJSON
	default:
		r.off = Unsupported
	}
}

// Write reads p, a piece of the answer. It never fails.
func (r *Reader) Write(p []byte) (int, error) {
	switch r.mode {
	case modeJSON:
		headBefore := r.nHead
		r.keep(p)
		// A Responses answer starts with its id: know it before the
		// answer is complete.
		if r.usage.ResponseID == "" && headBefore < headSize && hasResponseID(r.head[:r.nHead]) {
			r.responseID(r.head[:r.nHead])
		}
	case modeSSE:
		r.lines(p)
	}
	return len(p), nil
}

// ResponseID returns the id of a Responses answer as soon as it has gone
// past: at the start of a JSON answer, in the first event of a stream.
func (r *Reader) ResponseID() string { return r.usage.ResponseID }

// Result returns what the answer reported; call it once the answer is
// complete. For an event stream, the last usage of the stream counts (each
// API reports its totals last); Anthropic's counts of one message add up
// across its events.
func (r *Reader) Result() (Usage, Outcome) {
	if r.mode == modeJSON {
		r.document()
	}
	if r.mode == modeOff {
		return Usage{}, r.off
	}
	if !r.usage.Found {
		return r.usage, NoUsage
	}
	return r.usage, Read
}

// lines splits an event stream into lines and reads the data of data:
// lines.
func (r *Reader) lines(p []byte) {
	for len(p) > 0 {
		if r.atLine {
			r.atLine = false
			r.inData = bytes.HasPrefix(p, []byte("data:")) || (len(p) < 5 && bytes.HasPrefix([]byte("data:"), p))
			if r.inData {
				r.nHead, r.nTail = 0, 0
			}
		}
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			if r.inData {
				r.keep(p)
			}
			return
		}
		if r.inData {
			if r.nHead == 0 {
				r.read(p[:nl]) // the whole line is here: read it in place
			} else {
				r.keep(p[:nl])
				r.document()
			}
		}
		r.atLine = true
		p = p[nl+1:]
	}
}

// keep adds p to the document being read.
func (r *Reader) keep(p []byte) {
	if r.nHead < headSize {
		n := copy(r.head[r.nHead:], p)
		r.nHead += n
		p = p[n:]
	}
	if len(p) > tailSize {
		r.nTail += len(p) - tailSize // only the last tailSize bytes stay
		p = p[len(p)-tailSize:]
	}
	for len(p) > 0 {
		at := r.nTail % tailSize
		n := copy(r.tail[at:], p)
		r.nTail += n
		p = p[n:]
	}
}

// document reads the usage and the response id of the document kept, then
// starts a new one. Only a document that names a usage object or a
// Responses id is parsed.
func (r *Reader) document() {
	doc := r.kept()
	r.nHead, r.nTail = 0, 0
	r.read(doc)
}

// read reads the usage and the response id of one document: a JSON answer,
// or the data line of an event.
func (r *Reader) read(doc []byte) {
	if r.mode == modeSSE {
		doc = bytes.TrimSpace(bytes.TrimPrefix(doc, []byte("data:")))
	}
	if len(doc) == 0 || doc[0] != '{' {
		return
	}
	if hasResponseID(doc[:min(len(doc), headSize)]) {
		r.responseID(doc)
	}
	if obj, gemini := lastUsage(doc); obj == nil {
		return
	} else if gemini {
		r.gemini(obj)
	} else {
		r.openAIOrAnthropic(obj)
	}
}

// kept returns the document kept: whole when it fit, else its head and
// its tail (which may start mid-value: usage is looked for in the tail by
// its key, the id in the head).
func (r *Reader) kept() []byte {
	if r.nTail == 0 {
		return r.head[:r.nHead]
	}
	doc := append(r.doc[:0], r.head[:r.nHead]...)
	if r.nTail <= tailSize {
		return append(doc, r.tail[:r.nTail]...)
	}
	at := r.nTail % tailSize
	doc = append(doc, r.tail[at:]...)
	return append(doc, r.tail[:at]...)
}

// responseID records the "id" of a Responses answer, or the response.id of
// a Responses stream event.
func (r *Reader) responseID(doc []byte) {
	for _, path := range [...]string{"id", "response.id"} {
		if id := gjson.GetBytes(doc, path); id.Type == gjson.String && strings.HasPrefix(id.Str, "resp_") && len(id.Str) <= maxResponseID {
			r.usage.ResponseID = id.Str
			return
		}
	}
}

// hasResponseID reports whether doc has a string starting with "resp_",
// looking for its underscore, which is rarer in these APIs' events than a
// quote.
func hasResponseID(doc []byte) bool {
	for i := 0; ; {
		k := bytes.IndexByte(doc[i:], '_')
		if k < 0 {
			return false
		}
		u := i + k
		if u >= 5 && string(doc[u-5:u]) == `"resp` {
			return true
		}
		i = u + 1
	}
}

// maxResponseID bounds the response ids kept.
const maxResponseID = 256

// gemini reads a Gemini usageMetadata object.
func (r *Reader) gemini(obj []byte) {
	prompt, ok := intMember(obj, "promptTokenCount")
	if !ok {
		return
	}
	cached, _ := intMember(obj, "cachedContentTokenCount")
	r.usage = Usage{Found: true, ResponseID: r.usage.ResponseID, Prompt: prompt, Cached: cached}
}

// openAIOrAnthropic reads a usage object of OpenAI chat (prompt_tokens),
// OpenAI Responses (input_tokens, cached among them) or Anthropic
// (input_tokens, and the cache reads and writes besides them). An object
// without prompt counts, such as the output_tokens of Anthropic's
// message_delta, leaves what was read before.
func (r *Reader) openAIOrAnthropic(obj []byte) {
	u := Usage{Found: true, ResponseID: r.usage.ResponseID}
	if prompt, ok := intMember(obj, "prompt_tokens"); ok {
		u.Prompt = prompt
		u.Cached, _ = intMember(member(obj, "prompt_tokens_details"), "cached_tokens")
	} else if input, ok := intMember(obj, "input_tokens"); ok {
		read, _ := intMember(obj, "cache_read_input_tokens")
		created, _ := intMember(obj, "cache_creation_input_tokens")
		cached, _ := intMember(member(obj, "input_tokens_details"), "cached_tokens")
		u.Prompt = input + read + created
		u.Cached = cached + read
	} else {
		return
	}
	r.usage = u
}

// lastUsage returns doc from the object of its last "usage" or
// "usageMetadata" member (`"usage": {`), and whether it was usageMetadata;
// nil when there is none.
//
// The search goes by the letter g, which is rare in the events of these
// APIs, where a search by the quote stops every few bytes.
func lastUsage(doc []byte) (obj []byte, gemini bool) {
	for i := 0; ; {
		k := bytes.IndexByte(doc[i:], 'g')
		if k < 0 {
			return obj, gemini
		}
		g0 := i + k
		if g0 < 4 || string(doc[g0-4:g0]) != `"usa` || g0+1 >= len(doc) || doc[g0+1] != 'e' {
			i = g0 + 1
			continue
		}
		j := g0 + 2
		g := bytes.HasPrefix(doc[j:], []byte(`Metadata"`))
		switch {
		case g:
			j += len(`Metadata"`)
		case j < len(doc) && doc[j] == '"':
			j++
		default:
			i = j
			continue
		}
		if j = jsonscan.SkipSpace(doc, j); j < len(doc) && doc[j] == ':' {
			if j = jsonscan.SkipSpace(doc, j+1); j < len(doc) && doc[j] == '{' {
				obj, gemini = doc[j:], g
			}
		}
		i = j
	}
}

// member returns the raw value of the member key of the JSON object that
// starts obj (obj may run on past it), or nil. Keys are compared as they
// are written: the APIs' usage keys are never escaped.
func member(obj []byte, key string) []byte {
	var v []byte
	jsonscan.EachMember(obj, func(k, value []byte) bool {
		if string(k) == key {
			v = value
			return false
		}
		return true
	})
	return v
}

// intMember returns the member key of the object that starts obj as an
// integer; a number with a fraction or exponent is cut to its integer
// part.
func intMember(obj []byte, key string) (int64, bool) {
	v := member(obj, key)
	if len(v) == 0 {
		return 0, false
	}
	neg := v[0] == '-'
	if neg {
		v = v[1:]
	}
	var n int64
	digits := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
		digits++
	}
	if digits == 0 || digits > 18 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
