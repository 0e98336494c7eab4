package sessionkeeping

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// provisioned provisions h for a benchmark and cleans it up after.
func provisioned(b *testing.B, h *Handler) *Handler {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Cleanup() })
	return h
}

// BenchmarkHandlerHeader measures what session_keeping adds to a request
// whose session is in a header, with a next handler that does nothing but
// answer: the resolution, the placeholders, the context, the writer
// wrapper and the history.
func BenchmarkHandlerHeader(b *testing.B) {
	h := provisioned(b, new(Handler))
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		return nil
	})
	body := strings.Repeat("x", 1024)
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = "session-" + strings.Repeat("a", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Session-Id", ids[i%len(ids)])
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandlerBaseline is BenchmarkHandlerHeader's request set-up and
// next handler alone, to subtract.
func BenchmarkHandlerBaseline(b *testing.B) {
	body := strings.Repeat("x", 1024)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Session-Id", "session-a")
		repl := caddy.NewReplacer()
		_ = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		w.WriteHeader(http.StatusOK)
	}
}

// BenchmarkHandlerBody measures a request whose session is in the last
// member of a 50 KiB body (Claude Code's metadata.user_id), with a next
// handler that reads and closes the body as a transport does, then
// answers: reading, holding, scanning and releasing the body.
func BenchmarkHandlerBody(b *testing.B) {
	h := provisioned(b, new(Handler))
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		w.WriteHeader(http.StatusOK)
		return nil
	})
	var body strings.Builder
	body.WriteString(`{"model":"claude-sonnet-4-5","messages":[`)
	for i := 0; body.Len() < 50<<10; i++ {
		fmt.Fprintf(&body, `{"role":"user","content":"turn %d %s"},`, i, strings.Repeat("words and more words ", 100))
	}
	body.WriteString(`{"role":"user","content":"last"}],"metadata":{"user_id":"{\"device_id\":\"ab\",\"account_uuid\":\"\",\"session_id\":\"0f5e1f9e-3a51-4a8b-9b3e-6d2f1c0a7b42\"}"}}`)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body.String()))
		r.Header.Set("Content-Type", "application/json")
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandlerUsage measures a request with a session header whose
// answer is a small chat completion with usage, with the usage read (on)
// and not (off): what reading and accounting it costs.
func BenchmarkHandlerUsage(b *testing.B) {
	reply := []byte(`{"id":"chatcmpl-bench","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	for _, on := range []bool{true, false} {
		b.Run(map[bool]string{true: "on", false: "off"}[on], func(b *testing.B) {
			h := provisioned(b, &Handler{ReadUsage: &on})
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				w.Header().Set("Content-Type", "application/json")
				w.Write(reply)
				return nil
			})
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
				r.Header.Set("X-Session-Id", fmt.Sprint("session-", i%1024))
				repl := caddy.NewReplacer()
				repl.Set("http.reverse_proxy.upstream.hostport", "127.0.0.1:9001")
				r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
				w.Body.Reset()
				if err := h.ServeHTTP(w, r, next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
