package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"
)

// startTestEngine starts an engine on a free port.
func startTestEngine(t *testing.T) *engine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	e := &engine{name: "test", addr: addr, blockSize: 4, blocks: 1000, latency: latencyModel{Base: time.Millisecond}}
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
