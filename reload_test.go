package sessionkeeping

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// pinSessions sends the first turn of each session and returns the
// backend that took it.
func pinSessions(t *testing.T, g *gw, sids []string) map[string]string {
	t.Helper()
	home := map[string]string{}
	var mu sync.Mutex
	parallel(8, len(sids), func(i int) {
		r := g.call(chatPath, sids[i], 1, true)
		if !r.ok() || r.decision != session.DecisionNew {
			t.Errorf("session %s turn 1: %v, want new", sids[i], r)
		}
		mu.Lock()
		home[sids[i]] = r.upstream
		mu.Unlock()
	})
	if t.Failed() {
		t.FailNow()
	}
	return home
}

func TestStickyPinsSurviveReload(t *testing.T) {
	f := newFleet(t, 4)
	g := startGatewayWith(t, gwOptions{admin: true, errorLog: true}, proxyBlock(f, "\t\tlb_policy session_sticky"))

	var sids []string
	for i := range 50 {
		sids = append(sids, fmt.Sprintf("reload-%02d", i))
	}
	home := pinSessions(t, g, sids)

	// The same config without must-revalidate is skipped: nothing reloads.
	running := caddy.ActiveContext().Context
	if err := g.reload(false); err != nil {
		t.Fatal(err)
	}
	if caddy.ActiveContext().Context != running {
		t.Fatal("an unchanged config was reloaded without Cache-Control: must-revalidate")
	}
	if err := g.reload(true); err != nil {
		t.Fatal(err)
	}
	if caddy.ActiveContext().Context == running {
		t.Fatal("POST /load with Cache-Control: must-revalidate did not reload")
	}

	// The old server closed the client's idle keep-alive connections.
	g.client.CloseIdleConnections()
	for turn := 2; turn <= 3; turn++ {
		parallel(8, len(sids), func(i int) {
			if r := g.callAgain(chatPath, sids[i], turn, true); !r.ok() || r.upstream != home[sids[i]] || r.decision != session.DecisionHit {
				t.Errorf("session %s turn %d after the reload: %v, want a hit on %s", sids[i], turn, r, home[sids[i]])
			}
		})
	}
	if n := g.resent.Load(); n > 0 {
		t.Logf("%d requests sent again after a connection closed by the reload", n)
	}
	g.checkErrorLog()
}

func TestStickyReloadsUnderTraffic(t *testing.T) {
	f := newFleet(t, 4)
	g := startGatewayWith(t, gwOptions{admin: true, errorLog: true}, proxyBlock(f, "\t\tlb_policy session_sticky"))

	const workers, perWorker, reloads = 4, 10, 100
	var sids []string
	for i := range workers * perWorker {
		sids = append(sids, fmt.Sprintf("busy-%02d", i))
	}
	home := pinSessions(t, g, sids)

	// The baseline: Caddy running with its admin endpoint, no connections.
	quiesce := func() {
		g.client.CloseIdleConnections()
		f.dropConnections()
	}
	quiesce()
	base := settledGoroutines()

	// A reload closes the old server's idle keep-alive connections, and the
	// old listening socket (Caddy binds one per config with SO_REUSEPORT)
	// resets the connections still queued on it: a request the client sends
	// on one of those fails before any response. Like an SDK client, the
	// workers send such a request again (callAgain). Every HTTP answer
	// counts, and a panic in a handler (which a client would also see as a
	// closed connection) shows in Caddy's error log. (Plain Caddy without
	// this plugin, a respond directive under the same reloads, loses about
	// one POST in five this way.)
	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		requests atomic.Int64
		failMu   sync.Mutex
		failures []string
	)
	fail := func(s string) {
		failMu.Lock()
		defer failMu.Unlock()
		failures = append(failures, s)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turn := 2; ; turn++ {
				for _, sid := range sids[w*perWorker : (w+1)*perWorker] {
					select {
					case <-stop:
						return
					default:
					}
					r := g.callAgain(chatPath, sid, turn, true)
					requests.Add(1)
					if !r.ok() || r.upstream != home[sid] || r.decision != session.DecisionHit {
						fail(fmt.Sprintf("session %s turn %d: %v, want a hit on %s", sid, turn, r, home[sid]))
					}
				}
			}
		}()
	}
	// Let traffic start before the first reload.
	eventually(t, 10*time.Second, "traffic", func() bool { return requests.Load() >= workers })
	start := time.Now()
	var reloadErr error
	for i := 0; i < reloads && reloadErr == nil; i++ {
		reloadErr = g.reload(true)
	}
	during := requests.Load()
	close(stop)
	wg.Wait()
	if reloadErr != nil {
		t.Fatal(reloadErr)
	}
	t.Logf("%d reloads in %s with %d requests (%d sent again after a connection closed by a reload; %d loads sent again)",
		reloads, time.Since(start).Round(time.Millisecond), during, g.resent.Load(), g.adminResent.Load())
	for i, s := range failures {
		if i == 10 {
			t.Errorf("… and %d more", len(failures)-i)
			break
		}
		t.Error(s)
	}
	if during < reloads {
		t.Errorf("only %d requests during %d reloads", during, reloads)
	}

	// Every pin is still in place.
	parallel(8, len(sids), func(i int) {
		if r := g.callAgain(chatPath, sids[i], 1000, true); !r.ok() || r.upstream != home[sids[i]] || r.decision != session.DecisionHit {
			t.Errorf("session %s after the reloads: %v, want a hit on %s", sids[i], r, home[sids[i]])
		}
	})

	// The old configs are gone: servers, transports, admin endpoints, pin
	// tables. A leak of one goroutine per reload would show as 100.
	const slack = 15
	quiesce()
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > base+slack {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after %d reloads, %d before:\n%.20000s", runtime.NumGoroutine(), reloads, base, goroutineDump())
		}
		time.Sleep(50 * time.Millisecond)
		quiesce()
	}
	t.Logf("goroutines: %d before, %d after", base, runtime.NumGoroutine())
	g.checkErrorLog()
}
