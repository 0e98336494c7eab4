package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
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
	return m.prefill(uncached) + time.Duration(generated)*m.Decode
}

// prefill returns the time to the first token once the request runs.
func (m latencyModel) prefill(uncached int) time.Duration {
	return m.Base + time.Duration(uncached)*m.Prefill
}

// engine is an emulated inference engine (a vLLM or SGLang replica): an
// OpenAI chat endpoint that tokenizes the prompt, looks it up in its
// prefix cache when the request is scheduled, reports the hit as
// cached_tokens, and answers with a reply derived from the prompt alone,
// so every engine gives the same reply to the same prompt. It runs at most
// seqs sequences at once, as an engine's batch is bounded (vLLM's
// max_num_seqs); later requests wait for a free one, and that wait is
// part of their time to first token.
type engine struct {
	name        string
	addr        string // host:port, kept across restarts
	blockSize   int
	blocks      int // cache capacity in blocks
	seqs        int // sequences served at once; 0 for no bound
	streamEvery int // generated tokens per streamed event after the first
	latency     latencyModel
	computed    *blockSet // every block any engine of the fleet has computed; may be nil

	cache    atomic.Pointer[prefixCache]
	inFlight atomic.Int64 // requests received and not yet answered, waiting ones included

	// The answers sent whole since the engine was made, and their usage:
	// prompt tokens and cached prompt tokens.
	served, reportedPrompt, reportedCached atomic.Int64

	mu    sync.Mutex
	ln    net.Listener
	srv   *http.Server
	done  chan struct{} // closed when this incarnation stops
	slots chan struct{} // a token per running sequence; nil for no bound
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
	var slots chan struct{}
	if e.seqs > 0 {
		slots = make(chan struct{}, e.seqs)
	}
	e.ln, e.done, e.slots = ln, done, slots
	e.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.serve(w, r, done, slots) }),
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
	// The listener is closed here too: Serve may not have taken it over
	// yet, and then the server's Close would leave it open.
	e.ln.Close()
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

// Response headers of the emulated engines, read by the load generator.
const (
	// The prompt tokens whose prefix some engine of the fleet had
	// computed before: what an ideal router with unbounded caches could
	// have found cached.
	headerComputed = "X-Engine-Computed-Tokens"
	// The engine that answered.
	headerEngine = "X-Engine"
)

// serve answers one chat completion request, streamed or whole.
func (e *engine) serve(w http.ResponseWriter, r *http.Request, done <-chan struct{}, slots chan struct{}) {
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

	// Wait for a free sequence; a killed engine drops the connection
	// without an answer, as a crashed one does.
	if slots != nil {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-done:
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			return
		}
	}
	cached := e.cache.Load().admit(h.blocks, promptBlocks) * e.blockSize
	if e.computed != nil {
		computed := e.computed.admit(h.blocks, promptBlocks) * e.blockSize
		w.Header().Set(headerComputed, strconv.Itoa(computed))
	}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-done:
			panic(http.ErrAbortHandler)
		case <-r.Context().Done():
			return false
		}
	}

	usage := chatUsage{PromptTokens: promptTokens, CompletionTokens: req.MaxTokens, TotalTokens: promptTokens + req.MaxTokens}
	usage.PromptTokensDetails.CachedTokens = cached
	id := fmt.Sprintf("chatcmpl-%016x", h.h)
	w.Header().Set(headerEngine, e.name)
	var ok bool
	if req.Stream {
		ok = e.stream(w, &req, id, reply, usage, wait)
	} else {
		if !wait(e.latency.service(promptTokens-cached, req.MaxTokens)) {
			return
		}
		resp := chatResponse{
			ID: id, Object: "chat.completion", Model: req.Model, Usage: usage,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: reply}, FinishReason: "length"}},
		}
		w.Header().Set("Content-Type", "application/json")
		ok = json.NewEncoder(w).Encode(&resp) == nil
	}
	if ok {
		e.served.Add(1)
		e.reportedPrompt.Add(int64(promptTokens))
		e.reportedCached.Add(int64(cached))
	}
}

// stream sends the reply as server-sent events, the way vLLM and SGLang
// stream chat completions: the first token once the prompt is prefilled,
// then the rest as they are decoded, streamEvery tokens an event, then the
// usage (the client asks for it with stream_options.include_usage) and
// [DONE]. Every event is flushed. It reports whether the whole answer
// was sent.
func (e *engine) stream(w http.ResponseWriter, req *chatRequest, id, reply string, usage chatUsage, wait func(time.Duration) bool) bool {
	words := strings.Split(reply, " ")
	if reply == "" {
		words = nil
	}
	every := max(e.streamEvery, 1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	var buf []byte
	send := func(c *chatChunk) bool {
		buf = append(buf[:0], "data: "...)
		b, _ := json.Marshal(c)
		buf = append(append(buf, b...), "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := chatChunk{ID: id, Object: "chat.completion.chunk", Model: req.Model, Choices: []chunkChoice{{}}}

	if !wait(e.latency.prefill(usage.PromptTokens - usage.PromptTokensDetails.CachedTokens)) {
		return false
	}
	for i := 0; i < len(words); {
		// The first event carries the first token alone: its time is
		// the time to first token.
		n := every
		if i == 0 {
			n = 1
		} else if !wait(time.Duration(min(n, len(words)-i)) * e.latency.Decode) {
			return false
		}
		end := min(i+n, len(words))
		text := strings.Join(words[i:end], " ")
		if i > 0 {
			text = " " + text
		}
		chunk.Choices[0].Delta = chatDelta{Content: text}
		if i == 0 {
			chunk.Choices[0].Delta.Role = "assistant"
		}
		if end == len(words) {
			chunk.Choices[0].FinishReason = "length"
		}
		if !send(&chunk) {
			return false
		}
		i = end
	}
	last := chatChunk{ID: id, Object: "chat.completion.chunk", Model: req.Model, Choices: []chunkChoice{}, Usage: &usage}
	if !send(&last) {
		return false
	}
	_, err := io.WriteString(w, "data: [DONE]\n\n")
	return err == nil
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
