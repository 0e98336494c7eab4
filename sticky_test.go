package sessionkeeping

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// End-to-end tests of lb_policy session_sticky behind session_keeping,
// through a real in-process Caddy and real upstream servers.

const chatPath = "/v1/chat/completions"

// homes groups session indexes by the backend that served them.
func homes(first []reply) map[string][]int {
	m := map[string][]int{}
	for i, r := range first {
		m[r.upstream] = append(m[r.upstream], i)
	}
	return m
}

// mostSessions returns the backend name with the most sessions in h.
func mostSessions(h map[string][]int) string {
	best := ""
	for name, idx := range h {
		if best == "" || len(idx) > len(h[best]) || (len(idx) == len(h[best]) && name < best) {
			best = name
		}
	}
	return best
}

func TestStickyManySessionsStayAndSpread(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, "\t\tlb_policy session_sticky"))

	const sessions, turns = 200, 5
	sid := func(i int) string { return fmt.Sprintf("many-%03d", i) }
	served := make([][]reply, sessions)
	parallel(16, sessions, func(i int) {
		for turn := 1; turn <= turns; turn++ {
			// Half the sessions name themselves in a header, half in the body.
			served[i] = append(served[i], g.call(chatPath, sid(i), turn, i%2 == 1))
		}
	})

	perBackend := map[string]int{}
	for i, rs := range served {
		home := rs[0].upstream
		perBackend[home]++
		for turn, r := range rs {
			want := session.DecisionHit
			if turn == 0 {
				want = session.DecisionNew
			}
			if !r.ok() || r.upstream != home || r.decision != want {
				t.Errorf("session %s turn %d: %v, want 200 from %s (%s)", sid(i), turn+1, r, home, want)
			}
		}
	}
	for _, b := range f.backends {
		// 50 expected each; rendezvous hashing over 200 sessions stays
		// well within half of that.
		if perBackend[b.name] < sessions/4/2 {
			t.Errorf("backend %s got %d of %d sessions: %v", b.name, perBackend[b.name], sessions, perBackend)
		}
	}
	f.checkUpstreamPlaceholder(t)

	// The access log threads each session's turns with its decision and
	// upstream.
	bySession := map[string][]map[string]any{}
	for _, l := range g.logLines(sessions * turns) {
		k, _ := l["session"].(string)
		bySession[k] = append(bySession[k], l)
	}
	for i := range sessions {
		lines := bySession[session.NewKey([]string{""}, sid(i)).String()]
		if len(lines) != turns {
			t.Errorf("session %s: %d access log lines, want %d", sid(i), len(lines), turns)
			continue
		}
		wantUp := f.byName(served[i][0].upstream).addr()
		for turn, l := range lines {
			want := session.DecisionHit
			if turn == 0 {
				want = session.DecisionNew
			}
			if l["session_decision"] != want || l["session_upstream"] != wantUp {
				t.Errorf("session %s log line %d: session_decision=%v session_upstream=%v, want %s %s", sid(i), turn+1, l["session_decision"], l["session_upstream"], want, wantUp)
			}
		}
	}
}

