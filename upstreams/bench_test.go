package upstreams

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// benchPins is the number of live pins the Select benchmarks run against.
const benchPins = 1_000_000

// benchRequests is how many distinct pre-built requests a benchmark cycles
// through: enough that the lookups spread over the table instead of staying
// in a few cache lines, few enough to build quickly. A power of two.
const benchRequests = 1 << 16

// randomKeys returns n pseudo-random session keys, the same for the same
// seed.
func randomKeys(n int, seed uint64) []session.Key {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	keys := make([]session.Key, n)
	for i := range keys {
		binary.LittleEndian.PutUint64(keys[i][:8], rng.Uint64())
		binary.LittleEndian.PutUint64(keys[i][8:], rng.Uint64())
	}
	return keys
}

// hitFixture is a provisioned policy with benchPins sessions pinned on an
// 8-upstream pool, shared by the Select benchmarks because it takes a
// while to build. It is never cleaned up: benchmarks end with the process.
var hitFixture = sync.OnceValues(func() (*StickySelection, reverseproxy.UpstreamPool) {
	pool := newPool(8)
	// A table of its own (the settings key the shared tables) with room
	// to spare, so that no pin is evicted by an uneven spread over shards.
	p := &StickySelection{TTL: caddy.Duration(time.Hour + 17*time.Second), MaxSessions: 2 * benchPins}
	ctx, _ := caddy.NewContext(caddy.Context{Context: context.Background()})
	if err := p.Provision(ctx); err != nil {
		panic(err)
	}
	ns := Namespace(p.Name, poolCandidates(pool))
	for _, k := range randomKeys(benchPins, 1) {
		// Where Select would place a new session.
		i := Place(k, poolCandidates(pool), p.balanceFactor)
		p.table.PinIfAbsent(PinKey{Namespace: ns, Session: k}, pool[i].Dial)
	}
	return p, pool
})

// benchPolicy returns the shared fixture, checking that every pin is there.
func benchPolicy(b *testing.B) (*StickySelection, reverseproxy.UpstreamPool) {
	b.Helper()
	p, pool := hitFixture()
	if n := p.table.Len(); n != benchPins {
		b.Fatalf("the table holds %d pins, want %d", n, benchPins)
	}
	return p, pool
}

// sessionRequests builds one request per key, each carrying its session in
// its context as the session_keeping handler leaves it.
func sessionRequests(keys []session.Key) ([]*http.Request, []*session.Session) {
	reqs := make([]*http.Request, len(keys))
	sessions := make([]*session.Session, len(keys))
	base := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	for i, k := range keys {
		s := &session.Session{ID: fmt.Sprintf("s-%d", i), Key: k, Source: "header:X-Session-Id"}
		sessions[i] = s
		reqs[i] = base.WithContext(session.NewContext(context.Background(), s))
	}
	return reqs, sessions
}

// selectHit runs one request through Select and checks it was a hit.
func selectHit(b *testing.B, p *StickySelection, pool reverseproxy.UpstreamPool, r *http.Request, s *session.Session) {
	// Each request gets a fresh Session from the handler; reset the one
	// reused here, or Select would take the call for a retry.
	s.Balancer, s.Upstream = nil, ""
	if up := p.Select(pool, r, nil); up == nil || s.Decision != session.DecisionHit {
		b.Fatalf("Select = %v, decision %q; want a hit", up, s.Decision)
	}
}

// BenchmarkSelectHit1M measures Select for a request whose session is
// pinned, with 1,000,000 live pins over 8 upstreams in the table.
func BenchmarkSelectHit1M(b *testing.B) {
	p, pool := benchPolicy(b)
	// Keys from all over the table: the first benchRequests of the
	// 1,000,000 pinned, which are in random order.
	reqs, sessions := sessionRequests(randomKeys(benchRequests, 1))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		j := i & (benchRequests - 1)
		selectHit(b, p, pool, reqs[j], sessions[j])
	}
}

// BenchmarkSelectHitParallel is BenchmarkSelectHit1M from GOMAXPROCS
// goroutines at once (run with -cpu 1,2,4... to see the scaling). Each
// goroutine has its own requests, as concurrent requests do.
func BenchmarkSelectHitParallel(b *testing.B) {
	p, pool := benchPolicy(b)
	keys := randomKeys(benchPins, 1)
	procs := runtime.GOMAXPROCS(0)
	type requestSet struct {
		reqs     []*http.Request
		sessions []*session.Session
	}
	sets := make([]requestSet, procs)
	size := min(benchRequests, benchPins/procs)
	for g := range sets {
		// Disjoint sessions per goroutine: a Session belongs to one request.
		part := keys[g*benchPins/procs:][:size]
		sets[g].reqs, sets[g].sessions = sessionRequests(part)
	}
	var next atomic.Int32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		set := sets[int(next.Add(1)-1)%len(sets)]
		n := len(set.reqs)
		for i := 0; pb.Next(); i++ {
			j := i % n
			selectHit(b, p, pool, set.reqs[j], set.sessions[j])
		}
	})
}

// headerBaseline returns Caddy's header hash policy on an 8-upstream pool,
// and requests carrying the header it hashes.
func headerBaseline(b *testing.B, n int) (*reverseproxy.HeaderHashSelection, reverseproxy.UpstreamPool, []*http.Request) {
	b.Helper()
	h := &reverseproxy.HeaderHashSelection{Field: "X-Session-Key"}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	keys := randomKeys(n, 1)
	reqs := make([]*http.Request, n)
	for i, k := range keys {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("X-Session-Key", k.String())
		reqs[i] = r
	}
	return h, newPool(8), reqs
}

// BenchmarkHeaderPolicy is the baseline for BenchmarkSelectHit1M: Caddy's
// header hash policy on the same pool.
func BenchmarkHeaderPolicy(b *testing.B) {
	h, pool, reqs := headerBaseline(b, benchRequests)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if up := h.Select(pool, reqs[i&(benchRequests-1)], nil); up == nil {
			b.Fatal("no upstream")
		}
	}
}

// BenchmarkHeaderPolicyParallel is the baseline for
// BenchmarkSelectHitParallel.
func BenchmarkHeaderPolicyParallel(b *testing.B) {
	h, pool, reqs := headerBaseline(b, benchRequests)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Header maps are only read: goroutines may share requests.
		for i := rand.IntN(benchRequests); pb.Next(); i++ {
			if up := h.Select(pool, reqs[i&(benchRequests-1)], nil); up == nil {
				b.Fatal("no upstream")
			}
		}
	})
}

// BenchmarkPinMemory reports the heap a live pin costs (B/pin) in a table
// of 1,000,000 pins: HeapAlloc after a collection, before and after.
func BenchmarkPinMemory(b *testing.B) {
	ups := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t := NewPinTable(time.Hour, DefaultMaxSessions, nil)
		rng := rand.New(rand.NewPCG(2, 3))
		for i := 0; i < benchPins; i++ {
			k := PinKey{Namespace: 1}
			binary.LittleEndian.PutUint64(k.Session[:8], rng.Uint64())
			binary.LittleEndian.PutUint64(k.Session[8:], rng.Uint64())
			t.PinIfAbsent(k, ups[i%len(ups)])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		live := t.Len() // at the default bound a few pins are evicted
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(live), "B/pin")
		b.ReportMetric(float64(live), "pins")
		runtime.KeepAlive(t)
	}
}
