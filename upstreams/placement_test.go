package upstreams

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// newPool returns n upstreams with their host state attached, as Caddy's
// provisioning leaves them.
func newPool(n int) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, n)
	for i := range pool {
		pool[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: fmt.Sprintf("10.0.0.%d:8000", i+1)}
	}
	return pool
}

// poolCandidates exposes a Caddy pool to Place and Namespace as the policy
// does.
func poolCandidates(u reverseproxy.UpstreamPool) pool { return pool{upstreams: u} }

// provisionPolicy provisions p with a fresh Caddy context and cleans it up
// when the test ends.
func provisionPolicy(tb testing.TB, p *StickySelection) {
	tb.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := p.Provision(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Cleanup(); err != nil {
			tb.Error(err)
		}
		cancel()
	})
}

// fakePool is a pool of upstreams for Place and Namespace.
type fakePool struct {
	dials    []string
	inFlight []int
	down     map[string]bool
}

func newFakePool(dials ...string) *fakePool {
	return &fakePool{dials: dials, inFlight: make([]int, len(dials))}
}

func (f *fakePool) Len() int            { return len(f.dials) }
func (f *fakePool) Dial(i int) string   { return f.dials[i] }
func (f *fakePool) InFlight(i int) int  { return f.inFlight[i] }
func (f *fakePool) Eligible(i int) bool { return !f.down[f.dials[i]] }
func (f *fakePool) place(k session.Key, bf float64) string {
	i := Place(k, f, bf)
	if i < 0 {
		return ""
	}
	return f.dials[i]
}

// sessionKeys returns n session keys as the handler derives them.
func sessionKeys(n int) []session.Key {
	keys := make([]session.Key, n)
	for i := range keys {
		keys[i] = session.NewKey([]string{"tenant"}, fmt.Sprintf("conversation-%d", i))
	}
	return keys
}

var fourDials = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}

func TestPlaceSameKeySameUpstream(t *testing.T) {
	a := newFakePool(fourDials...)
	reversed := slices.Clone(fourDials)
	slices.Reverse(reversed)
	b := newFakePool(reversed...)
	for _, k := range sessionKeys(2000) {
		if x, y := a.place(k, DefaultBalanceFactor), b.place(k, DefaultBalanceFactor); x != y {
			t.Fatalf("key %s: %s on one list, %s on the same pool in another order", k, x, y)
		}
	}
}

func TestPlaceSameKeyAcrossPolicyInstances(t *testing.T) {
	// Two policies with their own tables, as on two Caddy instances, and
	// the pool listed in another order on the second.
	first := &StickySelection{TTL: caddy.Duration(time.Hour + 5*time.Second)}
	second := &StickySelection{TTL: caddy.Duration(time.Hour + 6*time.Second)}
	provisionPolicy(t, first)
	provisionPolicy(t, second)
	if first.table == second.table {
		t.Fatal("the instances share a table")
	}
	poolA := newPool(4)
	poolB := slices.Clone(poolA)
	slices.Reverse(poolB)
	used := map[string]bool{}
	for _, k := range sessionKeys(500) {
		ra, sa := sessionRequest(k)
		rb, sb := sessionRequest(k)
		ua := first.Select(poolA, ra, nil)
		ub := second.Select(poolB, rb, nil)
		if ua == nil || ub == nil || ua.Dial != ub.Dial {
			t.Fatalf("key %s: %v and %v", k, ua, ub)
		}
		if sa.Decision != session.DecisionNew || sb.Decision != session.DecisionNew {
			t.Fatalf("decisions %q, %q; want new", sa.Decision, sb.Decision)
		}
		used[ua.Dial] = true
	}
	if len(used) != 4 {
		t.Fatalf("500 sessions used %d of 4 upstreams", len(used))
	}
}

