package sessionkeeping

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// chatBody is a reader of an OpenAI chat request body of exactly size
// bytes whose one user message is filler text: a large body made as it is
// sent, so a test can send many without holding them.
type chatBody struct {
	head, tail []byte
	filler     int // bytes of filler still to come
	seed       byte
}

func newChatBody(size int, seed byte) *chatBody {
	head := []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"conversation %d: `, seed))
	tail := []byte(`"}]}`)
	return &chatBody{head: head, tail: tail, filler: size - len(head) - len(tail), seed: seed}
}

func (b *chatBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		switch {
		case len(b.head) > 0:
			k := copy(p[n:], b.head)
			b.head = b.head[k:]
			n += k
		case b.filler > 0:
			k := min(len(p)-n, b.filler)
			for i := range k {
				p[n+i] = 'a' + byte((b.filler-i)%26)
			}
			b.filler -= k
			n += k
		case len(b.tail) > 0:
			k := copy(p[n:], b.tail)
			b.tail = b.tail[k:]
			n += k
		default:
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
	}
	return n, nil
}

// hashingUpstream answers 200 with the SHA-256 and length of the body it
// read, after delay, unless fail says to drop the connection once the
// body was read.
func hashingUpstream(t *testing.T, name string, delay time.Duration, fail func() bool) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		if fail != nil && fail() {
			panic(http.ErrAbortHandler) // the body was read whole; the answer never comes
		}
		time.Sleep(delay)
		w.Header().Set("X-Upstream", name)
		w.Header().Set("X-Body-Sha", hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("X-Body-Len", strconv.FormatInt(n, 10))
	}))
	t.Cleanup(s.Close)
	return s
}

// sendChat posts a generated body of size bytes and checks that the
// upstream received exactly those bytes; it returns the upstream's name.
func sendChat(client *http.Client, url string, size int, seed byte, header ...string) (string, error) {
	h := sha256.New()
	req, err := http.NewRequest(http.MethodPost, url, io.TeeReader(newChatBody(size, seed), h))
	if err != nil {
		return "", err
	}
	req.ContentLength = int64(size)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	if got, want := resp.Header.Get("X-Body-Sha"), hex.EncodeToString(h.Sum(nil)); got != want || resp.Header.Get("X-Body-Len") != strconv.Itoa(size) {
		return "", fmt.Errorf("the upstream got %s bytes with SHA-256 %.12s, the client sent %d with %.12s",
			resp.Header.Get("X-Body-Len"), got, size, want)
	}
	return resp.Header.Get("X-Upstream"), nil
}

// TestRetryResendsHeldBody: an upstream reads the whole body, then drops
// the connection. Without request_buffers, the retry sends the body the
// handler holds, whole, to another upstream.
func TestRetryResendsHeldBody(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options string
		header  []string
		want200 bool
	}{
		{"auto-detected body", "", nil, true},
		{"header session, buffer_bodies on", "buffer_bodies on", []string{"X-Session-Id", "s-1"}, true},
		// The control: a body nobody held cannot be sent again.
		{"header session, buffer_bodies off", "", []string{"X-Session-Id", "s-1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failed atomic.Bool
			failFirst := func() bool { return failed.CompareAndSwap(false, true) }
			var addrs []string
			for i := range 3 {
				u := hashingUpstream(t, fmt.Sprintf("u%d", i+1), 0, failFirst)
				addrs = append(addrs, strings.TrimPrefix(u.URL, "http://"))
			}
			port := freePort(t)
			startCaddy(t, fmt.Sprintf(`
http://127.0.0.1:%d {
	session_keeping {
		%s
	}
	reverse_proxy %s {
		lb_policy session_sticky
		lb_retries 2
		lb_retry_match {
			method POST
		}
	}
}`, port, tc.options, strings.Join(addrs, " ")))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			up, err := sendChat(http.DefaultClient, url, 3<<20, 1, tc.header...)
			if !failed.Load() {
				t.Fatalf("no upstream failed the request")
			}
			if tc.want200 && err != nil {
				t.Fatalf("retry: %v", err)
			}
			if !tc.want200 && err == nil {
				t.Fatalf("a body nobody held was resent (answered by %s)", up)
			}
		})
	}
}

// TestBodyBudgetThroughCaddyProcess sends 32 concurrent 30 MiB chat bodies
// without a session header through a Caddy process with the default
// budget, to upstreams that answer 300 ms after reading. Every body must
// arrive exactly as sent, every request must get 200, and Caddy's peak
// memory must stay within the budget plus 150 MB.
func TestBodyBudgetThroughCaddyProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2 GB through loopback")
	}
	var addrs []string
	for i := range 4 {
		u := hashingUpstream(t, fmt.Sprintf("u%d", i+1), 300*time.Millisecond, nil)
		addrs = append(addrs, strings.TrimPrefix(u.URL, "http://"))
	}
	p := startCaddyProcess(t, buildCaddy(t), fmt.Sprintf(`{
	admin 127.0.0.1:{admin}
	auto_https off
	persist_config off
}
http://127.0.0.1:{port} {
	session_keeping
	reverse_proxy %s {
		lb_policy session_sticky
	}
}`, strings.Join(addrs, " ")))

	const clients, size = 32, 30 << 20
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			if _, err := sendChat(client, p.base+"/v1/chat/completions", size, byte(i), nil...); err != nil {
				errs <- fmt.Errorf("client %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	peak := peakRSS(t, p.pid)
	limit := int64(session.DefaultMaxBuffered) + 150e6
	t.Logf("Caddy's peak RSS: %.0f MB (limit %.0f MB); bodies over the budget: %.0f",
		float64(peak)/1e6, float64(limit)/1e6, p.metric(t, "caddy_session_keeping_unbuffered_bodies_total"))
	if peak > limit {
		t.Errorf("peak RSS %d bytes, over the budget plus 150 MB (%d)", peak, limit)
	}
	if n := p.metric(t, "caddy_session_keeping_unbuffered_bodies_total"); n == 0 {
		t.Errorf("no body went over the budget: the test did not reach it")
	}
	if n := p.metric(t, "caddy_session_keeping_buffered_bytes"); n != 0 {
		t.Errorf("%.0f bytes still held after every response", n)
	}
}

// peakRSS returns the peak resident set size of process pid (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range bytes.Lines(status) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
