package upstreams

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// This file keeps what the admin API and the metrics need to see of the
// sticky policies: which policies are loaded, the pools they have served,
// and decision counts per upstream. Caddy creates admin modules with no
// handle on the HTTP app, so this state is package-level.

// decisionKinds are the decisions in the order their counters are kept.
var decisionKinds = [...]string{
	session.DecisionNew, session.DecisionHit, session.DecisionSpill, session.DecisionSpillTier,
	session.DecisionRepinUnhealthy, session.DecisionRepinFailed,
	session.DecisionRepinRemoved, session.DecisionNone,
}

func decisionIndex(d string) int {
	for i, k := range decisionKinds {
		if k == d {
			return i
		}
	}
	return len(decisionKinds) - 1
}

// decisionCounts counts decisions by kind.
type decisionCounts [len(decisionKinds)]atomic.Uint64

// snapshot returns the counts by decision name.
func (c *decisionCounts) snapshot() map[string]uint64 {
	m := make(map[string]uint64, len(decisionKinds))
	for i, k := range decisionKinds {
		m[k] = c[i].Load()
	}
	return m
}

// cowMap is a map read without locks and written by copy: writes are rare
// (a new upstream, a new pool) and reads happen on every request.
type cowMap[K comparable, V any] struct {
	mu sync.Mutex // serialises writers
	m  atomic.Pointer[map[K]V]
}

func (c *cowMap[K, V]) load(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// loadOrStore returns the value of k, storing newValue() first if there is
// none.
func (c *cowMap[K, V]) loadOrStore(k K, newValue func() V) V {
	if v, ok := c.load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
	}
	m := copyMap(old)
	v := newValue()
	m[k] = v
	c.m.Store(&m)
	return v
}

// copyMap returns a writable copy of *old (an empty map for nil).
func copyMap[K comparable, V any](old *map[K]V) map[K]V {
	if old == nil {
		return make(map[K]V, 1)
	}
	m := make(map[K]V, len(*old)+1)
	maps.Copy(m, *old)
	return m
}

// all returns the current map; callers must not modify it.
func (c *cowMap[K, V]) all() map[K]V {
	if m := c.m.Load(); m != nil {
		return *m
	}
	return nil
}

// upstreamDecisions counts decisions per upstream dial address since the
// process started; they survive config reloads.
var upstreamDecisions cowMap[string, *decisionCounts]

// Decisions counts decisions of all policies by kind since start.
var Decisions decisionCounts

// countDecision records one decision for an upstream ("" when none was
// chosen).
func countDecision(dial, decision string) {
	i := decisionIndex(decision)
	Decisions[i].Add(1)
	if dial != "" {
		upstreamDecisions.loadOrStore(dial, func() *decisionCounts { return new(decisionCounts) })[i].Add(1)
	}
}

// poolRecord is the latest pool a policy served under one namespace.
type poolRecord struct {
	pool atomic.Pointer[reverseproxy.UpstreamPool]
}

// observe remembers the pool; the caller no longer modifies it.
func (r *poolRecord) observe(pool reverseproxy.UpstreamPool) {
	r.pool.Store(&pool)
}

// live lists the provisioned policies.
var live = struct {
	sync.Mutex
	policies map[*StickySelection]struct{}
}{policies: make(map[*StickySelection]struct{})}

func register(p *StickySelection) {
	live.Lock()
	live.policies[p] = struct{}{}
	live.Unlock()
}

func unregister(p *StickySelection) {
	live.Lock()
	delete(live.policies, p)
	live.Unlock()
}

// Policies returns the policies of the loaded configs. During a reload both
// the old and the new config's policies may be listed.
func Policies() []*StickySelection {
	live.Lock()
	defer live.Unlock()
	out := make([]*StickySelection, 0, len(live.policies))
	for p := range live.policies {
		out = append(out, p)
	}
	return out
}