func TestStickyConcurrentFirstRequestsAgree(t *testing.T) {
	f := newFleet(t, 4)
	// The placement policy holds the first two first requests of each
	// session until both are placing, and gives them different upstreams:
	// only the pin table can make them agree.
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky {
			fallback test_meeting
		}`))

	const sessions, concurrent = 20, 6
	for i := range sessions {
		sid := fmt.Sprintf("burst-%02d", i)
		meetingSelection{}.reset()
		replies := make([]reply, concurrent)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replies[j] = g.call(chatPath, sid, 1, false)
			}()
		}
		close(start)
		wg.Wait()
		meeting.mu.Lock()
		placed := meeting.calls
		meeting.mu.Unlock()
		if placed < 2 {
			t.Fatalf("session %s: %d placements, want two that raced", sid, placed)
		}
		for _, r := range replies {
			if !r.ok() || r.upstream != replies[0].upstream {
				t.Fatalf("session %s: concurrent first requests disagree: %v", sid, replies)
			}
		}
		if r := g.call(chatPath, sid, 2, false); !r.ok() || r.upstream != replies[0].upstream || r.decision != session.DecisionHit {
			t.Fatalf("session %s after the burst: %v, want a hit on %s", sid, r, replies[0].upstream)
		}
	}
}

func init() {
	caddy.RegisterModule(meetingSelection{})
}

// meetingSelection is a selection policy for tests: the first two calls of
// a round wait for each other (up to a few seconds), and every call picks
// the upstream after the previous call's, so concurrent calls differ.
type meetingSelection struct{}

var meeting struct {
	mu    sync.Mutex
	calls int
	met   chan struct{}
}

// reset starts a round.
func (meetingSelection) reset() {
	meeting.mu.Lock()
	meeting.calls, meeting.met = 0, make(chan struct{})
	meeting.mu.Unlock()
}

func (meetingSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.test_meeting",
		New: func() caddy.Module { return new(meetingSelection) },
	}
}

func (meetingSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

func (meetingSelection) Select(pool reverseproxy.UpstreamPool, _ *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	meeting.mu.Lock()
	n, met := meeting.calls, meeting.met
	meeting.calls++
	if meeting.calls == 2 {
		close(met)
	}
	meeting.mu.Unlock()
	if n < 2 {
		select {
		case <-met:
		case <-time.After(5 * time.Second):
		}
	}
	return pool[n%len(pool)]
}

func TestStickyUpstreamKilledMidRun(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		lb_retries 2
		lb_retry_match {
			method POST
		}
		request_buffers 1MB`))

	const sessions, turns = 40, 6
	sid := func(i int) string { return fmt.Sprintf("kill-%02d", i) }
	served := make([][]reply, sessions)
	run := func(from, to int) {
		parallel(8, sessions, func(i int) {
			for turn := from; turn <= to; turn++ {
				served[i] = append(served[i], g.call(chatPath, sid(i), turn, true))
			}
		})
	}
	// Two turns pin every session.
	run(1, 2)
	first := make([]reply, sessions)
	for i := range sessions {
		first[i] = served[i][0]
	}
	victimName := mostSessions(homes(first))
	victim := f.byName(victimName)

	// The victim dies under its third request from now on: that request is
	// in flight when its connections are closed, the ones after it find
	// pooled connections broken or the listener gone.
	var n atomic.Int32
	trigger, released, killed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	victim.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if n.Add(1) == 3 {
			close(trigger)
			<-released
			panic(http.ErrAbortHandler)
		}
		return false
	})
	go func() {
		<-trigger
		victim.kill(func() { close(released) })
		close(killed)
	}()
	run(3, turns)
	receive(t, killed, "the victim to be killed")

	moved := 0
	for i, rs := range served {
		home := rs[0].upstream
		var newHome string
		for turn, r := range rs {
			if !r.ok() {
				t.Errorf("session %s turn %d: %v", sid(i), turn+1, r)
				continue
			}
			switch {
			case turn == 0:
				if r.decision != session.DecisionNew {
					t.Errorf("session %s turn 1: %v, want new", sid(i), r)
				}
			case home != victimName || (newHome == "" && r.upstream == victimName):
				if r.upstream != home || r.decision != session.DecisionHit {
					t.Errorf("session %s turn %d: %v, want a hit on %s", sid(i), turn+1, r, home)
				}
			case newHome == "":
				// The first turn after the kill: re-pinned on the retry.
				newHome = r.upstream
				moved++
				if r.decision != session.DecisionRepinFailed {
					t.Errorf("session %s turn %d: %v, want repin_failed away from %s", sid(i), turn+1, r, victimName)
				}
			default:
				if r.upstream != newHome || r.decision != session.DecisionHit {
					t.Errorf("session %s turn %d: %v, want a hit on its new home %s", sid(i), turn+1, r, newHome)
				}
			}
		}
		if home == victimName && newHome == "" {
			t.Errorf("session %s stayed on the killed %s: %v", sid(i), victimName, rs)
		}
	}
	if moved == 0 {
		t.Fatal("no session was re-pinned")
	}
	t.Logf("%d sessions moved off %s", moved, victimName)
	f.checkUpstreamPlaceholder(t)
}