// sessionRequest returns a request carrying a new session with key k.
func sessionRequest(k session.Key) (*http.Request, *session.Session) {
	s := &session.Session{ID: "id", Key: k, Source: "header:X-Session-Id"}
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	return r.WithContext(session.NewContext(r.Context(), s)), s
}

func TestPlaceEvenSpread(t *testing.T) {
	const sessions = 10_000
	f := newFakePool(fourDials...)
	for _, bf := range []float64{0, DefaultBalanceFactor} {
		counts := map[string]int{}
		for _, k := range sessionKeys(sessions) {
			counts[f.place(k, bf)]++
		}
		even := sessions / len(fourDials)
		for _, d := range fourDials {
			if n := counts[d]; n < even*85/100 || n > even*115/100 {
				t.Errorf("balance_factor %g: %s got %d of %d sessions, want %d ± 15%%", bf, d, n, sessions, even)
			}
		}
	}
}

func TestPlaceGrowingPoolMovesFewSessions(t *testing.T) {
	four := newFakePool(fourDials...)
	const added = "10.0.0.5:8000"
	five := newFakePool(append(slices.Clone(fourDials), added)...)
	keys := sessionKeys(10_000)
	moved := 0
	for _, k := range keys {
		before, after := four.place(k, DefaultBalanceFactor), five.place(k, DefaultBalanceFactor)
		if before != after {
			moved++
			if after != added {
				t.Fatalf("key %s moved from %s to %s, not to the new upstream", k, before, after)
			}
		}
	}
	if moved > len(keys)/4 {
		t.Fatalf("%d of %d placements moved, want at most 25%%", moved, len(keys))
	}
	if moved == 0 {
		t.Fatal("the new upstream won no session")
	}
	t.Logf("%d of %d placements moved (%.1f%%)", moved, len(keys), 100*float64(moved)/float64(len(keys)))
}

func TestPlaceBoundedLoad(t *testing.T) {
	keys := sessionKeys(2000)
	idle := newFakePool(fourDials...)
	busy := newFakePool(fourDials...)
	busy.inFlight = []int{100, 1, 0, 2} // the first is far over 1.25 × the mean
	const hot = "10.0.0.1:8000"

	onHot := 0
	for _, k := range keys {
		home := idle.place(k, DefaultBalanceFactor)
		got := busy.place(k, DefaultBalanceFactor)
		if got == hot {
			t.Fatalf("key %s placed on the overloaded upstream", k)
		}
		// Only the sessions whose first choice is overloaded move.
		if home != hot && got != home {
			t.Fatalf("key %s moved from %s to %s although %s has room", k, home, got, home)
		}
		if home == hot {
			onHot++
		}
		// With the bound off, load does not matter.
		if off := busy.place(k, 0); off != home {
			t.Fatalf("balance_factor 0: key %s placed on %s, want %s", k, off, home)
		}
	}
	if onHot < len(keys)/8 {
		t.Fatalf("only %d of %d keys prefer the overloaded upstream; the test shows nothing", onHot, len(keys))
	}

	// A mild imbalance within the bound changes nothing: every upstream
	// has fewer than ceil(1.25 × (7 in flight + 1) / 4) = 3 requests.
	mild := newFakePool(fourDials...)
	mild.inFlight = []int{2, 2, 2, 1}
	for _, k := range keys {
		if got, home := mild.place(k, DefaultBalanceFactor), idle.place(k, DefaultBalanceFactor); got != home {
			t.Fatalf("key %s moved from %s to %s under a mild imbalance", k, home, got)
		}
	}
}

// racyPool reports more in-flight requests each time it is asked, as a
// pool under a burst of traffic may between Place's two passes.
type racyPool struct{ *fakePool }

func (r racyPool) InFlight(i int) int {
	r.inFlight[i] += 1000
	return r.inFlight[i]
}

