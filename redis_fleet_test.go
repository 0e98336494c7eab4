package sessionkeeping

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/internal/redistest"
)

// The multi-instance test: two Caddy processes, built from cmd/caddy, that
// share nothing but one Redis.

// buildCaddy builds cmd/caddy once per test run, into a directory removed
// when the tests end (see TestMain).
func buildCaddy(t *testing.T) string {
	t.Helper()
	bin, err := caddyBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	buildDir    string
	caddyBinary = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "caddy-session-keeping-test-")
		if err != nil {
			return "", err
		}
		buildDir = dir
		bin := filepath.Join(dir, "caddy")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/caddy").CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, out)
		}
		return bin, nil
	})
)

// TestMain removes the Caddy binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// caddyProcess is a Caddy running as its own process.
type caddyProcess struct {
	base  string // http://127.0.0.1:port of the site
	admin string // http://127.0.0.1:port of the admin endpoint
	log   string // the file its output goes to
	pid   int
}

// startCaddyProcess runs bin with a Caddyfile that has the placeholders
// {port} and {admin} for the site's and the admin endpoint's ports, and
// stops it when the test ends. env is added to the process's environment.
func startCaddyProcess(t *testing.T, bin, caddyfile string, env ...string) *caddyProcess {
	t.Helper()
	port, admin := freePort(t), freePort(t)
	caddyfile = strings.NewReplacer("{port}", strconv.Itoa(port), "{admin}", strconv.Itoa(admin)).Replace(caddyfile)
	dir := t.TempDir()
	config := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(config, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &caddyProcess{
		base:  fmt.Sprintf("http://127.0.0.1:%d", port),
		admin: fmt.Sprintf("http://127.0.0.1:%d", admin),
		log:   filepath.Join(dir, "caddy.log"),
	}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "run", "--config", config, "--adapter", "caddyfile")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(p.log)
			t.Logf("output of Caddy on %s:\n%s", p.base, out)
		}
	})
	waitFor(t, "Caddy process to serve "+p.admin, func() bool {
		resp, err := http.Get(p.admin + "/config/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// metric returns the value of an unlabelled metric from the admin
// endpoint's /metrics.
func (p *caddyProcess) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("%s not in /metrics", name)
	return 0
}

// turnResult is what a client saw of one request.
type turnResult struct {
	upstream string
	status   int
	err      error
	took     time.Duration
}

// runTurn sends one request of every session, session i to gateway
// (i+turn)%2, with a few sessions in flight at once, and returns what each
// saw.
func runTurn(client *http.Client, gateways []*caddyProcess, sessions, turn int) []turnResult {
	results := make([]turnResult, sessions)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"turn %d"}]}`, turn)
				req, _ := http.NewRequest(http.MethodPost, gateways[(i+turn)%2].base+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-Id", fmt.Sprintf("fleet-session-%03d", i))
				req.Header.Set("X-Turn", strconv.Itoa(turn))
				began := time.Now()
				resp, err := client.Do(req)
				r := turnResult{err: err, took: time.Since(began)}
				if err == nil {
					r.status, r.upstream = resp.StatusCode, resp.Header.Get("X-Upstream")
					resp.Body.Close()
				}
				results[i] = r
			}
		})
	}
	for i := range sessions {
		work <- i
	}
	close(work)
	wg.Wait()
	return results
}

// checkTurn fails the test for any request that did not get a 200 from an
// upstream, and returns the upstream of each session.
func checkTurn(t *testing.T, turn int, results []turnResult) []string {
	t.Helper()
	ups := make([]string, len(results))
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || r.upstream == "" {
			t.Fatalf("turn %d, session %d: status %d, upstream %q, error %v", turn, i, r.status, r.upstream, r.err)
		}
		ups[i] = r.upstream
	}
	return ups
}

func TestRedisFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Caddy and runs two gateways")
	}
	srv := redistest.Start(t)
	bin := buildCaddy(t)
	f := newFleet(t, 3)
	const prefix = "fleet-test:"
	// Placement is random here, so that two gateways left to themselves
	// would disagree on most sessions: only the shared store can keep a
	// session on one upstream.
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:{admin}
	auto_https off
	persist_config off
	log default {
		level WARN
	}
}
http://127.0.0.1:{port} {
	session_keeping
	%s
}
`, proxyBlock(f, `
		lb_policy session_sticky {
			fallback random
			store redis {
				address `+srv.Addr+`
				key_prefix `+prefix+`
				timeout 200ms
			}
		}
		lb_retries 2
		fail_duration 30s`))
	gateways := []*caddyProcess{startCaddyProcess(t, bin, caddyfile), startCaddyProcess(t, bin, caddyfile)}
	client := &http.Client{Timeout: 10 * time.Second}
	const sessions = 100

	// Five turns, each session alternating between the gateways; one
	// upstream is killed before the third.
	var upstreams [][]string // by turn, by session
	var killed string
	for turn := 1; turn <= 5; turn++ {
		if turn == 3 {
			count := map[string]int{}
			for _, u := range upstreams[1] {
				count[u]++
			}
			for _, b := range f.backends {
				if killed == "" || count[b.name] > count[killed] {
					killed = b.name
				}
			}
			f.byName(killed).kill(nil)
		}
		upstreams = append(upstreams, checkTurn(t, turn, runTurn(client, gateways, sessions, turn)))
	}
	moved := 0
	for i := range sessions {
		home := upstreams[0][i]
		for turn := 2; turn <= 5; turn++ {
			got := upstreams[turn-1][i]
			switch {
			case got == killed && turn >= 3:
				t.Errorf("session %d: turn %d on %s, which was killed", i, turn, killed)
			case turn < 3 || home != killed:
				if got != home {
					t.Errorf("session %d: turn %d on %s, home %s", i, turn, got, home)
				}
			case got != upstreams[2][i]:
				t.Errorf("session %d moved off %s to %s, then to %s in turn %d", i, killed, upstreams[2][i], got, turn)
			}
		}
		if home == killed {
			moved++
		}
	}
	t.Logf("%d of %d sessions were on %s when it was killed and moved once", moved, sessions, killed)
	if moved == 0 {
		t.Fatal("no session was on the killed upstream; the test proves nothing")
	}
	if n := len(srv.Keys(prefix + "*")); n != sessions {
		t.Errorf("Redis holds %d pins, want %d", n, sessions)
	}

	// Redis hangs: no request fails, none waits much longer than the
	// store's timeout, both gateways count store errors, and sessions stay.
	before := []float64{gateways[0].metric(t, "caddy_session_keeping_store_errors_total"), gateways[1].metric(t, "caddy_session_keeping_store_errors_total")}
	srv.Pause()
	results := runTurn(client, gateways, sessions, 6)
	srv.Stop()
	var slowest time.Duration
	for i, up := range checkTurn(t, 6, results) {
		slowest = max(slowest, results[i].took)
		if up != upstreams[4][i] {
			t.Errorf("session %d: on %s while Redis was down, was on %s", i, up, upstreams[4][i])
		}
	}
	t.Logf("slowest request while Redis hung: %s", slowest)
	// The timeout plus slack for a loaded machine; without the timeout a
	// hung Redis would hold requests for seconds.
	if slowest > time.Second {
		t.Errorf("a request took %s while Redis hung; the store's timeout is 200ms", slowest)
	}
	for g, p := range gateways {
		if after := p.metric(t, "caddy_session_keeping_store_errors_total"); after <= before[g] {
			t.Errorf("gateway %d: store errors %v → %v, want a rise", g, before[g], after)
		}
	}

	// Redis is back, empty: the gateways write each pin again on the
	// session's next request (requests served while a store still waits to
	// retry Redis write theirs one request later), and sessions stay.
	srv.Restart()
	time.Sleep(300 * time.Millisecond) // the stores retry Redis every 250ms
	for turn := 7; turn <= 8; turn++ {
		for i, up := range checkTurn(t, turn, runTurn(client, gateways, sessions, turn)) {
			if up != upstreams[4][i] {
				t.Errorf("turn %d, session %d: on %s after Redis came back, was on %s", turn, i, up, upstreams[4][i])
			}
		}
	}
	if n := len(srv.Keys(prefix + "*")); n != sessions {
		t.Errorf("after the restart Redis holds %d pins, want %d written again", n, sessions)
	}
}

