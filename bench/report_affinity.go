package main

import (
	"fmt"
	"slices"
	"strings"
)

// policyTitles describe the policies in the report.
var policyTitles = map[string]string{
	"round_robin":    "stock `lb_policy round_robin`",
	"least_conn":     "stock `lb_policy least_conn`",
	"random":         "stock `lb_policy random`",
	"header":         "stock `lb_policy header X-Session-Id` (clients without the header fall to its default fallback, `random`)",
	"session_sticky": "`session_keeping` + `lb_policy session_sticky` with default options (and a `name`, so pins survive the change of the pool)",
	"sticky_tiers":   "the tiered scenario: `session_sticky` with u4 as a pricier tier of its own (`tier` lines: the other engines, then u4) and every engine full at 40 requests in flight (`unhealthy_request_count 40`), so that the cheap tier overflows at the workload's peaks",
	"sticky_bf110":   "`session_keeping` + `lb_policy session_sticky { balance_factor 1.1 }`: a tighter bound on the load of the upstream a new session is placed on",
	"sticky_bf100":   "`session_keeping` + `lb_policy session_sticky { balance_factor 1.0 }`: new sessions only on upstreams below the mean load",
	"sticky_lc":      "`session_keeping` + `lb_policy session_sticky { fallback least_conn }`: new sessions placed on the least loaded upstream instead of by rendezvous hashing",
	"peer_ring":      "vLLM production-stack's session router, emulated in the load generator (Caddy's `cookie` policy sends each request where it picked, with the same failover): requests with the session header go where the session key hashes on a consistent-hash ring of the engines (160 points each), others to the least loaded engine (the router picks the lowest QPS)",
	"peer_prefix":    "SGLang's cache-aware router (sgl-router), emulated the same way with its default thresholds (cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5): an approximate prefix tree per engine of the prompts sent there, as large as the engine's cache; while the load is balanced, the engine matching the longest prefix if it matches over 30 % of the prompt, else the one with the smallest tree; when it is not, the least loaded",
	"peer_least":     "a least-loaded router, emulated the same way: the engine with the fewest requests in flight",
	"oracle":         "the yardstick: the load generator sees every engine's cache and load, and sends each request (through Caddy's `cookie` policy, with the same failover) to the engine holding the longest cached prefix of its prompt; a conversation's first request goes to the least loaded engine",
}

// affinitySection is the report's affinity part: the workload and the
// engines, the run through events, then the cache-pressure scenarios.
func (r *report) affinitySection(chart, scenariosChart string) string {
	res := r.affinity
	cfg := res.Config
	w := cfg.Workload
	var b strings.Builder
	b.WriteString("## Affinity\n\n")
	b.WriteString(r.measuredOn())
	fmt.Fprintf(&b, `**Workload.** %d agent clients run conversations one after another
(seed %d). A conversation has %d–%d turns; each request carries the whole
history as an OpenAI chat body: a system prompt (one of %d shared ones,
%d–%d words, as few agent harnesses serve many users), the first user
turn (%d–%d words), then tool results (%d–%d words) and replies (%d–%d
tokens), streamed. Between turns a client thinks %s–%s (times are scaled
down from seconds). %d %% of the clients send an `+"`X-Session-Id`"+` header, %d %% a
`+"`prompt_cache_key`"+` body field, the other %d %% only replay the history
(auto-detection). A run starts as if it had been going on for long: each
client joins mid-conversation (longer conversations as much more often as
they last longer, at a uniform turn), sending the history so far. The same seed
gives the same clients, conversations and messages; an engine's reply
depends only on the prompt, so every policy sees the same workload.

**Engines.** %d emulated inference engines serve `+"`/v1/chat/completions`"+`
like vLLM or SGLang with prefix caching: a word is a token, each message
starts with a role token and the prompt ends with the assistant's;
tokens form %d-token blocks identified by a hash chained over the whole
prefix, so a block hits only when everything before it matches; an LRU
cache of a set number of tokens per engine keeps the blocks of the
prompts and replies it served (the tail of a conversation is evicted
before its head); the answer reports the hit as
`+"`usage.prompt_tokens_details.cached_tokens`"+`. An engine runs at most %d
sequences at once (vLLM's `+"`max_num_seqs`"+`, scaled down); a request beyond
them waits for one to end. A running request takes %s + %s per uncached
prompt token to its first token, then %s per generated token, streamed
%d tokens an event after the first. The working set is about %.0fk tokens
(%d conversations × %.0f prompt tokens per request on average).

`, w.Clients, w.Seed, w.MinTurns, w.MaxTurns, systemPrompts, systemMinWords, systemMaxWords,
		firstUserMin, firstUserMax, userMinWords, userMaxWords, replyMinTokens, replyMaxTokens,
		w.ThinkMin, w.ThinkMax, headerPercent, bodyPercent, 100-headerPercent-bodyPercent,
		cfg.Upstreams, cfg.BlockSize, cfg.Seqs, cfg.Latency.Base, cfg.Latency.Prefill, cfg.Latency.Decode,
		cfg.StreamEvery, res.WorkingSet/1000, w.Clients, res.MeanPrompt)
	if len(res.Policies) > 0 {
		r.eventsRun(&b, chart)
	}
	if len(res.Scenarios) > 0 {
		b.WriteString(r.scenariosSection(scenariosChart))
	}
	return b.String()
}