// TestStickyConcurrentRetriesFollowTheNewPin: two requests of one session
// fail on its upstream one after the other; the first one's retry moves
// the pin, and the second one's retry follows it instead of being spread
// elsewhere by the bounded-load rule (its new home is busy with the first).
func TestStickyConcurrentRetriesFollowTheNewPin(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		lb_retries 2
		lb_retry_match {
			method POST
		}
		request_buffers 1MB`))

	const sid = "retry-pair"
	first := g.call(chatPath, sid, 1, true)
	if !first.ok() || first.decision != session.DecisionNew {
		t.Fatalf("turn 1: %v, want new", first)
	}
	home := f.byName(first.upstream)

	// Turns 21 and 22 run concurrently. At home each waits for its signal,
	// then dies without an answer; elsewhere turn 21 is held until the end.
	atHome := make(chan string, 2)
	failA, failB, releaseA := make(chan struct{}), make(chan struct{}), make(chan struct{})
	arrivedA := make(chan string, 1)
	defer func() {
		for _, c := range []chan struct{}{failA, failB, releaseA} {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}()
	wait := func(c chan struct{}) {
		select {
		case <-c:
		case <-time.After(20 * time.Second):
		}
	}
	for _, b := range f.backends {
		b.setHook(func(w http.ResponseWriter, r *http.Request) bool {
			turn := r.Header.Get("X-Turn")
			switch {
			case b == home && (turn == "21" || turn == "22"):
				atHome <- turn
				if turn == "21" {
					wait(failA)
				} else {
					wait(failB)
				}
				panic(http.ErrAbortHandler)
			case turn == "21":
				arrivedA <- b.name
				wait(releaseA)
			}
			return false
		})
	}
	replies := make(chan reply, 2)
	for _, turn := range []int{21, 22} {
		go func() { replies <- g.call(chatPath, sid, turn, true) }()
	}
	for range 2 {
		receive(t, atHome, "both requests at home")
	}
	close(failA)
	newHome := receive(t, arrivedA, "the retry of turn 21")
	close(failB)
	// Turn 22 is answered while turn 21 is still held.
	r22 := receive(t, replies, "turn 22")
	close(releaseA)
	r21 := <-replies
	if !r21.ok() || r21.upstream != newHome || r21.decision != session.DecisionRepinFailed {
		t.Errorf("turn 21: %v, want repin_failed on %s", r21, newHome)
	}
	if !r22.ok() || r22.upstream != newHome || r22.decision != session.DecisionHit {
		t.Errorf("turn 22: %v, want a hit on the new pin %s", r22, newHome)
	}
	if r := g.call(chatPath, sid, 3, true); !r.ok() || r.upstream != newHome || r.decision != session.DecisionHit {
		t.Errorf("turn 3: %v, want a hit on %s", r, newHome)
	}
}

func TestStickyPassiveHealthRepinsUnhealthy(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		fail_duration 30s
		max_fails 1
		unhealthy_status 500`))

	const sessions = 24
	sid := func(i int) string { return fmt.Sprintf("health-%02d", i) }
	first := make([]reply, sessions)
	for i := range sessions {
		first[i] = g.call(chatPath, sid(i), 1, false)
		if r := g.call(chatPath, sid(i), 2, false); !r.ok() || r.upstream != first[i].upstream || r.decision != session.DecisionHit {
			t.Fatalf("session %s turn 2: %v, want a hit on %s", sid(i), r, first[i].upstream)
		}
	}
	h := homes(first)
	sickName := mostSessions(h)
	sick := f.byName(sickName)
	s0 := h[sickName][0]

	// One 500 from the upstream: passive health marks it down for 30s.
	sick.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("X-Session-Id-Seen") == sid(s0) {
			w.WriteHeader(http.StatusInternalServerError)
			return true
		}
		return false
	})
	if r := g.call(chatPath, sid(s0), 3, false); r.status != http.StatusInternalServerError || r.upstream != sickName {
		t.Fatalf("session %s turn 3: %v, want a 500 from %s", sid(s0), r, sickName)
	}
	sick.setHook(nil)
	before := len(f.recorded())
	sickBefore := 0
	for _, x := range f.recorded() {
		if x.backend == sickName {
			sickBefore++
		}
	}

	for i := range sessions {
		wasSick := first[i].upstream == sickName
		r := g.call(chatPath, sid(i), 4, false)
		switch {
		case !r.ok():
			t.Errorf("session %s turn 4: %v", sid(i), r)
		case wasSick && (r.upstream == sickName || r.decision != session.DecisionRepinUnhealthy):
			t.Errorf("session %s turn 4: %v, want repin_unhealthy away from %s", sid(i), r, sickName)
		case !wasSick && (r.upstream != first[i].upstream || r.decision != session.DecisionHit):
			t.Errorf("session %s turn 4: %v, want a hit on %s", sid(i), r, first[i].upstream)
		}
		// The new pin holds.
		if r5 := g.call(chatPath, sid(i), 5, false); !r5.ok() || r5.upstream != r.upstream || r5.decision != session.DecisionHit {
			t.Errorf("session %s turn 5: %v, want a hit on %s", sid(i), r5, r.upstream)
		}
	}
	for _, x := range f.recorded()[before:] {
		if x.backend == sickName {
			t.Errorf("the unhealthy %s still got session %s turn %s", sickName, x.session, x.turn)
		}
	}
	if sickBefore == 0 {
		t.Fatal("no request reached the upstream that was marked unhealthy")
	}
	f.checkUpstreamPlaceholder(t)
}

