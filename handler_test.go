package sessionkeeping

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// gateway starts Caddy with one site that runs session_keeping (with the
// given options) in front of up, forwarding what it resolved as headers.
// It returns the gateway's base URL and the access log path.
func gateway(t *testing.T, up *upstream, options string, extraGlobal string) (string, string) {
	t.Helper()
	port := freePort(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	startCaddy(t, fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	log default {
		output discard
	}
	%s
}

http://127.0.0.1:%d {
	log {
		output file %s
		format json
	}
	request_body /limited/* {
		max_size 1KB
	}
	session_keeping {
		%s
	}
	reverse_proxy %s {
		header_up X-Session-Key {http.session.key}
		header_up X-Session-Id-Seen {http.session.id}
		header_up X-Session-Source {http.session.source}
		header_up X-Session-Model {http.session.model}
	}
}
`, extraGlobal, port, logPath, options, up.addr()))
	return fmt.Sprintf("http://127.0.0.1:%d", port), logPath
}

func TestBodyIntegrityThroughCaddy(t *testing.T) {
	up := newUpstream(t, "a")
	const maxBody = 2 << 20
	base, _ := gateway(t, up, fmt.Sprintf("max_body %d", maxBody), "")

	jsonOf := func(n int) []byte {
		// A JSON chat body of exactly n bytes with a session id at the end
		// and escapes and multi-byte text in its content.
		head := `{"model":"m","messages":[{"role":"user","content":"é\\\"x\\n`
		tail := `"}],"session_id":"body-sess"}`
		if n < len(head)+len(tail) {
			return bytes.Repeat([]byte("z"), n)
		}
		return []byte(head + strings.Repeat("a", n-len(head)-len(tail)) + tail)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(jsonOf(4096))
	zw.Close()

	tests := []struct {
		name     string
		body     []byte
		chunked  bool
		ctype    string
		encoding string
		wantSess string // expected X-Session-Source upstream
	}{
		{"0 B", nil, false, "application/json", "", ""},
		{"1 KiB", jsonOf(1024), false, "application/json", "", "body:session_id"},
		{"1 MiB", jsonOf(1 << 20), false, "application/json", "", "body:session_id"},
		{"max_body+1", jsonOf(maxBody + 1), false, "application/json", "", ""},
		{"chunked 64 KiB", jsonOf(64 << 10), true, "application/json", "", "body:session_id"},
		{"chunked max_body+1", jsonOf(maxBody + 1), true, "application/json", "", ""},
		{"gzip", gz.Bytes(), false, "application/json", "gzip", ""},
		{"non-JSON", bytes.Repeat([]byte{0, 1, 2, 0xff}, 4096), false, "application/octet-stream", "", ""},
		{"invalid JSON", []byte(`{"session_id":"x", broken`), false, "application/json", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", body)
			req.Header.Set("Content-Type", tc.ctype)
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
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
			got := reqs[len(reqs)-1]
			if got.ReadErr != nil {
				t.Fatalf("upstream read error: %v", got.ReadErr)
			}
			if got.BodySHA != sha(tc.body) || got.BodyLen != len(tc.body) {
				t.Fatalf("upstream got %d bytes (sha %s…), client sent %d (sha %s…)", got.BodyLen, got.BodySHA[:8], len(tc.body), sha(tc.body)[:8])
			}
			if src := got.Header.Get("X-Session-Source"); src != tc.wantSess {
				t.Fatalf("session source %q, want %q", src, tc.wantSess)
			}
			if tc.chunked && tc.wantSess != "" && (got.Chunked || got.ContentLength != int64(len(tc.body))) {
				t.Fatalf("a captured chunked body was sent with chunked=%v Content-Length=%d; want a Content-Length", got.Chunked, got.ContentLength)
			}
		})
	}
}

func TestRequestBodyMaxSizeStill413(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := gateway(t, up, "", "")
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(`{"session_id":"s","pad":"` + strings.Repeat("p", 4096) + `"}`)
		if chunked {
			body = io.MultiReader(body)
		}
		resp, err := http.Post(base+"/limited/v1/chat/completions", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked=%v: status %d, want 413", chunked, resp.StatusCode)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream saw %d requests with a body over max_size", n)
	}
}

func TestClientAbortMidBody(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := gateway(t, up, "", "")
	addr := strings.TrimPrefix(base, "http://")
	for _, framing := range []string{"Content-Length: 4000\r\n", "Transfer-Encoding: chunked\r\n"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		part := `{"model":"m","session_id":"s","messages":[{"role":"user","content":"` + strings.Repeat("a", 1000)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n%s\r\n", addr, framing)
		if strings.HasPrefix(framing, "Transfer") {
			fmt.Fprintf(conn, "%x\r\n%s\r\n", len(part), part)
		} else {
			io.WriteString(conn, part)
		}
		conn.(*net.TCPConn).CloseWrite()
		// Whatever the gateway answers, the connection must end cleanly.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			if resp.StatusCode < 400 {
				t.Errorf("%s: status %d for an aborted body", framing, resp.StatusCode)
			}
			resp.Body.Close()
		}
		conn.Close()
	}
	time.Sleep(100 * time.Millisecond)
	for _, r := range up.requests() {
		t.Errorf("upstream received a request for an aborted body (%d bytes)", r.BodyLen)
	}
	// The gateway is still serving.
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"session_id":"after"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d after aborted requests", resp.StatusCode)
	}
}

func TestPlaceholdersAndLogFields(t *testing.T) {
	up := newUpstream(t, "a")
	base, logPath := gateway(t, up, "record_ids raw", "")
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Claude-Code-Session-Id", "cc-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := up.requests()[0].Header
	wantKey := session.NewKey([]string{""}, "cc-123").String()
	if got.Get("X-Session-Key") != wantKey || got.Get("X-Session-Id-Seen") != "cc-123" ||
		got.Get("X-Session-Source") != "header:X-Claude-Code-Session-Id" || got.Get("X-Session-Model") != "" {
		t.Fatalf("placeholders upstream: key=%q id=%q source=%q model=%q", got.Get("X-Session-Key"), got.Get("X-Session-Id-Seen"), got.Get("X-Session-Source"), got.Get("X-Session-Model"))
	}

	// No header: the body is read, so the model is known; the id is auto.
	resp, err = http.Post(base+"/v1/messages", "application/json", strings.NewReader(`{"model":"claude-haiku-4-5","system":"s","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got = up.requests()[1].Header
	if got.Get("X-Session-Model") != "claude-haiku-4-5" || got.Get("X-Session-Source") != "auto" || !strings.HasPrefix(got.Get("X-Session-Id-Seen"), "auto-") {
		t.Fatalf("auto placeholders: %v", got)
	}

	// No session at all: placeholders are empty, not left verbatim.
	resp, err = http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got = up.requests()[2].Header
	for _, h := range []string{"X-Session-Key", "X-Session-Id-Seen", "X-Session-Source"} {
		if v := got.Get(h); v != "" {
			t.Fatalf("%s = %q without a session", h, v)
		}
	}

	lines := readLog(t, logPath, 3)
	if lines[0]["session"] != wantKey || lines[0]["session_source"] != "header:X-Claude-Code-Session-Id" || lines[0]["session_id"] != "cc-123" {
		t.Fatalf("log fields: session=%v source=%v id=%v", lines[0]["session"], lines[0]["session_source"], lines[0]["session_id"])
	}
	if _, ok := lines[2]["session"]; ok {
		t.Fatalf("a request without a session was logged with one: %v", lines[2])
	}
}

func TestLogFieldsHashedByDefault(t *testing.T) {
	up := newUpstream(t, "a")
	base, logPath := gateway(t, up, "", "")
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("X-Session-Id", "secret-session-value")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	line := readLog(t, logPath, 1)[0]
	if _, ok := line["session_id"]; ok {
		t.Fatal("session_id logged without record_ids raw")
	}
	// The request headers are logged by Caddy itself; the plugin's own
	// fields must not carry the raw id.
	if line["session"] != session.NewKey([]string{""}, "secret-session-value").String() {
		t.Fatalf("session field %v, want the key", line["session"])
	}
}

// readLog waits for n access-log lines and returns them decoded.
func readLog(t *testing.T, path string, n int) []map[string]any {
	t.Helper()
	return readJSONLines(t, 5*time.Second, path, n)
}

func TestCodexUnderscoreHeader(t *testing.T) {
	body := `{"model":"gpt-5-codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"prompt_cache_key":"pck-1"}`
	send := func(base string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header["session_id"] = []string{"uscore-1"} // sent as is, lowercase with an underscore
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	t.Run("allowed", func(t *testing.T) {
		up := newUpstream(t, "a")
		base, _ := gateway(t, up, "", "servers {\n\t\texpected_underscore_headers session_id\n\t}")
		send(base)
		h := up.requests()[0].Header
		if h.Get("X-Session-Source") != "header:Session_id" || h.Get("X-Session-Id-Seen") != "uscore-1" {
			t.Fatalf("source %q id %q, want the session_id header", h.Get("X-Session-Source"), h.Get("X-Session-Id-Seen"))
		}
	})
	t.Run("dropped by Caddy", func(t *testing.T) {
		up := newUpstream(t, "a")
		base, _ := gateway(t, up, "", "")
		send(base)
		h := up.requests()[0].Header
		if h.Get("X-Session-Source") != "body:prompt_cache_key" || h.Get("X-Session-Id-Seen") != "pck-1" {
			t.Fatalf("source %q id %q, want prompt_cache_key", h.Get("X-Session-Source"), h.Get("X-Session-Id-Seen"))
		}
	})
}

func TestScopeThroughCaddy(t *testing.T) {
	up := newUpstream(t, "a")
	base, _ := gateway(t, up, "scope {header.X-Tenant}", "")
	keys := map[string]string{}
	for _, tenant := range []string{"t1", "t2", "t1"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		req.Header.Set("X-Session-Id", "shared-id")
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		reqs := up.requests()
		k := reqs[len(reqs)-1].Header.Get("X-Session-Key")
		if prev, ok := keys[tenant]; ok && prev != k {
			t.Fatalf("tenant %s got two keys", tenant)
		}
		keys[tenant] = k
	}
	if keys["t1"] == keys["t2"] {
		t.Fatal("two tenants share a session key")
	}
}
