package main

import (
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
)

// testEngines returns n engines that count as serving, each with a cache
// of blocks blocks, and a pool of all of them.
func testEngines(n, blocks int) ([]*engine, *atomic.Int32) {
	var engines []*engine
	for i := range n {
		engines = append(engines, &engine{name: fmt.Sprintf("u%d", i+1), addr: fmt.Sprintf("127.0.0.1:%d", 9000+i), blocks: blocks, srv: &http.Server{}})
	}
	pool := new(atomic.Int32)
	pool.Store(int32(n))
	return engines, pool
}

func TestRingRouter(t *testing.T) {
	engines, pool := testEngines(4, 100)
	r := newRingRouter(engines, pool)
	used := map[int]bool{}
	for s := range 200 {
		req := routeRequest{session: fmt.Sprint("session-", s)}
		first := r.route(req)
		if again := r.route(req); again != first {
			t.Fatalf("session %d went to %d, then %d", s, first, again)
		}
		used[first] = true
	}
	if len(used) != 4 {
		t.Errorf("200 sessions on %d engines", len(used))
	}
	// Without a session: the least loaded engine.
	engines[0].inFlight.Store(5)
	engines[1].inFlight.Store(1)
	engines[2].inFlight.Store(3)
	engines[3].inFlight.Store(2)
	if got := r.route(routeRequest{}); got != 1 {
		t.Errorf("a request without a session went to %d, want the least loaded 1", got)
	}
	// A dead engine leaves the ring; sessions of the others stay put.
	before := map[string]int{}
	for s := range 200 {
		id := fmt.Sprint("session-", s)
		before[id] = r.route(routeRequest{session: id})
	}
	engines[2].srv = nil
	for id, was := range before {
		got := r.route(routeRequest{session: id})
		if got == 2 || (was != 2 && got != was) {
			t.Fatalf("%s: on %d before, %d after engine 2 died", id, was, got)
		}
	}
}

func TestPrefixRouter(t *testing.T) {
	engines, pool := testEngines(3, 1000)
	r := newPrefixRouter(engines, pool)
	conv := []uint64{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
	first := r.route(routeRequest{blocks: conv[:4]})
	// The continuation matches 4 of 10 blocks (over the threshold) there.
	engines[first].inFlight.Store(3)
	if got := r.route(routeRequest{blocks: conv}); got != first {
		t.Errorf("the continuation went to %d, want %d, which holds its prefix", got, first)
	}
	// A new prompt with no match goes to the smallest tree.
	if got := r.route(routeRequest{blocks: []uint64{99}}); got == first {
		t.Errorf("a new prompt went to the engine with the largest tree")
	}
	// Imbalanced: the least loaded engine, whatever the cache.
	for i, e := range engines {
		e.inFlight.Store(int64(100 + 50*i))
	}
	engines[first].inFlight.Store(400)
	if got := r.route(routeRequest{blocks: conv}); got == first || engines[got].inFlight.Load() > 150 {
		t.Errorf("under imbalance the request went to %d (load %d)", got, engines[got].inFlight.Load())
	}
}

func TestPrefixRouterTies(t *testing.T) {
	engines, pool := testEngines(4, 1000)
	r := newPrefixRouter(engines, pool)
	// Two shared prefixes (system prompts), known to every engine.
	shared := [][]uint64{{1, 2, 3, 4, 5, 6}, {21, 22, 23, 24, 25, 26}}
	for i := range engines {
		for _, p := range shared {
			for _, b := range p {
				r.trees[i][b] = struct{}{}
			}
		}
	}
	// New conversations after a shared prefix: each prefix has one fixed
	// engine, whichever conversation follows it.
	var picks []int
	for _, p := range shared {
		want := -1
		for c := range 20 {
			got := r.route(routeRequest{blocks: append(slices.Clone(p), uint64(1000+c))})
			if want >= 0 && got != want {
				t.Fatalf("prefix %v: conversation %d went to %d, the others to %d", p, c, got, want)
			}
			want = got
		}
		picks = append(picks, want)
	}
	t.Logf("the two shared prefixes went to %v", picks)
}
