package sessionkeeping

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// This file holds the helpers of the end-to-end stickiness tests: a fleet
// of real upstream servers that report what the gateway told them, and a
// gateway (a real in-process Caddy) with session_keeping in front of
// reverse_proxy blocks that use lb_policy session_sticky.

// hit is what a backend saw of one request: the session, the client's turn
// number and the gateway's placeholders as forwarded by header_up.
type hit struct {
	backend  string
	session  string // {http.session.id}
	turn     string // the client's X-Turn
	decision string // {http.session.decision}
	upstream string // {http.session.upstream}
	path     string
}

// fleet is a set of backends sharing one log of hits.
type fleet struct {
	backends []*backend

	mu   sync.Mutex
	hits []hit
}

// backend is a real HTTP server. It records every request it receives and
// answers with its name (header X-Upstream and the body) and the decision
// it was told (X-Decision), unless its hook answers instead. A dead backend
// aborts every request without an answer, like a killed process.
type backend struct {
	*httptest.Server
	name  string
	fleet *fleet
	dead  atomic.Bool

	mu   sync.Mutex
	hook func(w http.ResponseWriter, r *http.Request) bool
}

// newFleet starts n backends named u1…un.
func newFleet(t *testing.T, n int) *fleet { return newNamedFleet(t, "u", n) }

// newNamedFleet starts n backends named <prefix>1…<prefix>n.
func newNamedFleet(t *testing.T, prefix string, n int) *fleet {
	t.Helper()
	f := &fleet{}
	for i := range n {
		b := &backend{name: fmt.Sprintf("%s%d", prefix, i+1), fleet: f}
		b.Server = httptest.NewServer(http.HandlerFunc(b.serve))
		t.Cleanup(b.Close)
		f.backends = append(f.backends, b)
	}
	return f
}

func (b *backend) serve(w http.ResponseWriter, r *http.Request) {
	if b.dead.Load() {
		panic(http.ErrAbortHandler)
	}
	io.Copy(io.Discard, r.Body)
	h := hit{
		backend:  b.name,
		session:  r.Header.Get("X-Session-Id-Seen"),
		turn:     r.Header.Get("X-Turn"),
		decision: r.Header.Get("X-Session-Decision"),
		upstream: r.Header.Get("X-Session-Upstream"),
		path:     r.URL.Path,
	}
	b.fleet.mu.Lock()
	b.fleet.hits = append(b.fleet.hits, h)
	b.fleet.mu.Unlock()

	w.Header().Set("X-Upstream", b.name)
	w.Header().Set("X-Decision", h.decision)
	b.mu.Lock()
	hook := b.hook
	b.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	io.WriteString(w, b.name)
}

// setHook installs a function that may answer requests instead of the
// backend (returning true when it did); nil removes it.
func (b *backend) setHook(fn func(w http.ResponseWriter, r *http.Request) bool) {
	b.mu.Lock()
	b.hook = fn
	b.mu.Unlock()
}

// holdSlow makes every backend hold requests to /slow until release is
// called (or 20 s pass); entered receives once per held request, with room
// for n. release may be called more than once; the test's end calls it.
func (f *fleet) holdSlow(t *testing.T, n int) (entered chan struct{}, release func()) {
	entered, held := make(chan struct{}, n), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/slow" {
			return false
		}
		entered <- struct{}{}
		select {
		case <-held:
		case <-time.After(20 * time.Second):
		}
		return false
	})
	return entered, release
}

// addr is the backend's host:port, its dial address in reverse_proxy.
func (b *backend) addr() string { return strings.TrimPrefix(b.URL, "http://") }

// setHook installs fn on every backend of the fleet.
func (f *fleet) setHook(fn func(w http.ResponseWriter, r *http.Request) bool) {
	for _, b := range f.backends {
		b.setHook(fn)
	}
}

func (f *fleet) byName(name string) *backend {
	for _, b := range f.backends {
		if b.name == name {
			return b
		}
	}
	return nil
}

func (f *fleet) addrs() string {
	var a []string
	for _, b := range f.backends {
		a = append(a, b.addr())
	}
	return strings.Join(a, " ")
}

// recorded returns a copy of every hit so far, in arrival order.
func (f *fleet) recorded() []hit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]hit(nil), f.hits...)
}

