package upstreams

import (
	"slices"
	"strings"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// PinView is one pin of a session, as the admin API shows it.
type PinView struct {
	Pool     string `json:"pool"`
	Upstream string `json:"upstream"`
}

// MemberView is one upstream of a sticky pool, as the admin API shows it.
type MemberView struct {
	Pool      string            `json:"pool"`
	Dial      string            `json:"dial"`
	LivePins  int               `json:"live_pins"`
	InFlight  int               `json:"in_flight"`
	Healthy   bool              `json:"healthy"`
	Available bool              `json:"available"`
	Decisions map[string]uint64 `json:"decisions"`
}

// label names a pool for people: the policy's name, or its members.
func (p *StickySelection) label(rec *poolRecord) string {
	if p.Name != "" {
		return p.Name
	}
	pool := rec.pool.Load()
	if pool == nil {
		return ""
	}
	dials := make([]string, len(*pool))
	for i, u := range *pool {
		dials[i] = u.Dial
	}
	slices.Sort(dials)
	return strings.Join(dials, " ")
}

// PinsOf returns the live pins of a session in every pool of every loaded
// policy.
func PinsOf(key session.Key) []PinView {
	out := []PinView{}
	seen := map[PinKey]bool{}
	for _, p := range Policies() {
		for ns, rec := range p.pools.all() {
			k := PinKey{Namespace: ns, Session: key}
			if seen[k] {
				continue
			}
			if pin, ok := p.store.Peek(k); ok {
				seen[k] = true
				out = append(out, PinView{Pool: p.label(rec), Upstream: pin.Upstream})
			}
		}
	}
	slices.SortFunc(out, func(a, b PinView) int { return strings.Compare(a.Pool, b.Pool) })
	return out
}

// Unpin drops the pins of a session in every pool, returning how many it
// dropped; the session's next request is placed afresh.
func Unpin(key session.Key) int {
	n := 0
	for _, p := range Policies() {
		for ns := range p.pools.all() {
			if p.store.Delete(PinKey{Namespace: ns, Session: key}) {
				n++
			}
		}
	}
	return n
}

// Members lists every upstream of every pool the loaded policies have
// served, with its live pins in this instance's table (with store redis,
// the pins this instance has used), load, health and decisions since
// start.
func Members() []MemberView {
	type poolOf struct {
		table *PinTable
		ns    uint64
	}
	pinCounts := map[poolOf]map[string]int{}
	counted := map[*PinTable]bool{}
	var out []MemberView
	for _, p := range Policies() {
		if !counted[p.table] {
			counted[p.table] = true
			p.table.Range(func(k PinKey, pin Pin) bool {
				pk := poolOf{p.table, k.Namespace}
				if pinCounts[pk] == nil {
					pinCounts[pk] = map[string]int{}
				}
				pinCounts[pk][pin.Upstream]++
				return true
			})
		}
		for ns, rec := range p.pools.all() {
			pool := rec.pool.Load()
			if pool == nil {
				continue
			}
			label := p.label(rec)
			for _, u := range *pool {
				m := MemberView{
					Pool: label, Dial: u.Dial,
					LivePins: pinCounts[poolOf{p.table, ns}][u.Dial],
					InFlight: u.NumRequests(), Healthy: u.Healthy(), Available: u.Available(),
					Decisions: new(decisionCounts).snapshot(),
				}
				if c, ok := upstreamDecisions.load(u.Dial); ok {
					m.Decisions = c.snapshot()
				}
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b MemberView) int {
		if c := strings.Compare(a.Pool, b.Pool); c != 0 {
			return c
		}
		return strings.Compare(a.Dial, b.Dial)
	})
	return slices.CompactFunc(out, func(a, b MemberView) bool { return a.Pool == b.Pool && a.Dial == b.Dial })
}

// LivePins returns the number of pins held by all loaded policies' tables.
func LivePins() int {
	n := 0
	for _, t := range liveTables() {
		n += t.Len()
	}
	return n
}

// Evictions returns how many pins the loaded tables evicted at their bound.
func Evictions() uint64 {
	var n uint64
	for _, t := range liveTables() {
		n += t.Evictions()
	}
	return n
}

// DecisionCounts returns the decisions of all policies by kind since start.
func DecisionCounts() map[string]uint64 { return Decisions.snapshot() }

// liveTables returns the distinct tables of the loaded policies.
func liveTables() []*PinTable {
	var out []*PinTable
	for _, p := range Policies() {
		if t := p.table; t != nil && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
