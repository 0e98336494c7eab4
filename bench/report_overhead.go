package main

import (
	"fmt"
	"strings"
)

// overheadSection is the report's overhead part.
func (r *report) overheadSection() string {
	res := r.overhead
	cfg := res.Config
	var b strings.Builder
	b.WriteString("## Overhead\n\n")
	b.WriteString(r.measuredOn())
	fmt.Fprintf(&b, `Three Caddy processes (`+"`go build ./cmd/caddy`"+`: the standard modules and this
plugin) listen on loopback in front of the same %d upstreams, Go `+"`net/http`"+`
servers in the benchmark program that read the whole body and answer a
small JSON. Each configuration is its own process, so its CPU time
(utime + stime from `+"`/proc/<pid>/stat`"+`) is its own. No access logs; the
server log is discarded below errors.

`, cfg.Upstreams)
	rows := [][]string{}
	for _, s := range overheadSetups {
		rows = append(rows, []string{s.id, s.name})
	}
	table(&b, []string{"Setup", "Configuration"}, rows)
	fmt.Fprintf(&b, `A load generator (Go `+"`net/http`"+` client, %d keep-alive connections, each
sending the next request as soon as the last one is answered) sends one
kind of request at a time to A, B, C, A, B, C, …: %d rounds per kind, each
window %s of warm-up and %s measured, so that drift of the (shared)
machine hits all three alike. Per window: completed requests per second,
p50 and p99 latency, and Caddy's CPU time over the window divided by the
requests completed in it. The tables give the median over the rounds;
each ratio is the median over rounds of the figure divided by A's in the
same round. The load generator and the upstreams run on the same cores
as Caddy: requests/s and latency are those of the whole machine, CPU
time per request is Caddy's alone.

Request kinds (sessions repeat, so the sticky policy works on live pins as
in a gateway's steady state):

- **header**: `+"`POST /v1/chat/completions`"+`, a 1 KiB OpenAI chat body and an
  `+"`X-Session-Id`"+` header (1,024 sessions in turn). The plugin does not read
  the body.
- **body**: `+"`POST /v1/messages`"+`, a 50 KiB Anthropic body whose last member is
  Claude Code's `+"`metadata.user_id`"+` (the JSON-string form with the
  `+"`session_id`"+` inside): the whole body is read and scanned (64 sessions).
- **auto-50k**, **auto-1m**: `+"`POST /v1/chat/completions`"+`, an OpenAI chat body of
  50 KiB (64 conversations) or 1 MiB (8) with no id: the session is the
  fingerprint of the conversation's opening.
- **get**: `+"`GET /v1/models`"+`, no session.

`, cfg.Concurrency, cfg.Rounds, cfg.Warmup, cfg.Window)

	b.WriteString("### Targets\n\n")
	targetList(&b, overheadTargets(res))

	b.WriteString("### Results\n\n")
	rows = nil
	for _, k := range res.Kinds {
		for i, s := range overheadSetups {
			m := k.summary(i)
			name := ""
			if i == 0 {
				name = "**" + k.Name + "**"
			}
			rr, pr, cr := "1", "1", "1"
			if i > 0 {
				rr, pr, cr = ratio(m.RPSRatio), ratio(m.P99Ratio), ratio(m.CPURatio)
			}
			errs := ""
			if m.Errors > 0 {
				errs = fmt.Sprintf(" (%d errors)", m.Errors)
			}
			rows = append(rows, []string{name, s.id, fmt.Sprintf("%.0f%s", m.RPS, errs), ms(m.P50), ms(m.P99), us(m.CPUPerReq), rr, pr, cr})
		}
	}
	table(&b, []string{"Kind", "Setup", "req/s", "p50", "p99", "Caddy CPU / request", "req/s vs A", "p99 vs A", "CPU / request vs A"}, rows)
	fmt.Fprintf(&b, "Per-round figures of C relative to A (CPU time per request), to show the spread:\n\n")
	rows = nil
	for _, k := range res.Kinds {
		var cells []string
		for r := range k.Rounds[0] {
			a, c := k.Rounds[0][r], k.Rounds[len(overheadSetups)-1][r]
			cells = append(cells, fmt.Sprintf("%.3f", fraction64(float64(c.CPUPerReq), float64(a.CPUPerReq))))
		}
		rows = append(rows, []string{k.Name, strings.Join(cells, ", ")})
	}
	table(&b, []string{"Kind", "C / A by round"}, rows)

	r.profiles(&b)
	return b.String()
}

// profiles writes the CPU profile summaries.
func (r *report) profiles(b *strings.Builder) {
	var any bool
	for _, k := range r.overhead.Kinds {
		any = any || k.Profile != nil
	}
	if !any {
		return
	}
	fmt.Fprintf(b, `### Where C's CPU time goes

For the kinds where the plugin reads the body, C was profiled under the
same load for %s (`+"`/debug/pprof/profile`"+` on its admin endpoint) and the
profile read with `+"`go tool pprof -top`"+`. The plugin's own work is the
samples under its packages `+"`session`"+` (finding the session: reading the
body into memory, scanning the JSON, the fingerprint), `+"`upstreams`"+`
(`+"`session_sticky`"+`) and `+"`activity`"+` (the admin API's history); the
handler's `+"`ServeHTTP`"+` is left out because `+"`reverse_proxy`"+` runs inside it.
Reading the body from the client's connection is counted to the plugin
here, though stock Caddy reads the same bytes too (while streaming them
upstream).

`, r.overhead.Config.Profile)
	for _, k := range r.overhead.Kinds {
		p := k.Profile
		if p == nil {
			continue
		}
		fmt.Fprintf(b, "#### %s\n\n", k.Title)
		fmt.Fprintf(b, "%s. The plugin's own work: %.2f s, %s of Caddy's CPU time.\n\n",
			strings.Join(p.Header, "; "), p.Plugin, pct(fraction64(p.Plugin, p.Total)))
		var rows [][]string
		for _, e := range top(p.PluginFlat, 8) {
			rows = append(rows, []string{"`" + e.Func + "`", fmt.Sprintf("%.2f s", e.Flat), fmt.Sprintf("%.1f %%", e.FlatPct)})
		}
		b.WriteString("Inside the plugin's work, by own (flat) time:\n\n")
		table(b, []string{"Function", "flat", "of all CPU"}, rows)
		rows = nil
		for _, e := range top(p.Entries, 10) {
			rows = append(rows, []string{"`" + e.Func + "`", fmt.Sprintf("%.2f s", e.Flat), fmt.Sprintf("%.1f %%", e.FlatPct),
				fmt.Sprintf("%.2f s", e.Cum), fmt.Sprintf("%.1f %%", e.CumPct)})
		}
		b.WriteString("The whole process, by flat time:\n\n")
		table(b, []string{"Function", "flat", "flat %", "cum", "cum %"}, rows)
	}
}

// top returns at most n entries.
func top(es []profileEntry, n int) []profileEntry {
	return es[:min(n, len(es))]
}