// checkUpstreamPlaceholder fails the test if a backend was told, through
// {http.session.upstream}, that another upstream was chosen for a session
// request it received.
func (f *fleet) checkUpstreamPlaceholder(t *testing.T) {
	t.Helper()
	bad := 0
	for _, h := range f.recorded() {
		if h.session == "" {
			continue
		}
		if want := f.byName(h.backend).addr(); h.upstream != want && bad < 5 {
			bad++
			t.Errorf("%s got session %s turn %s with {http.session.upstream}=%q, want %q", h.backend, h.session, h.turn, h.upstream, want)
		}
	}
}

// dropConnections closes every connection to the backends, so that pooled
// keep-alive connections (and their goroutines) go away.
func (f *fleet) dropConnections() {
	for _, b := range f.backends {
		b.CloseClientConnections()
	}
}

// kill shuts the backend down as a crash would: requests still arriving
// are aborted without an answer, every connection is closed, then the
// listener. release runs after the connections are gone and before the
// listener is closed; it lets a handler held by a hook return.
func (b *backend) kill(release func()) {
	b.dead.Store(true)
	b.CloseClientConnections()
	if release != nil {
		release()
	}
	b.Close()
}

// sessionHeaders forward the gateway's view of each attempt to the backend.
const sessionHeaders = `
		header_up X-Session-Decision {http.session.decision}
		header_up X-Session-Upstream {http.session.upstream}
		header_up X-Session-Id-Seen {http.session.id}`

// proxyBlock is a reverse_proxy block over the fleet with the given
// options (one per line, Caddyfile syntax) and the session headers.
func proxyBlock(f *fleet, options string) string {
	return fmt.Sprintf("reverse_proxy %s {%s\n%s\n\t}", f.addrs(), sessionHeaders, options)
}

// gw is a running gateway.
type gw struct {
	t       *testing.T
	base    string // http://127.0.0.1:port
	admin   string // the admin endpoint's base URL, "" when off
	logPath string
	config  []byte // the adapted JSON config
	client  *http.Client
	errLog  string       // Caddy's own log at level ERROR, "" when discarded
	resent  atomic.Int64 // requests sent again by callAgain

	adminResent atomic.Int64 // loads sent again by reload
}

// gwOptions are the gateway's optional features.
type gwOptions struct {
	// admin runs the admin endpoint on a free loopback port (for reloads).
	admin bool
	// errorLog keeps Caddy's own ERROR log (handler panics, proxy errors)
	// in a file, for checkErrorLog.
	errorLog bool
}

// startGateway runs Caddy with one site: an access log in JSON, the
// session_keeping handler with its defaults, then siteBody.
func startGateway(t *testing.T, siteBody string) *gw {
	t.Helper()
	return startGatewayWith(t, gwOptions{}, siteBody)
}

