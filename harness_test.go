package sessionkeeping

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// caddyMu serialises tests that run Caddy: the process holds one config.
var caddyMu sync.Mutex

// startCaddy adapts a Caddyfile and runs it in this process until the test
// ends. The Caddyfile should start with a global options block; one with
// admin off, auto_https off and quiet logs is prepended when it has none.
// It returns the adapted JSON config (for reloads through the admin API).
func startCaddy(t testing.TB, caddyfile string) []byte {
	t.Helper()
	if !strings.HasPrefix(strings.TrimSpace(caddyfile), "{") {
		caddyfile = "{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tlog default {\n\t\toutput discard\n\t}\n}\n" + caddyfile
	}
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting Caddyfile: %v\n%s", err, caddyfile)
	}
	caddyMu.Lock()
	if err := caddy.Load(cfg, true); err != nil {
		caddyMu.Unlock()
		t.Fatalf("loading config: %v\n%s", err, cfg)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping Caddy: %v", err)
		}
		caddyMu.Unlock()
	})
	return cfg
}

// seen is what an upstream observed of one request.
type seen struct {
	Method        string
	Path          string
	Header        http.Header
	BodySHA       string
	BodyLen       int
	Body          []byte
	ContentLength int64
	Chunked       bool
	ReadErr       error
}

// upstream is a real HTTP server that records what it receives.
type upstream struct {
	*httptest.Server
	name string

	mu   sync.Mutex
	reqs []seen
}

func newUpstream(t testing.TB, name string) *upstream {
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		sum := sha256.Sum256(body)
		s := seen{
			Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(),
			BodySHA: hex.EncodeToString(sum[:]), BodyLen: len(body), Body: body,
			ContentLength: r.ContentLength, Chunked: len(r.TransferEncoding) > 0, ReadErr: err,
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, s)
		u.mu.Unlock()
		w.Header().Set("X-Upstream", name)
		fmt.Fprintf(w, "%s %s", name, r.Header.Get("X-Session-Key"))
	}))
	t.Cleanup(u.Close)
	return u
}

// requests returns a copy of what the upstream has seen.
func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

// addr is the upstream's host:port, for reverse_proxy.
func (u *upstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually(t, 5*time.Second, what, cond)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