// writeSelfSignedCert writes a certificate for 127.0.0.1, signed by its own
// key, and the key, as PEM files in dir.
func writeSelfSignedCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redis test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "redis.crt"), filepath.Join(dir, "redis.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestRedisStoreTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Caddy and runs it")
	}
	certFile, keyFile := writeSelfSignedCert(t, t.TempDir())
	srv := redistest.StartTLS(t, certFile, keyFile)
	bin := buildCaddy(t)
	f := newFleet(t, 2)
	caddyfile := func(prefix string) string {
		return fmt.Sprintf(`{
	admin 127.0.0.1:{admin}
	auto_https off
	persist_config off
	log default {
		level ERROR
	}
}
http://127.0.0.1:{port} {
	session_keeping
	%s
}
`, proxyBlock(f, `
		lb_policy session_sticky {
			store redis {
				address `+srv.TLSAddr+`
				tls on
				key_prefix `+prefix+`
				timeout 2s
			}
		}`))
	}
	// One gateway trusts the server's certificate (Go reads extra roots
	// from SSL_CERT_FILE), the other does not: its store must refuse the
	// connection and fail open.
	trusting := startCaddyProcess(t, bin, caddyfile("trusting:"), "SSL_CERT_FILE="+certFile)
	wary := startCaddyProcess(t, bin, caddyfile("wary:"))
	client := &http.Client{Timeout: 10 * time.Second}
	const sessions = 10
	for _, g := range []*caddyProcess{trusting, wary} {
		checkTurn(t, 1, runTurn(client, []*caddyProcess{g, g}, sessions, 1))
	}
	if n := len(srv.Keys("trusting:*")); n != sessions {
		t.Errorf("over TLS the store wrote %d pins, want %d", n, sessions)
	}
	if n := trusting.metric(t, "caddy_session_keeping_store_errors_total"); n != 0 {
		t.Errorf("the trusting gateway counted %v store errors", n)
	}
	if n := len(srv.Keys("wary:*")); n != 0 {
		t.Errorf("a store that does not trust the certificate wrote %d pins", n)
	}
	if n := wary.metric(t, "caddy_session_keeping_store_errors_total"); n == 0 {
		t.Error("the store that does not trust the certificate counted no errors")
	}
}
