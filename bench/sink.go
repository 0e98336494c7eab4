package main

import (
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
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(sinkReply)
}
