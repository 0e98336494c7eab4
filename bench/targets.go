package main

import (
	"fmt"
	"slices"
)

// target is one goal the report checks, with the figure that decides it.
type target struct {
	Met  bool
	Text string
}

func (t target) String() string {
	mark := "**met**"
	if !t.Met {
		mark = "**missed**"
	}
	return fmt.Sprintf("- %s: %s", mark, t.Text)
}

// Overhead targets, for the header-signal kind: session_keeping +
// session_sticky (C) against stock round_robin (A).
const (
	maxCPURatio = 1.05
	minRPSRatio = 0.95
	maxP99Ratio = 1.10
)

// bodyCPUTargets bound Caddy's CPU time per request of C against A for
// the kinds where the plugin reads the body.
var bodyCPUTargets = []struct {
	kind string
	max  float64
}{
	{"body", 1.10},
	{"auto-1m", 1.30},
}

// overheadTargets checks the header-signal kind, and the CPU time of the
// body kinds.
func overheadTargets(res *overheadResult) []target {
	var out []target
	if i := slices.IndexFunc(res.Kinds, func(k kindResult) bool { return k.Name == "header" }); i >= 0 {
		c := res.Kinds[i].summary(setupC)
		out = append(out,
			target{c.CPURatio <= maxCPURatio, fmt.Sprintf("header signal, Caddy CPU time per request of C is %s A's (target ≤ %.2f×)", ratio(c.CPURatio), maxCPURatio)},
			target{c.RPSRatio >= minRPSRatio, fmt.Sprintf("header signal, requests/s of C are %s A's (target ≥ %.2f×)", ratio(c.RPSRatio), minRPSRatio)},
			target{c.P99Ratio <= maxP99Ratio, fmt.Sprintf("header signal, p99 latency of C is %s A's (target ≤ %.2f×)", ratio(c.P99Ratio), maxP99Ratio)},
		)
	}
	for _, t := range bodyCPUTargets {
		if i := slices.IndexFunc(res.Kinds, func(k kindResult) bool { return k.Name == t.kind }); i >= 0 {
			c := res.Kinds[i].summary(setupC)
			out = append(out, target{c.CPURatio <= t.max, fmt.Sprintf("%s, Caddy CPU time per request of C is %s A's (target ≤ %.2f×)", res.Kinds[i].Title, ratio(c.CPURatio), t.max)})
		}
	}
	if i := slices.IndexFunc(res.Kinds, func(k kindResult) bool { return k.Name == "sse" }); i >= 0 {
		r := res.Kinds[i].ratioOf(setupC, setupD)
		out = append(out, target{r <= maxUsageCPURatio, fmt.Sprintf("%s, Caddy CPU time per request of C (usage read) is %s D's (read_usage off) (target ≤ %.2f×)", res.Kinds[i].Title, ratio(r), maxUsageCPURatio)})
	}
	return out
}

// maxUsageCPURatio bounds what reading the usage of a streamed answer may
// cost: C against D, the same setup with read_usage off.
const maxUsageCPURatio = 1.05

// Affinity targets for session_sticky.
const (
	minOracleShare = 0.97
	maxImbalance   = 1.25
)

// stockPolicies are the alternatives session_sticky must beat: Caddy's
// own policies (the oracle is the yardstick, not an alternative, and
// variants of session_sticky are the same plugin).
var stockPolicies = []string{"round_robin", "least_conn", "random", "header"}

// affinityTargets checks session_sticky against the others.
func affinityTargets(res *affinityResult) []target {
	sticky, ok := res.policy("session_sticky")
	if !ok {
		return nil
	}
	var out []target
	if oracle, ok := res.policy("oracle"); ok {
		share := fraction64(sticky.Phases[0].Ratio(), oracle.Phases[0].Ratio())
		out = append(out, target{share >= minOracleShare, fmt.Sprintf(
			"steady state (phase 0–25 %%, after the warm-up), session_sticky's cached-token ratio %s is %s the oracle's %s (target ≥ %.2f×)",
			pct(sticky.Phases[0].Ratio()), ratio(share), pct(oracle.Phases[0].Ratio()), minOracleShare)})
	}
	for p := range phases {
		best, bestName := -1.0, ""
		for _, name := range stockPolicies {
			if r, ok := res.policy(name); ok && r.Phases[p].Ratio() > best {
				best, bestName = r.Phases[p].Ratio(), name
			}
		}
		if bestName == "" {
			break
		}
		s := sticky.Phases[p].Ratio()
		out = append(out, target{s >= best, fmt.Sprintf(
			"phase %s, session_sticky's cached-token ratio %s vs the best stock policy's (%s) %s (target: session_sticky highest)",
			phaseNames[p], pct(s), bestName, pct(best))})
	}
	out = append(out,
		target{sticky.Failed == 0, fmt.Sprintf("session_sticky failed requests through the kill, restore, reload and scale-out: %d (target 0; the %d answers cut off mid-stream by the kill are counted apart: no proxy can retry an answer that has begun)", sticky.Failed, sticky.Cut)},
		target{sticky.Imbalance <= maxImbalance, fmt.Sprintf("session_sticky load imbalance over the run: %.2f (target ≤ %.2f)", sticky.Imbalance, maxImbalance)},
	)
	return out
}

// phaseNames label the phases.
var phaseNames = [phases]string{"0–25 %", "25–50 %", "50–75 %", "75–100 %"}

// policy returns the result of the named policy in the run through the
// events.
func (r *affinityResult) policy(name string) (policyResult, bool) {
	return findPolicy(r.Policies, name)
}

// policy returns the result of the named policy in the scenario.
func (sc scenarioResult) policy(name string) (policyResult, bool) {
	return findPolicy(sc.Policies, name)
}

// findPolicy returns the result of the named policy among results.
func findPolicy(results []policyResult, name string) (policyResult, bool) {
	for _, p := range results {
		if p.Name == name {
			return p, true
		}
	}
	return policyResult{}, false
}

func fraction64(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
