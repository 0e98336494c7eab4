package sessionkeeping

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// BenchmarkHandlerHeader measures what session_keeping adds to a request
// whose session is in a header, with a next handler that does nothing but
// answer: the resolution, the placeholders, the context, the writer
// wrapper and the history.
func BenchmarkHandlerHeader(b *testing.B) {
	h := new(Handler)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
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
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		w.WriteHeader(http.StatusOK)
	}
}
