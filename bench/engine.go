package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// latencyModel is an engine's service time, scaled down from seconds to
// milliseconds: prefill costs per token not found in the prefix cache,
// decoding per generated token. A cache hit therefore also makes the
// request faster, as it does on a real engine.
type latencyModel struct {
	Base    time.Duration
	Prefill time.Duration // per uncached prompt token
	Decode  time.Duration // per generated token
}

// service returns the time a request takes.
func (m latencyModel) service(uncached, generated int) time.Duration {
	return m.Base + time.Duration(uncached)*m.Prefill + time.Duration(generated)*m.Decode
}

// engine is an emulated inference engine (a vLLM or SGLang replica): an
// OpenAI chat endpoint that tokenizes the prompt, looks it up in its
// prefix cache, reports the hit as cached_tokens, and answers with a
// reply derived from the prompt alone, so every engine gives the same
// reply to the same prompt.
type engine struct {
	name      string
	addr      string // host:port, kept across restarts
	blockSize int
	blocks    int // cache capacity in blocks
	latency   latencyModel

	cache    atomic.Pointer[prefixCache]
	inFlight atomic.Int64

	// The answers sent whole since the engine was made, and their usage:
	// prompt tokens and cached prompt tokens.
	served, reportedPrompt, reportedCached atomic.Int64

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{} // closed when this incarnation stops
}

// start serves on the engine's address with an empty cache, like an
// engine process that has just started.
func (e *engine) start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv != nil {
		return fmt.Errorf("engine %s: already running", e.name)
	}
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		return fmt.Errorf("engine %s: %v", e.name, err)
	}
	e.cache.Store(newPrefixCache(e.blocks))
	done := make(chan struct{})
	e.done = done
	e.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.serve(w, r, done) }),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go e.srv.Serve(ln)
	return nil
}

// stop kills the engine: its listener and every connection close at once,
// so requests in flight fail and new connections are refused.
func (e *engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv == nil {
		return
	}
	close(e.done)
	e.srv.Close()
	e.srv = nil
}

// alive reports whether the engine is serving.
func (e *engine) alive() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.srv != nil
}

// cachedBlocks returns how many leading blocks of a prompt the engine
// holds, without touching its cache.
func (e *engine) cachedBlocks(blocks []uint64) int {
	return e.cache.Load().peek(blocks)
}

// serve answers one chat completion request.
func (e *engine) serve(w http.ResponseWriter, r *http.Request, done <-chan struct{}) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	e.inFlight.Add(1)
	defer e.inFlight.Add(-1)

	// Read the whole body before decoding, so the server notices at once
	// when the connection goes away.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}

	h := newBlockHasher(e.blockSize)
	for _, m := range req.Messages {
		h.message(m.Role, m.Content)
	}
	h.token(genMarker)
	promptTokens, promptBlocks := h.n, len(h.blocks)
	reply := generate(h, req.MaxTokens)
	cached := e.cache.Load().admit(h.blocks, promptBlocks) * e.blockSize

	t := time.NewTimer(e.latency.service(promptTokens-cached, req.MaxTokens))
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
		// Killed: drop the connection without an answer, as a crashed
		// engine does, rather than let the server finish the response.
		panic(http.ErrAbortHandler)
	case <-r.Context().Done():
		return
	}

	resp := chatResponse{
		ID:      fmt.Sprintf("chatcmpl-%016x", h.h),
		Object:  "chat.completion",
		Model:   req.Model,
		Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: reply}, FinishReason: "length"}},
	}
	resp.Usage.PromptTokens = promptTokens
	resp.Usage.CompletionTokens = req.MaxTokens
	resp.Usage.TotalTokens = promptTokens + req.MaxTokens
	resp.Usage.PromptTokensDetails.CachedTokens = cached
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Engine", e.name)
	if json.NewEncoder(w).Encode(&resp) == nil {
		e.served.Add(1)
		e.reportedPrompt.Add(int64(promptTokens))
		e.reportedCached.Add(int64(cached))
	}
}

// generate appends n reply tokens to h and returns their text. The words
// depend only on the prompt (its running hash), like greedy decoding.
func generate(h *blockHasher, n int) string {
	rng := rand.New(rand.NewPCG(h.h, uint64(h.n)))
	var sb strings.Builder
	sb.Grow(n * 7)
	for i := range n {
		w := vocab[rng.IntN(vocabSize)]
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(w)
		h.token(w)
	}
	return sb.String()
}