func TestStickySpillWhenFullAndReturnHome(t *testing.T) {
	f := newFleet(t, 3)
	// unhealthy_request_count is the Caddyfile's way to set max_requests on
	// every upstream.
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		unhealthy_request_count 1`))

	entered, release := f.holdSlow(t, 1)

	const sid = "spill-1"
	home := g.call(chatPath, sid, 1, false)
	if !home.ok() || home.decision != session.DecisionNew {
		t.Fatalf("turn 1: %v, want new", home)
	}
	slow := make(chan reply, 1)
	go func() { slow <- g.call("/slow", sid, 2, false) }()
	receive(t, entered, "the slow request to reach an upstream")

	// The home upstream is full: requests spill, the pin stays.
	for turn := 3; turn <= 4; turn++ {
		r := g.call(chatPath, sid, turn, false)
		if !r.ok() || r.upstream == home.upstream || r.decision != session.DecisionSpill {
			t.Fatalf("turn %d while home is full: %v, want a spill away from %s", turn, r, home.upstream)
		}
	}
	release()
	if r := <-slow; !r.ok() || r.upstream != home.upstream || r.decision != session.DecisionHit {
		t.Fatalf("slow turn: %v, want a hit on %s", r, home.upstream)
	}
	// The access log line of a request is written after reverse_proxy has
	// released its upstream, so once four lines are there, home has room.
	lines := g.logLines(4)
	spills := 0
	for _, l := range lines {
		if l["session_decision"] == session.DecisionSpill {
			spills++
			if l["session_upstream"] == f.byName(home.upstream).addr() {
				t.Errorf("a spill was logged with the home upstream: %v", l)
			}
		}
	}
	if spills != 2 {
		t.Errorf("%d spills in the access log, want 2", spills)
	}
	if r := g.call(chatPath, sid, 5, false); !r.ok() || r.upstream != home.upstream || r.decision != session.DecisionHit {
		t.Fatalf("turn 5 after the slow request: %v, want a hit back home on %s", r, home.upstream)
	}
	f.checkUpstreamPlaceholder(t)
}

func TestStickyRepinAfter503(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky {
			failure_cooldown 1s
		}`))

	const sessions = 16
	sid := func(i int) string { return fmt.Sprintf("s503-%02d", i) }
	first := make([]reply, sessions)
	for i := range sessions {
		first[i] = g.call(chatPath, sid(i), 1, false)
		if !first[i].ok() {
			t.Fatalf("session %s turn 1: %v", sid(i), first[i])
		}
	}
	h := homes(first)
	badName := mostSessions(h)
	if len(h[badName]) < 2 {
		t.Fatalf("want two sessions on one upstream: %v", h)
	}
	s0, s1 := sid(h[badName][0]), sid(h[badName][1])
	f.byName(badName).setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("X-Session-Id-Seen") == s0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})

	// No retries are configured: the client gets the 503.
	if r := g.call(chatPath, s0, 2, false); r.err != nil || r.status != http.StatusServiceUnavailable || r.upstream != badName {
		t.Fatalf("%s turn 2: %v, want the 503 from %s", s0, r, badName)
	}
	r := g.call(chatPath, s0, 3, false)
	if !r.ok() || r.upstream == badName || r.decision != session.DecisionRepinFailed {
		t.Fatalf("%s turn 3: %v, want repin_failed away from %s", s0, r, badName)
	}
	newHome := r.upstream
	for turn := 4; turn <= 5; turn++ {
		if r := g.call(chatPath, s0, turn, false); !r.ok() || r.upstream != newHome || r.decision != session.DecisionHit {
			t.Fatalf("%s turn %d: %v, want a hit on %s", s0, turn, r, newHome)
		}
	}
	// The upstream failed one session, not the others.
	if r := g.call(chatPath, s1, 2, false); !r.ok() || r.upstream != badName || r.decision != session.DecisionHit {
		t.Fatalf("%s turn 2: %v, want a hit on %s", s1, r, badName)
	}
	// After the cooldown the session stays where it is.
	time.Sleep(2100 * time.Millisecond)
	if r := g.call(chatPath, s0, 6, false); !r.ok() || r.upstream != newHome || r.decision != session.DecisionHit {
		t.Fatalf("%s turn 6 after the cooldown: %v, want a hit on %s", s0, r, newHome)
	}
	f.checkUpstreamPlaceholder(t)
}

