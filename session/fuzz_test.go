package session

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// FuzzResolve feeds arbitrary headers and bodies through Resolve and checks
// that it never panics, that the next reader of the body gets exactly the
// bytes that were sent, and that any id it returns is a valid one.
func FuzzResolve(f *testing.F) {
	f.Add("X-Session-Id", "abc", []byte(`{"model":"m"}`), "application/json", false, "/v1/chat/completions")
	f.Add("X-Claude-Code-Session-Id", " \r\n", []byte(`{"metadata":{"user_id":"user_ab_account__session_x"}}`), "", true, "/v1/messages")
	f.Add("Session-Id", "", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), "application/json", true, "/v1/chat/completions")
	f.Add("X-Other", "v", []byte(`{"input":[{"role":"user","content":"hi"}],"instructions":"be brief"}`), "application/json", false, "/v1/responses")
	f.Add("X-Other", "v", []byte(`{"contents":[{"parts":[{"text":"hi"}]}],"systemInstruction":{"parts":[{"text":"s"}]}}`), "application/json", false, "/v1beta/models/gemini-2.5-pro:generateContent")
	f.Add("X-Other", "v", []byte(`{"session_id":"a\u0000b","prompt_cache_key":"k","conversation":{"id":"c"}}`), "application/json", false, "/v1/responses")
	f.Add("X-Other", "v", []byte(`{"input":"embed me"}`), "application/json", false, "/v1/embeddings")
	f.Add("X-Other", "v", []byte("\x1f\x8b\x08\x00"), "application/json", true, "/")
	f.Add("X-Other", "v", []byte(`{"messages":[{"role":"user","content":"unterminated`), "application/json", false, "/v1/messages")

	resolvers := []*Resolver{
		newResolver(f, defaultConfig),
		newResolver(f, Config{BuiltinRules: true, AutoDetect: true, MaxBody: 64, Order: []Kind{KindAuto, KindBody, KindHeaders}}),
		newResolver(f, Config{BodyFields: []Signal{{Kind: KindBody, Name: "a.#.b"}, {Kind: KindBody, Name: "x", Transform: TransformSessionUUID}}, AutoDetect: true}),
	}
	f.Fuzz(func(t *testing.T, name, value string, body []byte, contentType string, chunked bool, path string) {
		for _, r := range resolvers {
			req := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: path}, Header: http.Header{}}
			req.Header[name] = []string{value}
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			if chunked {
				req.ContentLength = -1
				req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body)))
			}
			scope := []string{"tenant"}
			res, err := r.Resolve(req, scope)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			after, err := io.ReadAll(req.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, body) {
				t.Fatalf("the body changed: sent %q, the next reader got %q", body, after)
			}
			if req.ContentLength >= 0 && req.ContentLength != int64(len(body)) {
				t.Fatalf("ContentLength %d for a body of %d bytes", req.ContentLength, len(body))
			}
			if !res.Found {
				continue
			}
			if id, ok := Valid(res.ID); !ok || id != res.ID {
				t.Fatalf("invalid id %q from %s", res.ID, res.Source)
			}
			if res.Source == "" || res.Key != NewKey(scope, res.ID) {
				t.Fatalf("source %q key %v for id %q", res.Source, res.Key, res.ID)
			}
		}
	})
}