// eventsRun writes the run through the kill, restore, reload and
// scale-out.
func (r *report) eventsRun(b *strings.Builder, chart string) {
	res := r.affinity
	cfg := res.Config
	fmt.Fprintf(b, `### Through failures and a scale-out

Each engine's cache holds %d tokens, %.0f %% of the working set: %.1f×
an engine's fair share. **Policies**, one Caddy process each, with fresh
engines, on the same workload:

`, cfg.CacheTokens, 100*float64(cfg.CacheTokens)/res.WorkingSet, float64(cfg.CacheTokens*cfg.Upstreams)/res.WorkingSet)
	for _, p := range res.Policies {
		fmt.Fprintf(b, "- **%s**: %s\n", p.Name, policyTitles[p.Name])
	}
	fmt.Fprintf(b, `
Every policy has the same failover in its `+"`reverse_proxy`"+` block (durations
scaled down like the rest):

`+"```caddyfile\n%s\n```"+`

The request body a retry sends again is kept by `+"`request_buffers 4MiB`"+` in
the stock policies' blocks, and by `+"`session_keeping { buffer_bodies on }`"+`
where the plugin runs (its recipe: one copy, held until the response starts).

**Run.** Per policy, %s of warm-up (not measured: caches fill), then %s
measured, with these events:

`, failover, cfg.Warmup, cfg.Run)
	for _, ev := range runEvents {
		fmt.Fprintf(b, "- at %.1f %%: %s\n", 100*ev.at, ev.detail)
	}
	fmt.Fprintf(b, `
**Definitions.**

- *Cached-token ratio*: the sum of `+"`cached_tokens`"+` over the sum of
  `+"`prompt_tokens`"+` of the requests answered in the period.
- *Steady state*: phase 0–25 %%, after the warm-up and before any event.
- *Failed*: requests answered with an error status, or whose connection
  to the gateway failed on all three tries.
- *Dropped connections (resent)*: a connection to the gateway lost before
  any answer, after which the client resent the request (after %s, then
  %s; OpenAI's and Anthropic's SDKs retry such errors twice by default).
  Caddy closes idle keep-alive connections when it reloads its config, and
  a request written onto one at that moment is lost. %s (reasons and
  times below).
- *Cut off (resent)*: a streamed answer that ended before its last event,
  because its engine was killed mid-answer. Its first events had reached
  the client, so Caddy could not retry it elsewhere (no proxy can); the
  agent sent the request again, as agents do when a stream breaks.
- *Load imbalance*: every %s, over the engines in the pool and alive, the
  most requests in flight at one engine (running or waiting) divided by
  the mean; averaged over the samples with any request in flight. 1 is
  perfectly even; with four engines, 1.25 means the busiest carries a
  quarter more than its share.
- *TTFT*: time to first token, from sending a request to reading its
  first streamed token, at the client, through Caddy, over the measured
  run; *req/s*: answered requests per second of it.

`, clientBackoff[0], clientBackoff[1], dropSummary(res), sampleEvery)

	b.WriteString("#### Targets\n\n")
	targetList(b, affinityTargets(res))

	b.WriteString("#### Results\n\n")
	oracle, hasOracle := res.policy("oracle")
	var rows [][]string
	for _, p := range res.Policies {
		row := []string{"**" + p.Name + "**", pct(p.Ratio())}
		for _, ph := range p.Phases {
			row = append(row, pct(ph.Ratio()))
		}
		vs := "–"
		if hasOracle {
			vs = ratio(fraction64(p.Phases[0].Ratio(), oracle.Phases[0].Ratio()))
		}
		row = append(row, vs, ms(p.TTFT50), ms(p.TTFT99), fmt.Sprintf("%.0f", p.Throughput),
			fmt.Sprint(p.Requests), fmt.Sprint(p.Failed), fmt.Sprint(p.Dropped), fmt.Sprint(p.Cut), fmt.Sprintf("%.2f", p.Imbalance))
		rows = append(rows, row)
	}
	head := []string{"Policy", "cached-token ratio"}
	for _, n := range phaseNames {
		head = append(head, n)
	}
	head = append(head, "steady state vs oracle", "TTFT p50", "TTFT p99", "req/s", "requests", "failed", "dropped conn. (resent)", "cut off (resent)", "load imbalance")
	table(b, head, rows)

	b.WriteString("Load imbalance by phase:\n\n")
	rows = nil
	for _, p := range res.Policies {
		row := []string{p.Name}
		for _, ph := range p.Phases {
			row = append(row, fmt.Sprintf("%.2f", ph.Imbalance))
		}
		rows = append(rows, append(row, fmt.Sprintf("%.2f", p.Imbalance)))
	}
	table(b, append(append([]string{"Policy"}, phaseNames[:]...), "run"), rows)

	fmt.Fprintf(b, "![Cached-token ratio over the run, per policy](%s)\n\n", chart)

	if tiered, ok := res.policy("sticky_tiers"); ok {
		b.WriteString("#### Tiered scenario\n\n")
		b.WriteString(`Own replicas first, a provider when they are full: the cost is what the
pricier engine (u4) served, over every answer of the run, warm-up
included. ` + "`session_sticky`" + ` over the same engines as one plain pool is the
baseline of the same run. A request that finds every engine full, the
pricier one too, is answered 503 by Caddy and counts as failed.

`)
		rows = nil
		if plain, ok := res.policy("session_sticky"); ok {
			rows = append(rows, tierRow(plain))
		}
		rows = append(rows, tierRow(tiered))
		table(b, []string{"Policy", "requests on u4", "share of requests", "share of prompt tokens", "cached-token ratio", "failed"}, rows)
	}

	b.WriteString(`The same ratio over every answer of the run, warm-up included, as the
engines counted what they reported, and as ` + "`session_keeping`" + ` read it from the
answers going past (admin API ` + "`/session_keeping/upstreams`" + `, the same totals as
the metrics ` + "`caddy_session_keeping_prompt_tokens_total`" + ` and
` + "`caddy_session_keeping_cached_prompt_tokens_total`" + `). ` + "`session_keeping`" + ` runs in
front of every policy for this; with the stock policies it routes nothing.
An answer that an engine sent whole but that never reached Caddy (cut
off by the engine's kill) counts for the engine only.

`)
	rows = nil
	for _, p := range res.Policies {
		eng := fraction64(float64(p.EngineCached), float64(p.EnginePrompt))
		plug := fraction64(float64(p.PluginCached), float64(p.PluginPrompt))
		rows = append(rows, []string{p.Name, pct(eng), pct(plug),
			fmt.Sprintf("%.3f points", 100*(plug-eng)),
			fmt.Sprintf("%d / %d", p.PluginPrompt, p.EnginePrompt)})
	}
	table(b, []string{"Policy", "engines' totals", "session_keeping's reading", "difference", "prompt tokens read / reported"}, rows)

	b.WriteString("Failures, dropped connections and answers cut off (the time is in percent of the measured run):\n\n")
	none := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	for _, p := range res.Policies {
		fmt.Fprintf(b, "- %s: failed: %s; dropped: %s; cut off: %s\n", p.Name, none(p.FailureReasons), none(p.DropReasons), none(p.CutReasons))
	}
	b.WriteString("\n")

	for _, p := range res.Policies {
		if len(p.Decisions) == 0 {
			continue
		}
		keys := make([]string, 0, len(p.Decisions))
		for k := range p.Decisions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, p.Decisions[k]))
		}
		fmt.Fprintf(b, "%s's decisions over the whole run, warm-up included (admin API `/session_keeping/upstreams`): %s.\n\n",
			p.Name, strings.Join(parts, ", "))
	}
}

// dropSummary says when the dropped connections of a run happened.
func dropSummary(res *affinityResult) string {
	var all, atReload int64
	for _, p := range res.Policies {
		all += p.Dropped
		atReload += p.DroppedAtReload
	}
	if all == 0 {
		return "There were none in this run"
	}
	s := fmt.Sprintf("In this run, %d of the %d, over all policies, came within %.0f %% of the run after a config reload",
		atReload, all, 100*afterReload)
	if atReload == all {
		s += "; the kill of an upstream cost none, since Caddy retries those requests itself"
	}
	return s
}

// tierRow is a policy's row of the tiered scenario: what the pricier
// engine served.
func tierRow(p policyResult) []string {
	var all, prompt int64
	var u4 engineTotals
	for i, e := range p.PerEngine {
		all += e.Requests
		prompt += e.Prompt
		if i == expensiveIndex {
			u4 = e
		}
	}
	return []string{p.Name, fmt.Sprint(u4.Requests), pct(fraction64(float64(u4.Requests), float64(all))),
		pct(fraction64(float64(u4.Prompt), float64(prompt))), pct(p.Ratio()), fmt.Sprint(p.Failed)}
}
