package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startTestEngine starts an engine on a free port, after setting what
// the options change.
func startTestEngine(t *testing.T, options ...func(*engine)) *engine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := &engine{name: "test", addr: addr, blockSize: 4, blocks: 1000, latency: latencyModel{Base: time.Millisecond}}
	for _, o := range options {
		o(e)
	}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.stop)
	return e
}

// testClient opens a connection per request, so none outlives an engine
// that a test restarts.
var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func ask(t *testing.T, e *engine, msgs []chatMessage) chatResponse {
	t.Helper()
	body, _ := json.Marshal(chatRequest{Model: "m", MaxTokens: 9, Messages: msgs})
	resp, err := testClient.Post("http://"+e.addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out chatResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("status %s, decode: %v", resp.Status, err)
	}
	return out
}

func TestEngineCachesTheConversation(t *testing.T) {
	e := startTestEngine(t)
	msgs := []chatMessage{{"system", "be brief and exact"}, {"user", "one two three four five six seven"}}
	first := ask(t, e, msgs)
	// system (4 words + role) + user (7 + role) + generation marker.
	if first.Usage.PromptTokens != 14 || first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first turn: %+v", first.Usage)
	}
	msgs = append(msgs, first.Choices[0].Message, chatMessage{"user", "and then"})
	second := ask(t, e, msgs)
	// The previous prompt and its reply (14 + 9 = 23 tokens) are cached in
	// whole blocks of 4.
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != 20 {
		t.Errorf("second turn: %d cached tokens, want 20", got)
	}

	other := startTestEngine(t)
	if r := ask(t, other, msgs[:2]); r.Choices[0].Message.Content != first.Choices[0].Message.Content {
		t.Error("two engines gave different replies to one prompt")
	}
}

func TestEngineRestartsEmpty(t *testing.T) {
	e := startTestEngine(t)
	msgs := []chatMessage{{"user", "a b c d e f g h"}}
	ask(t, e, msgs)
	e.stop()
	if e.alive() {
		t.Fatal("alive after stop")
	}
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	if r := ask(t, e, msgs); r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("restarted engine remembered %d tokens", r.Usage.PromptTokensDetails.CachedTokens)
	}
}

// askStream sends a streamed request and reads it as the agents do.
func askStream(t *testing.T, e *engine, msgs []chatMessage) streamedAnswer {
	t.Helper()
	body, _ := json.Marshal(chatRequest{Model: "m", MaxTokens: 9, Messages: msgs, Stream: true})
	sent := time.Now()
	resp, err := testClient.Post("http://"+e.addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	ans, err := readStream(resp.Body, sent)
	if err != nil {
		t.Fatal(err)
	}
	return ans
}

func TestEngineStreamsTheSameAnswer(t *testing.T) {
	streamed := func(e *engine) { e.streamEvery = 4 }
	e := startTestEngine(t, streamed)
	msgs := []chatMessage{{"system", "be brief and exact"}, {"user", "one two three four five six seven"}}
	whole := ask(t, e, msgs)
	other := startTestEngine(t, streamed)
	got := askStream(t, other, msgs)
	if got.reply != whole.Choices[0].Message.Content || got.usage != whole.Usage {
		t.Errorf("streamed %q %+v, whole %q %+v", got.reply, got.usage, whole.Choices[0].Message.Content, whole.Usage)
	}
	if got.ttft <= 0 {
		t.Errorf("no time to first token: %v", got.ttft)
	}
}

// The agents join a conversation at a later turn with the replies an
// engine would have given: generate on the prompt's hash is that reply.
func TestLocalReplyIsTheEngines(t *testing.T) {
	e := startTestEngine(t)
	msgs := []chatMessage{{"system", "be brief and exact"}, {"user", "one two three four five six seven"}}
	h := newBlockHasher(e.blockSize)
	for _, m := range msgs {
		h.message(m.Role, m.Content)
	}
	h.token(genMarker)
	if got, want := generate(h, 9), ask(t, e, msgs).Choices[0].Message.Content; got != want {
		t.Errorf("local reply %q, engine's %q", got, want)
	}
}

func TestEngineBoundsSequences(t *testing.T) {
	// One sequence at a time, each taking about 8 × 10ms to decode.
	e := startTestEngine(t, func(e *engine) {
		e.seqs, e.streamEvery, e.latency = 1, 1, latencyModel{Decode: 10 * time.Millisecond}
	})
	msgs := []chatMessage{{"user", "a b c d e f g h"}}
	ttfts := make(chan time.Duration, 2)
	for range 2 {
		go func() { ttfts <- askStream(t, e, msgs).ttft }()
	}
	a, b := <-ttfts, <-ttfts
	// The second waited for the first to end.
	if later := max(a, b); later < 60*time.Millisecond {
		t.Errorf("times to first token %v and %v: the second did not wait for a free sequence", a, b)
	}
}

func TestBlockSetCeiling(t *testing.T) {
	s := newBlockSet()
	if got := s.admit([]uint64{1, 2, 3, 4}, 3); got != 0 {
		t.Fatalf("empty set matched %d", got)
	}
	// Blocks 1..4 are known, the reply's block 4 included.
	if got := s.admit([]uint64{1, 2, 3, 4, 5, 6}, 5); got != 4 {
		t.Errorf("matched %d blocks, want 4", got)
	}
	if got := s.admit([]uint64{1, 9, 3}, 3); got != 1 {
		t.Errorf("matched %d blocks past a missing one, want 1", got)
	}
}

func TestReadStreamTellsFaultsFromCuts(t *testing.T) {
	cut := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
	if _, err := readStream(strings.NewReader(cut), time.Now()); err == nil || errors.Is(err, errBadEvent) {
		t.Errorf("a stream without its end: %v", err)
	}
	if _, err := readStream(strings.NewReader("data: {oops\n\n"), time.Now()); !errors.Is(err, errBadEvent) {
		t.Errorf("a malformed event: %v", err)
	}
	whole := cut + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n"
	if ans, err := readStream(strings.NewReader(whole), time.Now()); err != nil || ans.reply != "a" || ans.usage.PromptTokens != 3 {
		t.Errorf("a whole stream: %+v, %v", ans, err)
	}
}
