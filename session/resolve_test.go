package session

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const ccUUID = "3f2b8c1e-9a47-4d1b-8e6f-2c5a7d9e0b14"

// newResolver builds a resolver or fails the test.
func newResolver(t testing.TB, c Config) *Resolver {
	t.Helper()
	r, err := NewResolver(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var defaultConfig = Config{BuiltinRules: true, AutoDetect: true}

// post builds a JSON POST with the given headers (name, value pairs).
func post(path, body string, headers ...string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header[headers[i]] = append(req.Header[headers[i]], headers[i+1])
	}
	return req
}

func resolve(t *testing.T, r *Resolver, req *http.Request, scope ...string) Result {
	t.Helper()
	res, err := r.Resolve(req, scope)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return res
}

// claudeCodeBody is shaped like a Claude Code 2.1 request: metadata comes
// after the messages, user_id is a JSON string.
func claudeCodeBody(userID string) string {
	return `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"text","text":"fix the bug in main.go","cache_control":{"type":"ephemeral"}}]}],` +
		`"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.593; cc_entrypoint=sdk-cli;"},{"type":"text","text":"You are Claude Code."}],` +
		`"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"metadata":{"user_id":` + userID + `},"max_tokens":32000,"stream":true}`
}

func TestClientSignals(t *testing.T) {
	r := newResolver(t, defaultConfig)
	currentUserID := `"{\"device_id\":\"` + strings.Repeat("ab", 32) + `\",\"account_uuid\":\"\",\"session_id\":\"` + ccUUID + `\"}"`
	legacyUserID := `"user_` + strings.Repeat("cd", 32) + `_account__session_` + ccUUID + `"`
	codexBody := `{"model":"gpt-5-codex","instructions":"","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"store":false,"stream":true,"prompt_cache_key":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","client_metadata":{"session_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}}`
	chat := `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}`

	tests := []struct {
		name       string
		req        *http.Request
		wantID     string
		wantSource string
	}{
		{"claude code header", post("/v1/messages?beta=true", claudeCodeBody(currentUserID), "X-Claude-Code-Session-Id", ccUUID), ccUUID, "header:X-Claude-Code-Session-Id"},
		{"claude code current user_id", post("/v1/messages?beta=true", claudeCodeBody(currentUserID)), ccUUID, "body:metadata.user_id"},
		{"claude code legacy user_id", post("/v1/messages?beta=true", claudeCodeBody(legacyUserID)), ccUUID, "body:metadata.user_id"},
		{"codex session-id header", post("/v1/responses", codexBody, "Session-Id", "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "Thread-Id", "x"), "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "header:Session-Id"},
		{"codex underscore header", post("/v1/responses", codexBody, "Session_id", "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "header:Session_id"},
		{"codex prompt_cache_key", post("/v1/responses", codexBody), "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "body:prompt_cache_key"},
		{"opencode", post("/v1/chat/completions", chat, "X-Opencode-Session", "ses_8f2a9c"), "ses_8f2a9c", "header:X-Opencode-Session"},
		{"x-session-id", post("/v1/chat/completions", chat, "X-Session-Id", "abc"), "abc", "header:X-Session-Id"},
		{"kilo", post("/v1/chat/completions", chat, "X-Session-Affinity", "kilo-1"), "kilo-1", "header:X-Session-Affinity"},
		{"goose", post("/v1/chat/completions", chat, "Agent-Session-Id", "20260727_3"), "20260727_3", "header:Agent-Session-Id"},
		{"litellm header", post("/v1/chat/completions", chat, "X-Litellm-Session-Id", "ll-1"), "ll-1", "header:X-Litellm-Session-Id"},
		{"litellm body", post("/v1/chat/completions", `{"model":"m","litellm_session_id":"ll-2","messages":[]}`), "ll-2", "body:litellm_session_id"},
		{"helicone", post("/v1/chat/completions", chat, "Helicone-Session-Id", "h-1"), "h-1", "header:Helicone-Session-Id"},
		{"openrouter body session_id", post("/api/v1/chat/completions", `{"model":"m","session_id":"or-1","messages":[{"role":"user","content":"x"}]}`), "or-1", "body:session_id"},
		{"responses conversation string", post("/v1/responses", `{"model":"m","conversation":"conv_123","input":"hi"}`), "conv_123", "body:conversation"},
		{"responses conversation object", post("/v1/responses", `{"model":"m","conversation":{"id":"conv_456"},"input":"hi"}`), "conv_456", "body:conversation.id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := resolve(t, r, tc.req)
			if !res.Found || res.ID != tc.wantID || res.Source != tc.wantSource {
				t.Fatalf("got found=%v id=%q source=%q, want id=%q source=%q", res.Found, res.ID, res.Source, tc.wantID, tc.wantSource)
			}
			if res.Key != NewKey(nil, tc.wantID) {
				t.Fatalf("key is not NewKey(scope, id)")
			}
		})
	}
}

func TestSessionUUIDTransform(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"device_id":"d","account_uuid":"","session_id":"` + ccUUID + `"}`, ccUUID},
		{"user_abc_account_0c1d2e3f-1111-2222-3333-444455556666_session_" + ccUUID, ccUUID},
		{"user_abc_account__session_" + ccUUID, ccUUID},
		{"user_abc_account__session_", ""},          // empty session part
		{`{"device_id":"d","account_uuid":""}`, ""}, // no session part
		{`{"session_id":42}`, ""},                   // not a string
		{ccUUID, ""},                                // no session part at all
		{"user_abc", ""},
	}
	for _, tc := range tests {
		got, ok := apply(TransformSessionUUID, tc.in)
		if tc.want == "" {
			if ok {
				t.Errorf("sessionPart(%q) matched %q, want no match", tc.in, got)
			}
			continue
		}
		if !ok || got != tc.want {
			t.Errorf("sessionPart(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestValid(t *testing.T) {
	long := strings.Repeat("a", MaxIDLen)
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"abc", "abc", true},
		{"  abc\t", "abc", true},
		{long, long, true},
		{long + "a", "", false},
		{"", "", false},
		{"   ", "", false},
		{"a\r\nb", "", false},
		{"a\x00b", "", false},
		{"a\x7fb", "", false},
		{"ünïcode", "ünïcode", true},
	}
	for _, tc := range tests {
		got, ok := Valid(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Valid(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestInvalidValuesFallThrough(t *testing.T) {
	r := newResolver(t, defaultConfig)
	bad := []string{"bad\r\nid", strings.Repeat("x", MaxIDLen+1), "   "}
	for _, v := range bad {
		req := post("/v1/chat/completions", `{"model":"m","session_id":"body-id"}`, "X-Session-Id", v, "Session-Id", "second")
		res := resolve(t, r, req)
		if res.ID != "second" || res.Source != "header:Session-Id" || res.Skipped != 1 {
			t.Errorf("header %q: got id=%q source=%q skipped=%d; want the next header", v, res.ID, res.Source, res.Skipped)
		}
		req = post("/v1/chat/completions", `{"model":"m","session_id":"body-id"}`, "X-Session-Id", v)
		res = resolve(t, r, req)
		if res.ID != "body-id" || res.Source != "body:session_id" {
			t.Errorf("header %q alone: got id=%q source=%q; want the body field", v, res.ID, res.Source)
		}
	}
	// An invalid body field falls through to the next body field.
	req := post("/v1/chat/completions", `{"model":"m","session_id":"a\u0000b","prompt_cache_key":"pck"}`)
	if res := resolve(t, r, req); res.ID != "pck" || res.Skipped != 1 {
		t.Errorf("got id=%q skipped=%d; want prompt_cache_key after an invalid session_id", res.ID, res.Skipped)
	}
	// Non-string values do not count.
	req = post("/v1/chat/completions", `{"model":"m","session_id":12345,"conversation":{"id":"conv_1"}}`)
	if res := resolve(t, r, req); res.ID != "conv_1" {
		t.Errorf("got id=%q; want conversation.id after a numeric session_id", res.ID)
	}
}

func TestPrecedenceAndOrder(t *testing.T) {
	body := `{"model":"m","session_id":"from-body","prompt_cache_key":"pck","messages":[{"role":"user","content":"hi"}]}`

	r := newResolver(t, defaultConfig)
	if res := resolve(t, r, post("/v1/chat/completions", body, "X-Session-Id", "from-header")); res.ID != "from-header" {
		t.Errorf("default order: got %q, want the header", res.ID)
	}
	// Registry order within headers: X-Session-Id before Session-Id.
	if res := resolve(t, r, post("/v1/chat/completions", body, "Session-Id", "second", "X-Session-Id", "first")); res.ID != "first" {
		t.Errorf("header registry order: got %q", res.ID)
	}

	r = newResolver(t, Config{BuiltinRules: true, AutoDetect: true, Order: []Kind{KindBody, KindHeaders, KindAuto}})
	if res := resolve(t, r, post("/v1/chat/completions", body, "X-Session-Id", "from-header")); res.ID != "from-body" {
		t.Errorf("order body first: got %q, want the body field", res.ID)
	}

	// OpenRouter's precedence: prompt_cache_key, body session_id, X-Session-Id, auto.
	or := newResolver(t, Config{
		Headers:    []Signal{{Kind: KindHeaders, Name: "X-Session-Id"}},
		BodyFields: []Signal{{Kind: KindBody, Name: "prompt_cache_key"}, {Kind: KindBody, Name: "session_id"}},
		AutoDetect: true,
		Order:      []Kind{KindBody, KindHeaders, KindAuto},
	})
	if res := resolve(t, or, post("/v1/chat/completions", body, "X-Session-Id", "h")); res.ID != "pck" {
		t.Errorf("openrouter precedence: got %q, want prompt_cache_key", res.ID)
	}
	if res := resolve(t, or, post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "X-Session-Id", "h")); res.ID != "h" {
		t.Errorf("openrouter precedence: got %q, want the header", res.ID)
	}
	if res := resolve(t, or, post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); res.Source != "auto" {
		t.Errorf("openrouter precedence: got source %q, want auto", res.Source)
	}

	// User signals come before the built-ins of their kind.
	u := newResolver(t, Config{
		BuiltinRules: true,
		Headers:      []Signal{{Kind: KindHeaders, Name: "X-My-Session"}},
		BodyFields:   []Signal{{Kind: KindBody, Name: "user.session"}},
	})
	if res := resolve(t, u, post("/v1/chat/completions", body, "X-Session-Id", "builtin", "X-My-Session", "mine")); res.ID != "mine" || res.Source != "header:X-My-Session" {
		t.Errorf("user header first: got %q from %q", res.ID, res.Source)
	}
	if res := resolve(t, u, post("/v1/chat/completions", `{"session_id":"builtin","user":{"session":"mine"}}`)); res.ID != "mine" || res.Source != "body:user.session" {
		t.Errorf("user body field first: got %q from %q", res.ID, res.Source)
	}

	// A kind left out of the order is not used.
	h := newResolver(t, Config{BuiltinRules: true, AutoDetect: true, Order: []Kind{KindHeaders}})
	req := post("/v1/chat/completions", body)
	if res := resolve(t, h, req); res.Found || res.BodyRead {
		t.Errorf("headers-only order: found=%v bodyRead=%v, want neither", res.Found, res.BodyRead)
	}

	// Builtins off: only user signals.
	off := newResolver(t, Config{Headers: []Signal{{Kind: KindHeaders, Name: "X-Mine"}}})
	if res := resolve(t, off, post("/v1/chat/completions", body, "X-Session-Id", "builtin")); res.Found {
		t.Errorf("builtin_rules off: resolved %q from %q", res.ID, res.Source)
	}
}

func TestHeaderResolutionDoesNotReadBody(t *testing.T) {
	r := newResolver(t, defaultConfig)
	body := &countingReader{r: strings.NewReader(`{"model":"m"}`)}
	req := httptest.NewRequest(http.MethodPost, "/v1/messages", body)
	req.Header.Set("X-Session-Id", "s")
	res := resolve(t, r, req)
	if !res.Found || res.BodyRead || body.n != 0 {
		t.Fatalf("found=%v bodyRead=%v bytes read=%d; want a header match without reading", res.Found, res.BodyRead, body.n)
	}
	if res.Model != "" {
		t.Fatalf("model %q without reading the body", res.Model)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestScopeIsolation(t *testing.T) {
	r := newResolver(t, defaultConfig)
	a := resolve(t, r, post("/v1/chat/completions", `{}`, "X-Session-Id", "same"), "tenant-a")
	b := resolve(t, r, post("/v1/chat/completions", `{}`, "X-Session-Id", "same"), "tenant-b")
	a2 := resolve(t, r, post("/v1/chat/completions", `{}`, "X-Session-Id", "same"), "tenant-a")
	if a.Key == b.Key {
		t.Fatal("the same id under two scopes gave one key")
	}
	if a.Key != a2.Key {
		t.Fatal("the same id under one scope gave two keys")
	}
	// Length prefixes keep scope boundaries apart.
	if NewKey([]string{"ab", "c"}, "x") == NewKey([]string{"a", "bc"}, "x") {
		t.Fatal("scope boundaries collide")
	}
	if NewKey([]string{"a"}, "bc") == NewKey([]string{"ab"}, "c") {
		t.Fatal("scope and id boundary collide")
	}
	if len(a.Key.String()) != 32 {
		t.Fatalf("key %q is not 32 hex digits", a.Key)
	}
}

func TestModelPlaceholderValue(t *testing.T) {
	r := newResolver(t, defaultConfig)
	res := resolve(t, r, post("/v1/chat/completions", `{"model":"gpt-4o","session_id":"s"}`))
	if res.Model != "gpt-4o" || !res.BodyRead {
		t.Fatalf("model %q bodyRead %v", res.Model, res.BodyRead)
	}
}

func TestNewResolverErrors(t *testing.T) {
	bad := []Config{
		{}, // nothing to try
		{AutoDetect: true, Order: []Kind{KindHeaders}}, // auto left out, no headers
		{BuiltinRules: true, Order: []Kind{KindHeaders, KindHeaders}},
		{BuiltinRules: true, Order: []Kind{9}},
		{BuiltinRules: true, MaxBody: -1},
		{Headers: []Signal{{Kind: KindBody, Name: "x"}}},
	}
	for i, c := range bad {
		if _, err := NewResolver(c); err == nil {
			t.Errorf("config %d: no error", i)
		}
	}
}

func TestSignalConstructors(t *testing.T) {
	for _, h := range []string{"Authorization", "authorization", "X-API-KEY", "cookie", "Proxy-Authorization", "X-Goog-Api-Key", "x-auth-token", "X-Access-Token", "Api-Key", "Set-Cookie"} {
		_, err := HeaderSignal(h, TransformNone)
		if err == nil || !strings.Contains(err.Error(), "credentials") {
			t.Errorf("HeaderSignal(%q) = %v, want a credentials error", h, err)
		}
	}
	if _, err := HeaderSignal("Bad Header", TransformNone); err == nil {
		t.Error("a header name with a space was accepted")
	}
	s, err := HeaderSignal("x-my-session", TransformSessionUUID)
	if err != nil || s.Name != "X-My-Session" || s.Source() != "header:X-My-Session" {
		t.Errorf("HeaderSignal canonical form: %+v %v", s, err)
	}
	if _, err := BodySignal("a b", TransformNone); err == nil {
		t.Error("a body path with a space was accepted")
	}
	if _, err := ParseTransform("uuid"); err == nil {
		t.Error("unknown transform accepted")
	}
	if _, err := ParseKind("cookies"); err == nil {
		t.Error("unknown kind accepted")
	}
}

func TestComplexBodyPath(t *testing.T) {
	// A path that the skim cannot split goes to gjson on the whole body.
	r := newResolver(t, Config{BodyFields: []Signal{{Kind: KindBody, Name: `items.#(kind=="s").id`}}})
	res := resolve(t, r, post("/x", `{"items":[{"kind":"a","id":"1"},{"kind":"s","id":"sess-9"}]}`))
	if res.ID != "sess-9" {
		t.Fatalf("got %q", res.ID)
	}
}

func TestBodyRestoredAfterResolve(t *testing.T) {
	r := newResolver(t, defaultConfig)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	req := post("/v1/chat/completions", body)
	resolve(t, r, req)
	got, _ := io.ReadAll(req.Body)
	if !bytes.Equal(got, []byte(body)) {
		t.Fatalf("restored body differs: %q", got)
	}
}

func TestParseKey(t *testing.T) {
	k := NewKey([]string{"t"}, "id")
	got, err := ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseKey(String()) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("g", 32), k.String() + "0"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func TestPreviousResponseLink(t *testing.T) {
	conversation := NewKey([]string{"tenant"}, "auto-1")
	links := map[Key]Key{NewKey([]string{"tenant"}, "resp_1"): conversation}
	c := defaultConfig
	c.Linked = func(k Key) (Key, bool) { s, ok := links[k]; return s, ok }
	r := newResolver(t, c)
	body := `{"model":"m","previous_response_id":"resp_1","input":[{"role":"user","content":"next"}]}`

	res := resolve(t, r, post("/v1/responses", body), "tenant")
	if !res.Found || res.Key != conversation || res.Source != "body:previous_response_id" || res.ID != "resp_1" {
		t.Fatalf("linked response: %+v", res)
	}
	// Another tenant's id, an unknown id, or an explicit signal: no link.
	if res := resolve(t, r, post("/v1/responses", body), "other"); res.Source != "auto" {
		t.Fatalf("another tenant joined the session: %+v", res)
	}
	if res := resolve(t, r, post("/v1/responses", strings.Replace(body, "resp_1", "resp_2", 1)), "tenant"); res.Source != "auto" {
		t.Fatalf("an unknown response: %+v", res)
	}
	if res := resolve(t, r, post("/v1/responses", body, "X-Session-Id", "s"), "tenant"); res.Source != "header:X-Session-Id" {
		t.Fatalf("a header lost to the link: %+v", res)
	}
	// Without the built-in rules there are no links.
	c.BuiltinRules = false
	if res := resolve(t, newResolver(t, c), post("/v1/responses", body), "tenant"); res.Source != "auto" {
		t.Fatalf("builtin_rules off: %+v", res)
	}
}