// TestStickyRepinAfterProxyError: without retries, a request whose
// upstream is gone ends in Caddy's own 502, which the handler learns only
// from the error the chain returns; the session's next request moves.
func TestStickyRepinAfterProxyError(t *testing.T) {
	f := newFleet(t, 3)
	g := startGateway(t, proxyBlock(f, "\t\tlb_policy session_sticky"))

	const sessions = 9
	sid := func(i int) string { return fmt.Sprintf("gone-%d", i) }
	first := make([]reply, sessions)
	for i := range sessions {
		if first[i] = g.call(chatPath, sid(i), 1, false); !first[i].ok() {
			t.Fatalf("session %s turn 1: %v", sid(i), first[i])
		}
	}
	h := homes(first)
	goneName := mostSessions(h)
	f.byName(goneName).kill(nil)

	for _, i := range h[goneName] {
		if r := g.call(chatPath, sid(i), 2, false); r.err != nil || r.status != http.StatusBadGateway || r.upstream != "" {
			t.Fatalf("session %s turn 2: %v, want Caddy's 502", sid(i), r)
		}
		r := g.call(chatPath, sid(i), 3, false)
		if !r.ok() || r.upstream == goneName || r.decision != session.DecisionRepinFailed {
			t.Fatalf("session %s turn 3: %v, want repin_failed away from %s", sid(i), r, goneName)
		}
		if r4 := g.call(chatPath, sid(i), 4, false); !r4.ok() || r4.upstream != r.upstream || r4.decision != session.DecisionHit {
			t.Fatalf("session %s turn 4: %v, want a hit on %s", sid(i), r4, r.upstream)
		}
	}
}

