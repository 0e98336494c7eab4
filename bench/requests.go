package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
)

// requestKind is one kind of request of the overhead part: a set of
// prepared requests that differ in their session, sent in turn.
type requestKind struct {
	name   string // short, for flags and progress lines
	title  string // for the report
	method string
	path   string
	header string   // the session header, if the kind sends one
	ids    []string // values of header, in turn
	bodies [][]byte // request bodies, in turn
}

// request returns the i-th request of the kind, aimed at base.
func (k *requestKind) request(base string, i uint64) *http.Request {
	var body *bytes.Reader
	if len(k.bodies) > 0 {
		body = bytes.NewReader(k.bodies[i%uint64(len(k.bodies))])
	}
	var req *http.Request
	if body != nil {
		req, _ = http.NewRequest(k.method, base+k.path, body)
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, _ = http.NewRequest(k.method, base+k.path, nil)
	}
	if k.header != "" {
		req.Header.Set(k.header, k.ids[i%uint64(len(k.ids))])
	}
	return req
}

// Sizes of the overhead request bodies.
const (
	smallBody = 1 << 10
	largeBody = 50 << 10
	hugeBody  = 1 << 20
)

// requestKinds returns the request kinds of the overhead part, built from
// seed. Sessions repeat (ids and bodies are reused in turn), so the
// sticky policy works on live pins, as it does in a gateway's steady state.
func requestKinds(seed uint64) []*requestKind {
	rng := rand.New(rand.NewPCG(seed, 0x6f76))
	header := &requestKind{
		name: "header", title: "Header signal, 1 KiB body",
		method: http.MethodPost, path: "/v1/chat/completions",
		header: "X-Session-Id",
		bodies: [][]byte{openAIChat(rng, smallBody)},
	}
	for i := range 1024 {
		header.ids = append(header.ids, fmt.Sprintf("session-%04d-%08x", i, rng.Uint32()))
	}
	body := &requestKind{
		name: "body", title: "Body signal (metadata.user_id last), 50 KiB",
		method: http.MethodPost, path: "/v1/messages",
	}
	for range 64 {
		body.bodies = append(body.bodies, anthropicMessages(rng, largeBody, uuid(rng)))
	}
	auto50 := &requestKind{
		name: "auto-50k", title: "Auto-detect, 50 KiB",
		method: http.MethodPost, path: "/v1/chat/completions",
	}
	for range 64 {
		auto50.bodies = append(auto50.bodies, openAIChat(rng, largeBody))
	}
	auto1m := &requestKind{
		name: "auto-1m", title: "Auto-detect, 1 MiB",
		method: http.MethodPost, path: "/v1/chat/completions",
	}
	for range 8 {
		auto1m.bodies = append(auto1m.bodies, openAIChat(rng, hugeBody))
	}
	get := &requestKind{
		name: "get", title: "Sessionless GET",
		method: http.MethodGet, path: "/v1/models",
	}
	sse := &requestKind{
		name: "sse", title: fmt.Sprintf("Streamed answer, %d events", sseEvents),
		method: http.MethodPost, path: "/v1/chat/completions",
		header: "X-Session-Id", ids: header.ids,
		bodies: [][]byte{[]byte(`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)},
	}
	return []*requestKind{header, body, auto50, auto1m, get, sse}
}

// openAIChat returns an OpenAI chat completions body of about size bytes:
// a system prompt, a first user turn that makes the conversation unique,
// then alternating turns.
func openAIChat(rng *rand.Rand, size int) []byte {
	b := []byte(`{"model":"gpt-4o","stream":false,"messages":[`)
	b = appendMessage(b, "system", text(rng, 60))
	b = append(b, ',')
	b = appendMessage(b, "user", text(rng, 20))
	b = fillTurns(rng, b, size-2)
	return append(b, ']', '}')
}

// anthropicMessages returns an Anthropic messages body of about size
// bytes, with Claude Code's metadata.user_id (the JSON-string form that
// carries the session) as its last member, so the session is found only
// after the whole body has been scanned.
func anthropicMessages(rng *rand.Rand, size int, session string) []byte {
	userID := fmt.Sprintf(`{"device_id":"%016x","account_uuid":"","session_id":"%s"}`, rng.Uint64(), session)
	tail := append([]byte(`,"metadata":{"user_id":`), appendJSONString(nil, userID)...)
	tail = append(tail, '}')
	b := []byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":`)
	b = appendJSONString(b, text(rng, 60))
	b = append(b, `,"messages":[`...)
	b = appendMessage(b, "user", text(rng, 20))
	b = fillTurns(rng, b, size-len(tail)-2)
	b = append(b, ']')
	b = append(b, tail...)
	return append(b, '}')
}

// fillTurns appends alternating assistant and user messages to b until it
// is about size bytes long.
func fillTurns(rng *rand.Rand, b []byte, size int) []byte {
	roles := [2]string{"assistant", "user"}
	for i := 0; len(b) < size-64; i++ {
		words := min(300, (size-len(b)-40)/7)
		b = append(b, ',')
		b = appendMessage(b, roles[i%2], text(rng, max(words, 1)))
	}
	return b
}

// uuid returns a random version 4 UUID.
func uuid(rng *rand.Rand) string {
	a, b := rng.Uint64(), rng.Uint64()
	a = a&^0xf000 | 0x4000
	b = b&^(0xc<<60) | 0x8<<60
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, a>>16&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}
