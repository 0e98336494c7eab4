package main

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
)

// The routers of the systems users would pick instead of this plugin,
// emulated in the load generator as the oracle is: each picks the engine
// of a request by its own algorithm, and Caddy's cookie policy sends it
// there with the same failover as every other policy.

// aliveEngines returns the indexes of the engines in Caddy's pool that
// serve.
func aliveEngines(engines []*engine, pool *atomic.Int32) []int {
	var out []int
	for i, e := range engines[:pool.Load()] {
		if e.alive() {
			out = append(out, i)
		}
	}
	return out
}

// leastLoaded sends every request to the engine with the fewest requests
// in flight.
type leastLoaded struct {
	engines []*engine
	pool    *atomic.Int32
}

func (l leastLoaded) route(routeRequest) int {
	return leastLoadedOf(l.engines, aliveEngines(l.engines, l.pool))
}

// leastLoadedOf returns the engine of candidates with the fewest requests
// in flight (the first among equals), or -1.
func leastLoadedOf(engines []*engine, candidates []int) int {
	best, bestLoad := -1, int64(0)
	for _, i := range candidates {
		if load := engines[i].inFlight.Load(); best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	return best
}

// ringVnodes is how many points each engine has on the hash ring, as the
// hash ring library of vLLM's production-stack router has by default.
const ringVnodes = 160

// ringRouter is the session router of vLLM's production-stack: requests
// that carry the session header go to the engine the session key hashes to
// on a consistent-hash ring of the engines; requests without it go to the
// least loaded engine (the router picks the lowest QPS; load in flight
// stands for it here).
type ringRouter struct {
	engines []*engine
	pool    *atomic.Int32

	mu      sync.Mutex // guards the ring
	members []int      // the engines the ring was built over
	points  []ringPoint
}

type ringPoint struct {
	hash   uint64
	engine int
}

func newRingRouter(engines []*engine, pool *atomic.Int32) *ringRouter {
	return &ringRouter{engines: engines, pool: pool}
}

func (r *ringRouter) route(req routeRequest) int {
	alive := aliveEngines(r.engines, r.pool)
	if req.session == "" || len(alive) == 0 {
		return leastLoadedOf(r.engines, alive)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(alive, r.members) {
		r.members, r.points = alive, r.points[:0]
		for _, i := range alive {
			for v := range ringVnodes {
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], uint64(v))
				r.points = append(r.points, ringPoint{xxhash.Sum64String(r.engines[i].addr + string(b[:])), i})
			}
		}
		slices.SortFunc(r.points, func(a, b ringPoint) int { return cmp.Compare(a.hash, b.hash) })
	}
	h := xxhash.Sum64String(req.session)
	k, _ := slices.BinarySearchFunc(r.points, h, func(p ringPoint, h uint64) int { return cmp.Compare(p.hash, h) })
	return r.points[k%len(r.points)].engine
}

// The cache-aware router of SGLang (sgl-router), with its default
// thresholds: cache_threshold 0.3, balance_abs_threshold 64,
// balance_rel_threshold 1.5.
const (
	prefixCacheThreshold = 0.3
	prefixBalanceAbs     = 64
	prefixBalanceRel     = 1.5
)

// prefixRouter keeps an approximate prefix tree per engine of the prompts
// it sent there; it never learns what the engine evicted. While the load
// is balanced (the busiest engine has no more than balance_abs_threshold
// requests more than the idlest, or no more than balance_rel_threshold
// times as many), a request goes to the engine whose tree matches the
// longest prefix of its prompt when that match is above cache_threshold
// of the prompt, and else to the engine with the smallest tree; when the
// load is not balanced, to the least loaded engine. Either way its prompt
// joins that engine's tree. The router's own eviction runs every 120 s
// (eviction_interval_secs), after more than a default run here lasts, so
// the trees keep everything; a longer run (-scenario-run) overstates what
// the router would remember.
//
// Among engines that match equally far (a shared system prompt), sgl-router
// takes whichever its tree node lists first, an order fixed by hashing;
// here a hash of the matched prefix and the engine decides, so that each
// shared prefix has its own fixed engine, as there.
type prefixRouter struct {
	engines []*engine
	pool    *atomic.Int32

	mu    sync.Mutex            // guards the trees
	trees []map[uint64]struct{} // per engine, the hash of every prompt prefix sent there
}

func newPrefixRouter(engines []*engine, pool *atomic.Int32) *prefixRouter {
	r := &prefixRouter{engines: engines, pool: pool}
	for range engines {
		r.trees = append(r.trees, map[uint64]struct{}{})
	}
	return r
}

func (r *prefixRouter) route(req routeRequest) int {
	alive := aliveEngines(r.engines, r.pool)
	if len(alive) == 0 {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	minLoad, maxLoad := int64(-1), int64(0)
	for _, i := range alive {
		load := r.engines[i].inFlight.Load()
		if minLoad < 0 || load < minLoad {
			minLoad = load
		}
		maxLoad = max(maxLoad, load)
	}
	var pick int
	if maxLoad-minLoad > prefixBalanceAbs && float64(maxLoad) > prefixBalanceRel*float64(minLoad) {
		pick = leastLoadedOf(r.engines, alive)
	} else {
		pick = r.longestMatch(req.blocks, alive)
	}
	for _, b := range req.blocks {
		r.trees[pick][b] = struct{}{}
	}
	return pick
}

// longestMatch returns the engine of alive whose tree matches the longest
// prefix of blocks, if that is more than the cache threshold of the
// prompt, and else the engine with the smallest tree.
func (r *prefixRouter) longestMatch(blocks []uint64, alive []int) int {
	best, bestMatch, bestRank := -1, 0, uint64(0)
	for _, i := range alive {
		m := 0
		for m < len(blocks) {
			if _, ok := r.trees[i][blocks[m]]; !ok {
				break
			}
			m++
		}
		if m == 0 {
			continue
		}
		rank := upstreams.Mix64(blocks[m-1] ^ uint64(i+1)*0x9e3779b97f4a7c15)
		if m > bestMatch || m == bestMatch && rank > bestRank {
			best, bestMatch, bestRank = i, m, rank
		}
	}
	if best >= 0 && float64(bestMatch) > prefixCacheThreshold*float64(len(blocks)) {
		return best
	}
	smallest := alive[0]
	for _, i := range alive[1:] {
		if len(r.trees[i]) < len(r.trees[smallest]) {
			smallest = i
		}
	}
	return smallest
}
