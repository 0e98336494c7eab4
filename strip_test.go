package sessionkeeping

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// featureGateway starts Caddy with session_keeping (with the given options)
// in front of up, forwarding the key of pool "p" and the session hint. It
// returns the base URL and the access log path.
func featureGateway(t *testing.T, up *upstream, options string) (string, string) {
	t.Helper()
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	log {
		output file %s
		format json
	}
	session_keeping {
		%s
	}
	reverse_proxy %s {
		header_up X-Session-Key {http.session.key}
		header_up X-Session-Source {http.session.source}
		header_up X-Session-Hash {http.session.hash}
	}
}
`, port, logPath, options, up.addr()))
	return fmt.Sprintf("http://127.0.0.1:%d", port), logPath
}

// post sends body (chunked when asked) with extra headers and returns what
// the upstream saw.
func post(t *testing.T, up *upstream, url, body string, chunked bool, hdr map[string]string) seen {
	t.Helper()
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd)
	}
	req, err := http.NewRequest(http.MethodPost, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	before := len(up.requests())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := up.requests()
	if len(reqs) != before+1 {
		t.Fatalf("upstream saw %d requests, want 1", len(reqs)-before)
	}
	return reqs[len(reqs)-1]
}

// signalHeaders are session headers a client may send: built-in ones and
// the test's own `header` signal.
var signalHeaders = map[string]string{
	"X-Session-Id":             "hdr-sess",
	"X-Claude-Code-Session-Id": "cc-sess",
	"X-Litellm-Session-Id":     "ll-sess",
	"Agent-Session-Id":         "goose-sess",
	"X-My-Conversation":        "mine",
	"X-Keep-Me":                "kept",
}

func TestStripClientSignalsThroughCaddy(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := featureGateway(t, up, "header X-My-Conversation\n\t\tstrip_client_signals on")
	bodies := []struct{ name, in, want, source string }{
		{"start",
			`{"session_id":"s1","model":"m","messages":[{"role":"user","content":"hi \"there\""}]}`,
			`{"model":"m","messages":[{"role":"user","content":"hi \"there\""}]}`, "body:session_id"},
		{"middle",
			"{\n  \"model\": \"m\",\n  \"litellm_session_id\": \"s2\",\n  \"prompt_cache_key\": \"pck\",\n  \"metadata\": {\"user_id\": \"u\", \"session_id\": \"nested\"}\n}",
			"{\n  \"model\": \"m\",\n  \n  \"prompt_cache_key\": \"pck\",\n  \"metadata\": {\"user_id\": \"u\", \"session_id\": \"nested\"}\n}", "body:litellm_session_id"},
		{"end odd whitespace",
			"{ \"model\" :\"m\" ,\t\"conversation\":\"conv_1\" ,\r\n \"session_id\"\t:\t\"s3\"  }",
			"{ \"model\" :\"m\" ,\t\"conversation\":\"conv_1\" \r\n   }", "body:session_id"},
		{"both",
			`{"session_id":"s4","litellm_session_id":"s4","input":"x"}`,
			`{"input":"x"}`, "body:session_id"},
		{"nothing to strip",
			`{"model":"m","prompt_cache_key":"p5"}`,
			`{"model":"m","prompt_cache_key":"p5"}`, "body:prompt_cache_key"},
	}
	for _, b := range bodies {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s chunked=%v", b.name, chunked), func(t *testing.T) {
				got := post(t, up, base+"/v1/chat/completions", b.in, chunked, nil)
				if string(got.Body) != b.want {
					t.Fatalf("upstream body\n%q\nwant\n%q", got.Body, b.want)
				}
				if got.ContentLength != int64(len(b.want)) || got.Chunked {
					t.Fatalf("Content-Length %d (chunked %v), body %d bytes", got.ContentLength, got.Chunked, len(b.want))
				}
				// Resolution saw the signal before it was removed.
				if src := got.Header.Get("X-Session-Source"); src != b.source {
					t.Fatalf("session source %q, want %q", src, b.source)
				}
			})
		}
	}

	t.Run("headers", func(t *testing.T) {
		body := `{"model":"m","session_id":"s"}`
		got := post(t, up, base+"/v1/chat/completions", body, false, signalHeaders)
		for name := range signalHeaders {
			if name == "X-Keep-Me" {
				continue
			}
			if v := got.Header.Get(name); v != "" {
				t.Errorf("upstream saw %s: %q", name, v)
			}
		}
		if got.Header.Get("X-Keep-Me") != "kept" {
			t.Errorf("an unrelated header was removed")
		}
		if src := got.Header.Get("X-Session-Source"); src != "header:X-My-Conversation" {
			t.Errorf("session source %q", src)
		}
		if string(got.Body) != `{"model":"m"}` {
			t.Errorf("body %q", got.Body)
		}
	})
}

func TestStripOffKeepsEverything(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := featureGateway(t, up, "header X-My-Conversation")
	body := "{ \"session_id\" : \"s\",\n\"litellm_session_id\":\"l\", \"model\":\"m\"}"
	for _, chunked := range []bool{false, true} {
		got := post(t, up, base+"/v1/chat/completions", body, chunked, signalHeaders)
		// (A chunked body that resolution did not need is sent on chunked.)
		if string(got.Body) != body || (!chunked && got.ContentLength != int64(len(body))) {
			t.Fatalf("chunked=%v: body %q (Content-Length %d), want the client's", chunked, got.Body, got.ContentLength)
		}
		for name, v := range signalHeaders {
			if got.Header.Get(name) != v {
				t.Errorf("header %s: %q, want %q", name, got.Header.Get(name), v)
			}
		}
	}
}

func TestStripOverMaxBodyPassesUntouched(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := featureGateway(t, up, "strip_client_signals on\n\t\tmax_body 64")
	body := `{"session_id":"s","pad":"` + strings.Repeat("p", 200) + `"}`
	for _, chunked := range []bool{false, true} {
		got := post(t, up, base+"/v1/chat/completions", body, chunked, map[string]string{"X-Session-Id": "h"})
		if string(got.Body) != body {
			t.Fatalf("chunked=%v: a body over max_body was changed", chunked)
		}
		if got.Header.Get("X-Session-Id") != "" {
			t.Fatalf("chunked=%v: header kept", chunked)
		}
	}
}

func TestKeyPoolAndHintThroughCaddy(t *testing.T) {
	keys := []string{"sk-test-AAAA-1111", "sk-test-BBBB-2222", "sk-test-CCCC-3333"}
	for i, k := range keys {
		t.Setenv(fmt.Sprintf("SK_POOL_TEST_%d", i+1), k)
	}
	up := newUpstream(t, "a")
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	startCaddy(t, fmt.Sprintf(`http://127.0.0.1:%d {
	log {
		output file %s
		format json
	}
	session_keeping {
		key_pool p {env.SK_POOL_TEST_1} {env.SK_POOL_TEST_2} {env.SK_POOL_TEST_3}
		hint_secret fleet-secret
		record_ids raw
	}
	reverse_proxy %s {
		header_up Authorization "Bearer {http.session.api_key.p}"
		header_up X-Session-Hash {http.session.hash}
	}
}
`, port, logPath, up.addr()))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	url := base + "/v1/chat/completions"

	hashes := map[string]string{}
	for i := range 20 {
		id := fmt.Sprintf("conversation-%d", i)
		var key, hash string
		for j := range 3 {
			got := post(t, up, url, `{"model":"m"}`, false, map[string]string{"X-Session-Id": id, "Authorization": "Bearer client-token"})
			k, h := got.Header.Get("Authorization"), got.Header.Get("X-Session-Hash")
			if j == 0 {
				key, hash = k, h
			} else if k != key || h != hash {
				t.Fatalf("session %s: key/hash changed between requests", id)
			}
		}
		if !strings.HasPrefix(key, "Bearer sk-test-") {
			t.Fatalf("session %s: upstream Authorization %q", id, key)
		}
		if len(hash) != 32 || strings.Contains(hash, id) {
			t.Fatalf("session %s: hint %q", id, hash)
		}
		if other, dup := hashes[hash]; dup {
			t.Fatalf("sessions %s and %s share a hint", id, other)
		}
		hashes[hash] = id
	}

	// Without a session: round robin over every key, and an empty hint.
	count := map[string]int{}
	for range 30 {
		got := post(t, up, url, `[1]`, false, nil)
		count[got.Header.Get("Authorization")]++
		if got.Header.Get("X-Session-Hash") != "" {
			t.Fatalf("hint without a session")
		}
	}
	for _, k := range keys {
		if count["Bearer "+k] != 10 {
			t.Fatalf("sessionless requests: %v, want 10 per key", count)
		}
	}

	log, err := os.ReadFile(logPath)
	if err != nil || len(log) == 0 {
		t.Fatalf("access log: %v (%d bytes)", err, len(log))
	}
	for _, k := range keys {
		if strings.Contains(string(log), k) {
			t.Fatalf("access log contains a pool key")
		}
	}
	if !strings.Contains(string(log), "conversation-0") {
		t.Fatalf("access log has no raw id: is it the right log?")
	}
}