// startGatewayWith is startGateway with options.
func startGatewayWith(t *testing.T, o gwOptions, siteBody string) *gw {
	t.Helper()
	dir := t.TempDir()
	g := &gw{t: t, logPath: filepath.Join(dir, "access.log")}
	adminOption := "admin off"
	if o.admin {
		port := freePort(t)
		adminOption = fmt.Sprintf("admin 127.0.0.1:%d", port)
		g.admin = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	defaultLog := "output discard"
	if o.errorLog {
		g.errLog = filepath.Join(dir, "caddy.log")
		defaultLog = fmt.Sprintf("output file %s\n\t\tformat json\n\t\tlevel ERROR", g.errLog)
	}
	port := freePort(t)
	g.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	g.config = startCaddy(t, fmt.Sprintf(`{
	%s
	auto_https off
	persist_config off
	log default {
		%s
	}
}

http://127.0.0.1:%d {
	log {
		output file %s
		format json
	}
	session_keeping
	%s
}
`, adminOption, defaultLog, port, g.logPath, siteBody))
	if o.admin {
		// Runs before startCaddy's caddy.Stop, which leaves the admin
		// endpoint running: a config with the endpoint disabled stops it.
		t.Cleanup(func() {
			off := `{"admin":{"disabled":true,"config":{"persist":false}},"logging":{"logs":{"default":{"writer":{"output":"discard"}}}}}`
			if err := caddy.Load([]byte(off), true); err != nil {
				t.Errorf("stopping the admin endpoint: %v", err)
			}
		})
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	g.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return g
}

// reply is what the client got for one request.
type reply struct {
	status   int
	upstream string // the backend that answered (X-Upstream)
	decision string // the decision that backend was told (X-Decision)
	body     string
	err      error
}

func (r reply) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d from %s (%s)", r.status, r.upstream, r.decision)
}

// ok reports whether the request succeeded with a 200.
func (r reply) ok() bool { return r.err == nil && r.status == http.StatusOK }

// call sends turn number turn of session sid to path: a POST of a JSON
// chat body carrying the id in the X-Session-Id header or, with inBody, as
// the body's session_id. With sid empty it sends a GET without a session.
func (g *gw) call(path, sid string, turn int, inBody bool) reply {
	var req *http.Request
	if sid == "" {
		req, _ = http.NewRequest(http.MethodGet, g.base+path, nil)
	} else {
		field := ""
		if inBody {
			field = fmt.Sprintf(`,"session_id":%q`, sid)
		}
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"turn %d"}]%s}`, turn, field)
		req, _ = http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if !inBody {
			req.Header.Set("X-Session-Id", sid)
		}
	}
	req.Header.Set("X-Turn", strconv.Itoa(turn))
	resp, err := g.client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{
		status:   resp.StatusCode,
		upstream: resp.Header.Get("X-Upstream"),
		decision: resp.Header.Get("X-Decision"),
		body:     string(b),
		err:      err,
	}
}

// checkErrorLog fails the test if Caddy logged an error (such as a
// recovered handler panic, which the client sees only as a closed
// connection).
func (g *gw) checkErrorLog() {
	g.t.Helper()
	data, err := os.ReadFile(g.errLog)
	if err != nil && !os.IsNotExist(err) {
		g.t.Fatal(err)
	}
	if len(bytes.TrimSpace(data)) > 0 {
		g.t.Errorf("Caddy logged errors:\n%.10000s", data)
	}
}

// callAgain is call for requests that may meet a reload: a request that
// failed without any HTTP answer (a connection closed or reset by the
// old server) is sent again for up to five seconds, as an SDK client
// would; g.resent counts those.
func (g *gw) callAgain(path, sid string, turn int, inBody bool) reply {
	r := g.call(path, sid, turn, inBody)
	for deadline := time.Now().Add(5 * time.Second); r.status == 0 && time.Now().Before(deadline); {
		g.resent.Add(1)
		time.Sleep(10 * time.Millisecond)
		r = g.call(path, sid, turn, inBody)
	}
	return r
}

// logLines waits until the access log has at least n lines and returns
// them all.
func (g *gw) logLines(n int) []map[string]any {
	g.t.Helper()
	return readJSONLines(g.t, 15*time.Second, g.logPath, n)
}

// readJSONLines waits until the file at path holds at least n JSON lines
// and returns them decoded.
func readJSONLines(t testing.TB, timeout time.Duration, path string, n int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	eventually(t, timeout, fmt.Sprintf("%d JSON lines in %s", n, path), func() bool {
		data, _ := os.ReadFile(path)
		lines = lines[:0]
		for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil {
				lines = append(lines, m)
			}
		}
		return len(lines) >= n
	})
	return lines
}

// adminClient talks to the admin endpoint without keep-alive: every load
// replaces the admin server, and a reused connection to the old one could
// be closed under the next request.
var adminClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true},
	Timeout:   60 * time.Second,
}

// reload posts the gateway's config to the admin endpoint's /load. With
// force, the request carries Cache-Control: must-revalidate, without which
// Caddy skips a config identical to the running one.
//
// Every load replaces the admin server too, with a new SO_REUSEPORT socket;
// a connection queued on the old one when it closes is reset. Such a
// request, which got no answer, is sent again (counted in g.adminResent).
func (g *gw) reload(force bool) error {
	var resp *http.Response
	var err error
	for try := 1; ; try++ {
		req, _ := http.NewRequest(http.MethodPost, g.admin+"/load", bytes.NewReader(g.config))
		req.Header.Set("Content-Type", "application/json")
		if force {
			req.Header.Set("Cache-Control", "must-revalidate")
		}
		resp, err = adminClient.Do(req)
		if err == nil || try == 10 {
			break
		}
		g.adminResent.Add(1)
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /load: %s: %s", resp.Status, body)
	}
	return nil
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parallel calls fn(0)…fn(n-1) on the given number of goroutines.
func parallel(workers, n int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// settledGoroutines waits until the goroutine count stops changing for a
// moment and returns it.
func settledGoroutines() int {
	last := runtime.NumGoroutine()
	for i := 0; i < 30; i++ {
		time.Sleep(100 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

// goroutineDump is the stacks of all goroutines, for failure messages.
func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// receive returns the next value from ch, failing the test if none comes
// within ten seconds.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
