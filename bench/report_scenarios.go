package main

import (
	"fmt"
	"math"
	"strings"
)

// The peers the scenarios compare session_sticky with, and where their
// algorithms and parameters come from.
var peerSources = []struct{ name, source string }{
	{"peer_ring", "vLLM production-stack (github.com/vllm-project/production-stack), `SessionRouter` in `src/vllm_router/routers/routing_logic.py`: a `uhashring` consistent-hash ring of the engines (40 virtual nodes × 4 replicas by default, so 160 points each) over the value of the configured session key (`--session-key`, here `X-Session-Id`); a request without it goes to the engine with the lowest QPS"},
	{"peer_prefix", "SGLang's router (sgl-router, github.com/sgl-project/sglang), `cache_aware` policy in `sgl-router/src/policies/cache_aware.rs`, with the defaults of `sgl-router/py_src/sglang_router/router_args.py`: `cache_threshold` 0.3, `balance_abs_threshold` 64, `balance_rel_threshold` 1.5, `eviction_interval_secs` 120, `max_tree_size` 2^26; its tree holds characters of the prompt text, the emulation's holds the engines' token blocks and never evicts (sgl-router evicts every 120 s, after more than a run here lasts); among engines that match a shared prefix equally, sgl-router takes the one its tree node lists first, the emulation one fixed by a hash of the prefix"},
	{"peer_least", "the fewest requests in flight, as Caddy's `least_conn` or the least-loaded choice of the routers above"},
}

// scenarioMetric is one figure of the comparison: how to read it from a
// result, and whether more is better.
type scenarioMetric struct {
	name   string
	value  func(policyResult) float64
	format func(policyResult) string
	higher bool // more is better
}

var scenarioMetrics = []scenarioMetric{
	{"cached-token ratio", policyResult.Ratio, func(p policyResult) string { return pct(p.Ratio()) }, true},
	{"TTFT p50", func(p policyResult) float64 { return p.TTFT50.Seconds() }, func(p policyResult) string { return ms(p.TTFT50) }, false},
	{"TTFT p99", func(p policyResult) float64 { return p.TTFT99.Seconds() }, func(p policyResult) string { return ms(p.TTFT99) }, false},
	{"throughput", func(p policyResult) float64 { return p.Throughput }, func(p policyResult) string { return fmt.Sprintf("%.0f req/s", p.Throughput) }, true},
	{"load imbalance", func(p policyResult) float64 { return p.Imbalance }, func(p policyResult) string { return fmt.Sprintf("%.2f", p.Imbalance) }, false},
}