// TestStickyAvoidsFailedUpstreamWhenMovedAgain: a session that an upstream
// failed keeps away from it for failure_cooldown, also when its new home
// goes down within that time and it is placed once more.
func TestStickyAvoidsFailedUpstreamWhenMovedAgain(t *testing.T) {
	f := newFleet(t, 3)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		fail_duration 30s
		max_fails 1
		unhealthy_status 500`))

	const sid = "avoid-1"
	failWith := func(b *backend, status int) {
		b.setHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.Header.Get("X-Session-Id-Seen") == sid {
				w.WriteHeader(status)
				return true
			}
			return false
		})
	}
	r1 := g.call(chatPath, sid, 1, false)
	if !r1.ok() || r1.decision != session.DecisionNew {
		t.Fatalf("turn 1: %v, want new", r1)
	}
	first := f.byName(r1.upstream)
	failWith(first, http.StatusServiceUnavailable)
	if r := g.call(chatPath, sid, 2, false); r.status != http.StatusServiceUnavailable {
		t.Fatalf("turn 2: %v, want the 503 from %s", r, first.name)
	}
	r3 := g.call(chatPath, sid, 3, false)
	if !r3.ok() || r3.upstream == first.name || r3.decision != session.DecisionRepinFailed {
		t.Fatalf("turn 3: %v, want repin_failed away from %s", r3, first.name)
	}
	// The second home answers 500: passive health takes it out.
	second := f.byName(r3.upstream)
	failWith(second, http.StatusInternalServerError)
	if r := g.call(chatPath, sid, 4, false); r.status != http.StatusInternalServerError {
		t.Fatalf("turn 4: %v, want the 500 from %s", r, second.name)
	}
	// The first upstream failed the session seconds ago: the third one.
	r5 := g.call(chatPath, sid, 5, false)
	if !r5.ok() || r5.upstream == first.name || r5.upstream == second.name || r5.decision != session.DecisionRepinUnhealthy {
		t.Fatalf("turn 5: %v, want repin_unhealthy to neither %s (failed the session) nor %s (unhealthy)", r5, first.name, second.name)
	}
	if r := g.call(chatPath, sid, 6, false); !r.ok() || r.upstream != r5.upstream || r.decision != session.DecisionHit {
		t.Fatalf("turn 6: %v, want a hit on %s", r, r5.upstream)
	}
}

func TestStickyTwoPoolsShareASession(t *testing.T) {
	haiku, sonnet := newNamedFleet(t, "h", 3), newNamedFleet(t, "s", 3)
	g := startGateway(t, fmt.Sprintf(`handle /haiku/* {
		%s
	}
	handle /sonnet/* {
		%s
	}`, proxyBlock(haiku, "\t\tlb_policy session_sticky"), proxyBlock(sonnet, "\t\tlb_policy session_sticky")))

	const sessions, rounds = 8, 10
	for i := range sessions {
		sid := fmt.Sprintf("pools-%d", i)
		home := map[string]string{}
		for turn := 1; turn <= 2*rounds; turn++ {
			pool := "haiku"
			if turn%2 == 0 {
				pool = "sonnet"
			}
			r := g.call("/"+pool+"/v1/messages", sid, turn, false)
			want := session.DecisionHit
			if home[pool] == "" {
				want = session.DecisionNew
				home[pool] = r.upstream
			}
			if !r.ok() || r.upstream != home[pool] || r.decision != want || r.upstream[0] != pool[0] {
				t.Fatalf("session %s turn %d (%s): %v, want %s on %s", sid, turn, pool, r, want, home[pool])
			}
		}
	}
	haiku.checkUpstreamPlaceholder(t)
	sonnet.checkUpstreamPlaceholder(t)
}

func TestStickySessionlessRoundRobin(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, "\t\tlb_policy session_sticky"))
	count := map[string]int{}
	prev := ""
	for i := range 12 {
		r := g.call("/v1/models", "", i, false)
		if !r.ok() || r.decision != session.DecisionNone {
			t.Fatalf("request %d: %v, want decision none", i, r)
		}
		if r.upstream == prev {
			t.Fatalf("request %d went to %s again", i, r.upstream)
		}
		prev = r.upstream
		count[r.upstream]++
	}
	for _, b := range f.backends {
		if count[b.name] != 3 {
			t.Fatalf("round robin over 12 requests: %v, want 3 each", count)
		}
	}
	for _, l := range g.logLines(12) {
		if _, ok := l["session_decision"]; ok {
			t.Fatalf("a sessionless request was logged with a decision: %v", l)
		}
	}
}

func TestStickyFallbackPlacesAndPins(t *testing.T) {
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky {
			fallback least_conn
		}`))

	entered, release := make(chan string, 8), make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	for _, b := range f.backends {
		b.setHook(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/slow" {
				return false
			}
			entered <- b.name
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
			return false
		})
	}

	// Three held sessionless requests: least_conn (the fallback, also for
	// requests without a session) puts them on three different upstreams.
	busy := map[string]bool{}
	slow := make(chan reply, 3)
	for i := range 3 {
		go func() { slow <- g.call("/slow", "", i, false) }()
		busy[receive(t, entered, "a slow request to reach an upstream")] = true
	}
	if len(busy) != 3 {
		t.Fatalf("least_conn put the held requests on %v", busy)
	}
	var idle string
	for _, b := range f.backends {
		if !busy[b.name] {
			idle = b.name
		}
	}

	// New sessions are placed by least_conn: all on the idle upstream
	// (rendezvous hashing would spread them). Each request is waited for in
	// the access log, after which its upstream's count is back to zero.
	const sessions = 8
	for i := range sessions {
		r := g.call(chatPath, fmt.Sprintf("lc-%d", i), 1, false)
		if !r.ok() || r.upstream != idle || r.decision != session.DecisionNew {
			t.Fatalf("session lc-%d turn 1: %v, want new on the idle %s", i, r, idle)
		}
		g.logLines(i + 1)
	}
	close(release)
	for range 3 {
		if r := <-slow; !r.ok() || r.decision != session.DecisionNone {
			t.Fatalf("slow sessionless request: %v", r)
		}
	}
	g.logLines(sessions + 3)

	// With every upstream idle, least_conn would choose at random; the
	// pins keep the sessions home.
	for turn := 2; turn <= 4; turn++ {
		for i := range sessions {
			if r := g.call(chatPath, fmt.Sprintf("lc-%d", i), turn, false); !r.ok() || r.upstream != idle || r.decision != session.DecisionHit {
				t.Fatalf("session lc-%d turn %d: %v, want a hit on %s", i, turn, r, idle)
			}
		}
	}
	f.checkUpstreamPlaceholder(t)
}
