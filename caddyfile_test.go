package sessionkeeping

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func parse(t *testing.T, input string) (*Handler, error) {
	t.Helper()
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	return &h, err
}

func TestUnmarshalCaddyfileEveryOption(t *testing.T) {
	h, err := parse(t, `session_keeping {
		auto_detect   off
		builtin_rules false
		header        X-My-Session
		header        X-Claude-User session-uuid
		body_field    metadata.session
		body_field    user.id session-uuid
		order         body headers
		scope         {http.auth.user.id} {header.X-Tenant} fixed
		max_body      4MiB
		max_buffered  1GiB
		buffer_bodies on
		read_usage    off
		record_ids    raw
	}`)
	if err != nil {
		t.Fatal(err)
	}
	f := false
	want := &Handler{
		AutoDetect:   &f,
		BuiltinRules: &f,
		Headers:      []SignalConfig{{Name: "X-My-Session"}, {Name: "X-Claude-User", Transform: "session-uuid"}},
		BodyFields:   []SignalConfig{{Name: "metadata.session"}, {Name: "user.id", Transform: "session-uuid"}},
		Order:        []string{"body", "headers"},
		Scope:        []string{"{http.auth.user.id}", "{header.X-Tenant}", "fixed"},
		MaxBody:      4 << 20,
		MaxBuffered:  1 << 30,
		BufferBodies: true,
		ReadUsage:    &f,
		RecordIDs:    "raw",
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got  %+v\nwant %+v", h, want)
	}

	// No block at all is valid: every default.
	h, err = parse(t, `session_keeping`)
	if err != nil || !reflect.DeepEqual(h, &Handler{}) {
		t.Fatalf("bare directive: %+v, %v", h, err)
	}
}

// parseErrorCase is a Caddyfile that must not parse, and what its error
// must name.
type parseErrorCase struct{ input, wantInError string }

// checkParseErrors parses each case and checks its error.
func checkParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tc := range tests {
		_, err := parse(t, tc.input)
		if err == nil {
			t.Errorf("%s: no error", tc.input)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantInError) {
			t.Errorf("%s: error %q does not name %q", tc.input, err, tc.wantInError)
		}
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	tests := []parseErrorCase{
		{`session_keeping extra`, "wrong argument count"},
		{"session_keeping {\nbogus 1\n}", `"bogus"`},
		{"session_keeping {\nauto_detect maybe\n}", "auto_detect"},
		{"session_keeping {\nauto_detect\n}", "auto_detect"},
		{"session_keeping {\nbuiltin_rules on off\n}", "builtin_rules"},
		{"session_keeping {\nheader\n}", "header"},
		{"session_keeping {\nheader Authorization\n}", "Authorization"},
		{"session_keeping {\nheader x-api-key\n}", "X-Api-Key"},
		{"session_keeping {\nheader Cookie\n}", "Cookie"},
		{"session_keeping {\nheader X-S uuid\n}", "header X-S"},
		{"session_keeping {\nheader X-S session-uuid more\n}", "header"},
		{"session_keeping {\nbody_field\n}", "body_field"},
		{"session_keeping {\nbody_field a.b lowercase\n}", "body_field a.b"},
		{"session_keeping {\norder\n}", "order"},
		{"session_keeping {\norder headers cookies\n}", "order"},
		{"session_keeping {\norder body body\n}", "order"},
		{"session_keeping {\nscope\n}", "scope"},
		{"session_keeping {\nmax_body\n}", "max_body"},
		{"session_keeping {\nmax_body lots\n}", "max_body"},
		{"session_keeping {\nmax_body 0\n}", "max_body"},
		{"session_keeping {\nmax_body 1MB 2MB\n}", "max_body"},
		{"session_keeping {\nmax_buffered\n}", "max_buffered"},
		{"session_keeping {\nmax_buffered plenty\n}", "max_buffered"},
		{"session_keeping {\nmax_buffered 0\n}", "max_buffered"},
		{"session_keeping {\nmax_buffered 2TiB\n}", "max_buffered"},
		{"session_keeping {\nbuffer_bodies sometimes\n}", "buffer_bodies"},
		{"session_keeping {\nread_usage\n}", "read_usage"},
		{"session_keeping {\nrecord_ids plain\n}", "record_ids"},
		{"session_keeping {\nrecord_ids\n}", "record_ids"},
	}
	checkParseErrors(t, tests)
}

