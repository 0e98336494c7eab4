package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"time"
)

// sinkReply is what the overhead upstreams answer: a small chat completion.
var sinkReply = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","model":"bench",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)

// startSinks starts n upstreams on loopback that serve with handler. The
// overhead part's read the whole request body and answer at once (sink),
// so the proxy in front of them is what costs.
func startSinks(n int, handler http.HandlerFunc) (addrs []string, stop func(), err error) {
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		s := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, s)
		go s.Serve(ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, stop, nil
}

func sink(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte(`"stream":true`)) {
		streamSink(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(sinkReply)
}

// sseEvents is how many events a streamed overhead answer has, as an LLM
// answer of a couple of hundred tokens does.
const sseEvents = 200

// sseChunk and sseUsage are the events of a streamed answer: a token
// each, then the usage, as OpenAI sends them with include_usage.
var (
	sseChunk = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench","choices":[{"index":0,"delta":{"content":" token"}}],"usage":null}` + "\n\n")
	sseUsage = []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":200,"total_tokens":1400,"prompt_tokens_details":{"cached_tokens":1024}}}` + "\n\n" + "data: [DONE]\n\n")
)

// streamSink answers with sseEvents events, each flushed.
func streamSink(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for range sseEvents {
		w.Write(sseChunk)
		rc.Flush()
	}
	w.Write(sseUsage)
}