// scenariosSection is the report's part on cache pressure and the peers.
func (r *report) scenariosSection(chart string) string {
	res := r.affinity
	cfg := res.Config
	var b strings.Builder
	b.WriteString("### Cache pressure and the peers' routers\n\n")
	fmt.Fprintf(&b, `The same workload and engines, without events, in %d scenarios: each
engine's cache is sized so that the working set is a given multiple of
the whole fleet's cache (%d engines). Each policy runs for %s of warm-up
and %s measured, on fresh engines. Besides `+"`session_sticky`"+` and the oracle,
the routers users would pick instead of this plugin, emulated in the load
generator as the oracle is (it picks the engine; Caddy's `+"`cookie`"+` policy
sends the request there, with the same failover):

`, len(res.Scenarios), cfg.Upstreams, cfg.ScenarioWarmup, cfg.ScenarioRun)
	for _, p := range peerSources {
		fmt.Fprintf(&b, "- **%s**: %s.\n", p.name, p.source)
	}
	b.WriteString(`
The runs are short, for ` + "`make bench`" + ` to take under 10 minutes (longer
and larger ones: ` + "`-scenario-run`" + `, ` + "`-conversations`" + `, ` + "`-pressures`" + `). At 1×,
where the caches are just large enough, a few sessions more on one engine
make it evict what it will need again, so cached-token ratios there vary
between runs by several points; TTFT p99 varies by up to 10 % anywhere.

*Ceiling*: the share of prompt tokens whose prefix some engine had
computed before (every block any engine computed, never evicted): what
a router could find cached with caches that keep everything. No router
beats it; under pressure, no router reaches it either. The *working set*
is measured: every ` + sampleEvery.String() + `, the tokens of every client's conversation
so far (its last prompt and reply), summed, averaged over the run.
*TTFT* is the time from sending a request to its first streamed token,
at the client, through Caddy; *throughput* is answered requests per
second.

`)
	fmt.Fprintf(&b, "![Cached-token ratio and TTFT p99 per scenario and policy](%s)\n\n", chart)

	for _, sc := range res.Scenarios {
		var ws float64
		for _, p := range sc.Policies {
			ws += p.WorkingSet
		}
		ws /= float64(max(len(sc.Policies), 1))
		fleet := float64(sc.CacheTokens * cfg.Upstreams)
		fmt.Fprintf(&b, "#### Working set %g× the cache\n\n", sc.Pressure)
		fmt.Fprintf(&b, "%dk tokens of cache per engine (%dk in all); measured working set %.0fk tokens, %.2f× the fleet's cache.\n\n",
			sc.CacheTokens/1000, sc.CacheTokens*cfg.Upstreams/1000, ws/1000, fraction64(ws, fleet))
		var rows [][]string
		for _, p := range sc.Policies {
			row := []string{"**" + p.Name + "**"}
			for _, m := range scenarioMetrics {
				row = append(row, m.format(p))
			}
			row = append(row, pct(p.Ceiling()), pct(fraction64(p.Ratio(), p.Ceiling())), fmt.Sprint(p.Requests), fmt.Sprint(p.Failed))
			rows = append(rows, row)
		}
		head := []string{"Policy"}
		for _, m := range scenarioMetrics {
			head = append(head, m.name)
		}
		table(&b, append(head, "ceiling", "of the ceiling", "requests", "failed"), rows)

		sticky, ok := sc.policy("session_sticky")
		if !ok {
			continue
		}
		rows = nil
		for _, p := range sc.Policies {
			if p.Name == sticky.Name {
				continue
			}
			row := []string{p.Name}
			for _, m := range scenarioMetrics {
				row = append(row, ratio(fraction64(m.value(sticky), m.value(p))))
			}
			rows = append(rows, row)
		}
		b.WriteString("session_sticky over each of the others, same run (above 1 is better for the cached-token ratio and throughput, below 1 for TTFT and imbalance):\n\n")
		table(&b, head, rows)
	}

	b.WriteString("**Where session_sticky loses.** ")
	losses := scenarioLosses(res, false)
	if len(losses) == 0 {
		b.WriteString("To no peer in this run: in every scenario it is at least as good as each of them on every figure.\n\n")
	} else {
		fmt.Fprintf(&b, "Every figure of a scenario on which a peer did better in this run (a difference under %.0f %% is marked *tie*: reruns move the figures by about that much, TTFT p99 by up to 10 %%):\n\n", 100*tieMargin)
		for _, l := range losses {
			b.WriteString("- " + l + "\n")
		}
		b.WriteString("\n")
	}
	if losses := scenarioLosses(res, true); len(losses) > 0 {
		b.WriteString("Against the oracle:\n\n")
		for _, l := range losses {
			b.WriteString("- " + l + "\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(scenarioVariantsNote(res))
	b.WriteString(scenarioOracleNote(res))
	return b.String()
}

// scenarioVariantsNote compares session_sticky with other options to its
// defaults, scenario by scenario.
func scenarioVariantsNote(res *affinityResult) string {
	var b strings.Builder
	for _, sc := range res.Scenarios {
		sticky, ok := sc.policy("session_sticky")
		if !ok {
			continue
		}
		for _, p := range sc.Policies {
			if !isVariant(p.Name) {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("**The plugin's own options.** The same figures for `session_sticky` with other options, against its defaults in the same scenario:\n\n")
			}
			var parts []string
			for _, m := range scenarioMetrics {
				parts = append(parts, fmt.Sprintf("%s %s against %s (%s)", m.name, m.format(p), m.format(sticky), ratio(fraction64(m.value(p), m.value(sticky)))))
			}
			fmt.Fprintf(&b, "- working set %g×, %s (%s): %s\n", sc.Pressure, p.Name, policyOptions[p.Name], strings.Join(parts, "; "))
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// policyOptions say in a few words what a variant of session_sticky
// changes.
var policyOptions = map[string]string{
	"sticky_bf110": "`balance_factor 1.1`",
	"sticky_bf100": "`balance_factor 1.0`",
	"sticky_lc":    "`fallback least_conn`: new sessions on the least loaded upstream",
}

// tieMargin is the relative difference under which the report calls two
// figures a tie.
const tieMargin = 0.03

// isVariant reports whether a policy is session_sticky with other
// options: the plugin itself, not a peer.
func isVariant(name string) bool { return strings.HasPrefix(name, "sticky_") }

// scenarioLosses lists, per scenario and figure, the peers (or the
// oracle) that beat session_sticky.
func scenarioLosses(res *affinityResult, oracle bool) []string {
	var out []string
	for _, sc := range res.Scenarios {
		sticky, ok := sc.policy("session_sticky")
		if !ok {
			continue
		}
		for _, m := range scenarioMetrics {
			var better []string
			for _, p := range sc.Policies {
				if p.Name == sticky.Name || isVariant(p.Name) || (p.Name == "oracle") != oracle {
					continue
				}
				s, o := m.value(sticky), m.value(p)
				if m.higher && s >= o || !m.higher && s <= o {
					continue
				}
				r := fraction64(s, o)
				tie := ""
				if math.Abs(r-1) < tieMargin {
					tie = ", *tie*"
				}
				better = append(better, fmt.Sprintf("%s %s (%s%s)", p.Name, m.format(p), ratio(r), tie))
			}
			if len(better) > 0 {
				out = append(out, fmt.Sprintf("working set %g×, %s: %s against session_sticky's %s",
					sc.Pressure, m.name, strings.Join(better, ", "), m.format(sticky)))
			}
		}
	}
	return out
}

// scenarioOracleNote says how far the oracle and session_sticky are from
// the ceiling.
func scenarioOracleNote(res *affinityResult) string {
	var parts []string
	for _, sc := range res.Scenarios {
		o, ok := sc.policy("oracle")
		if !ok {
			continue
		}
		part := fmt.Sprintf("at %g×, the oracle %s of %s (%s)", sc.Pressure, pct(o.Ratio()), pct(o.Ceiling()), ratio(fraction64(o.Ratio(), o.Ceiling())))
		if s, ok := sc.policy("session_sticky"); ok {
			part += fmt.Sprintf(", session_sticky %s of %s (%s)", pct(s.Ratio()), pct(s.Ceiling()), ratio(fraction64(s.Ratio(), s.Ceiling())))
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return ""
	}
	return `**How far from optimal.** The oracle is greedy: it knows every cache
but not the future, so under pressure it is no bound, and the ceiling is
one no router reaches once caches evict. Cached-token ratio against the
ceiling: ` + strings.Join(parts, "; ") + ".\n\n"
}