// adaptHandler adapts a Caddyfile and returns the raw JSON of the first
// session_keeping handler in it.
func adaptHandler(t *testing.T, caddyfile string) json.RawMessage {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []json.RawMessage `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	var found []json.RawMessage
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil {
			if string(m["handler"]) == `"session_keeping"` {
				found = append(found, raw)
			}
			for _, v := range m {
				walk(v)
			}
			return
		}
		var a []json.RawMessage
		if json.Unmarshal(raw, &a) == nil {
			for _, v := range a {
				walk(v)
			}
		}
	}
	walk(out)
	if len(found) == 0 {
		t.Fatalf("no session_keeping handler in\n%s", out)
	}
	return found[0]
}

func TestAdaptRoundTrip(t *testing.T) {
	raw := adaptHandler(t, `:8080 {
	route {
		reverse_proxy 127.0.0.1:9001
	}
	session_keeping {
		auto_detect off
		builtin_rules on
		header X-My-Session session-uuid
		body_field metadata.session
		order body headers
		scope {header.X-Tenant}
		max_body 1MB
		max_buffered 512MiB
		buffer_bodies on
		record_ids raw
	}
}`)
	var h Handler
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	type withName struct {
		Name string `json:"handler"`
		*Handler
	}
	again, err := json.Marshal(withName{"session_keeping", &h})
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	json.Unmarshal(raw, &a)
	json.Unmarshal(again, &b)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip differs:\nadapted %s\nre-marshalled %s", raw, again)
	}
	if h.MaxBody != 1000000 || h.MaxBuffered != 512<<20 || !h.BufferBodies || *h.AutoDetect || !*h.BuiltinRules {
		t.Fatalf("decoded %+v", h)
	}
}

func TestDirectiveOrder(t *testing.T) {
	// No order option is needed, and session_keeping runs before route,
	// handle and reverse_proxy, after basic_auth.
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(`:8080 {
	reverse_proxy 127.0.0.1:9001
	handle /x {
		respond "x"
	}
	session_keeping
	basic_auth /private/* {
		u $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
	}
}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	auth, sk, handle, proxy := strings.Index(s, `"authentication"`), strings.Index(s, `"session_keeping"`), strings.Index(s, `"body":"x"`), strings.Index(s, `"reverse_proxy"`)
	if !(auth >= 0 && auth < sk && sk < handle && handle < proxy) {
		t.Fatalf("directive order wrong (auth %d, session_keeping %d, handle %d, proxy %d):\n%s", auth, sk, handle, proxy, s)
	}
}

func TestProvisionErrorsNameTheOption(t *testing.T) {
	tests := []struct {
		h    Handler
		want string
	}{
		{Handler{Headers: []SignalConfig{{Name: "Proxy-Authorization"}}}, "header"},
		{Handler{Headers: []SignalConfig{{Name: "X-S", Transform: "nope"}}}, "header X-S"},
		{Handler{BodyFields: []SignalConfig{{Name: ""}}}, "body_field"},
		{Handler{Order: []string{"everything"}}, "order"},
		{Handler{MaxBody: -5}, "max_body"},
		{Handler{MaxBuffered: -1}, "max_buffered"},
	}
	for _, tc := range tests {
		err := tc.h.Provision(caddy.Context{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %q", tc.h, err, tc.want)
		}
	}
	bad := Handler{RecordIDs: "sometimes"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "record_ids") {
		t.Errorf("Validate: %v", err)
	}
	off := false
	none := Handler{AutoDetect: &off, BuiltinRules: &off}
	if err := none.Provision(caddy.Context{}); err == nil {
		t.Error("a handler with no signal at all was accepted")
	}
}

func TestUnmarshalCaddyfileGatewayOptions(t *testing.T) {
	h, err := parse(t, `session_keeping {
		key_pool_sticky anthropic off
		key_pool openai {env.OPENAI_KEY_1} {env.OPENAI_KEY_2}
		key_pool anthropic {env.ANTHROPIC_KEY_1} literal-key
		key_pool_sticky openai on
		strip_client_signals on
		hint_secret {env.HINT_SECRET}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	on, off := true, false
	want := &Handler{
		KeyPools: []KeyPool{
			{Name: "openai", Keys: []string{"{env.OPENAI_KEY_1}", "{env.OPENAI_KEY_2}"}, Sticky: &on},
			{Name: "anthropic", Keys: []string{"{env.ANTHROPIC_KEY_1}", "literal-key"}, Sticky: &off},
		},
		StripClientSignals: true,
		HintSecret:         "{env.HINT_SECRET}",
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("got  %+v\nwant %+v", h, want)
	}

	// The JSON the adapter writes decodes to the same handler.
	raw := adaptHandler(t, `:8080 {
	session_keeping {
		key_pool openai {env.OPENAI_KEY_1} {env.OPENAI_KEY_2}
		key_pool_sticky openai off
		strip_client_signals on
		hint_secret fleet
	}
	reverse_proxy https://api.openai.com {
		header_up Authorization "Bearer {http.session.api_key.openai}"
	}
}`)
	var got Handler
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.KeyPools) != 1 || got.KeyPools[0].Name != "openai" || len(got.KeyPools[0].Keys) != 2 ||
		got.KeyPools[0].Sticky == nil || *got.KeyPools[0].Sticky || !got.StripClientSignals || got.HintSecret != "fleet" {
		t.Fatalf("adapted %s", raw)
	}
	if !strings.Contains(string(raw), `"key_pools"`) || !strings.Contains(string(raw), `{env.OPENAI_KEY_1}`) {
		t.Fatalf("adapted %s", raw)
	}
}

func TestUnmarshalCaddyfileGatewayOptionErrors(t *testing.T) {
	tests := []parseErrorCase{
		{"session_keeping {\nkey_pool\n}", "key_pool"},
		{"session_keeping {\nkey_pool openai\n}", "key_pool"},
		{"session_keeping {\nkey_pool a.b k\n}", "key_pool: bad pool name"},
		{"session_keeping {\nkey_pool p k1\nkey_pool p k2\n}", `key_pool: pool "p" is defined twice`},
		{"session_keeping {\nkey_pool_sticky\n}", "key_pool_sticky"},
		{"session_keeping {\nkey_pool p k\nkey_pool_sticky p\n}", "key_pool_sticky p"},
		{"session_keeping {\nkey_pool p k\nkey_pool_sticky p maybe\n}", "key_pool_sticky p"},
		{"session_keeping {\nkey_pool p k\nkey_pool_sticky q off\n}", `key_pool_sticky: no key_pool named "q"`},
		{"session_keeping {\nstrip_client_signals\n}", "strip_client_signals"},
		{"session_keeping {\nstrip_client_signals sometimes\n}", "strip_client_signals"},
		{"session_keeping {\nhint_secret\n}", "hint_secret"},
		{"session_keeping {\nhint_secret a b\n}", "hint_secret"},
	}
	checkParseErrors(t, tests)
	// Keys are never part of an error.
	_, err := parse(t, "session_keeping {\nkey_pool p sk-visible-key\nkey_pool p sk-visible-key\n}")
	if err == nil || strings.Contains(err.Error(), "sk-visible-key") {
		t.Errorf("error %v", err)
	}
}