func TestPlaceAlwaysChoosesSomeEligibleUpstream(t *testing.T) {
	for _, k := range sessionKeys(200) {
		if i := Place(k, racyPool{newFakePool(fourDials...)}, DefaultBalanceFactor); i < 0 {
			t.Fatal("Place chose nothing when in-flight counts rose while it read them")
		}
		// Factors too large for an integer mean no bound.
		f := newFakePool(fourDials...)
		f.inFlight = []int{5, 0, 0, 0}
		if got, want := f.place(k, 1e300), f.place(k, 0); got != want {
			t.Fatalf("balance_factor 1e300 placed on %q, want %q", got, want)
		}
	}
}

func TestPlaceSkipsIneligibleUpstreams(t *testing.T) {
	f := newFakePool(fourDials...)
	f.down = map[string]bool{"10.0.0.2:8000": true, "10.0.0.4:8000": true}
	seen := map[string]bool{}
	for _, k := range sessionKeys(1000) {
		for _, bf := range []float64{0, DefaultBalanceFactor} {
			got := f.place(k, bf)
			if got == "" || f.down[got] {
				t.Fatalf("placed on %q, which is not eligible", got)
			}
			seen[got] = true
		}
	}
	if len(seen) != 2 {
		t.Fatalf("placements used %v, want both eligible upstreams", seen)
	}
	for _, d := range fourDials {
		f.down[d] = true
	}
	if i := Place(sessionKeys(1)[0], f, DefaultBalanceFactor); i != -1 {
		t.Fatalf("Place with nothing eligible = %d, want -1", i)
	}
	if i := Place(sessionKeys(1)[0], newFakePool(), 0); i != -1 {
		t.Fatalf("Place on an empty pool = %d, want -1", i)
	}
}

func TestNamespace(t *testing.T) {
	abc := newFakePool("a:1", "b:2", "c:3")
	cab := newFakePool("c:3", "a:1", "b:2")
	abd := newFakePool("a:1", "b:2", "d:4")
	ab := newFakePool("a:1", "b:2")
	if Namespace("", abc) != Namespace("", cab) {
		t.Error("the namespace depends on the order of the pool")
	}
	for _, other := range []*fakePool{abd, ab, newFakePool("a:1", "b:2", "c:3", "c:3")} {
		if Namespace("", abc) == Namespace("", other) {
			t.Errorf("pools %v and %v share a namespace", abc.dials, other.dials)
		}
	}
	if Namespace("chat", abc) != Namespace("chat", abd) {
		t.Error("a name does not override the pool")
	}
	if Namespace("chat", abc) == Namespace("embeddings", abc) {
		t.Error("two names share a namespace")
	}
	if Namespace("chat", abc) == Namespace("", abc) {
		t.Error("a named and an unnamed policy on one pool share a namespace")
	}
	// The policy's adapter over a Caddy pool gives the same namespace.
	pool := newPool(3)
	f := newFakePool(pool[2].Dial, pool[0].Dial, pool[1].Dial)
	if Namespace("", poolCandidates(pool)) != Namespace("", f) {
		t.Error("a Caddy pool and the same dial addresses give different namespaces")
	}
}

func TestDynamicUpstreamsAreOnePool(t *testing.T) {
	// Dynamic upstreams (SRV, A) are new values on every request, with the
	// same addresses: the policy must see one pool, not a new one each time.
	p := &StickySelection{TTL: caddy.Duration(time.Hour + 91*time.Second)}
	provisionPolicy(t, p)
	fresh := func() reverseproxy.UpstreamPool { return newPool(3) }
	k := session.NewKey([]string{"tenant"}, "dynamic")
	r, s := sessionRequest(k)
	first := p.Select(fresh(), r, nil)
	cached := p.first.Load()
	r, s = sessionRequest(k)
	if up := p.Select(fresh(), r, nil); up == nil || up.Dial != first.Dial || s.Decision != session.DecisionHit {
		t.Fatalf("second request: %v, %q; want a hit on %s", up, s.Decision, first.Dial)
	}
	if p.first.Load() != cached {
		t.Fatal("a pool with the same addresses was taken for a new pool")
	}
}
