package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// overheadSection is the report's overhead part.
func (r *report) overheadSection() string {
	res := r.overhead
	cfg := res.Config
	var b strings.Builder
	b.WriteString("## Overhead\n\n")
	b.WriteString(r.measuredOn())
	fmt.Fprintf(&b, `Four Caddy processes (`+"`go build ./cmd/caddy`"+`: the standard modules and this
plugin) listen on loopback in front of the same %d upstreams, Go `+"`net/http`"+`
servers in the benchmark program that read the whole body and answer a
small JSON. Each configuration is its own process, so its CPU time
(utime + stime from `+"`/proc/<pid>/stat`"+`) is its own. No access logs; the
server logs errors only.

`, cfg.Upstreams)
	rows := [][]string{}
	for _, s := range overheadSetups {
		rows = append(rows, []string{s.id, s.name})
	}
	table(&b, []string{"Setup", "Configuration"}, rows)
	fmt.Fprintf(&b, `A load generator (Go `+"`net/http`"+` client, %d keep-alive connections, each
sending the next request as soon as the last one is answered) sends one
kind of request at a time to A, B, C, D, then D, C, B, A, and so on: %d rounds
per kind, each window %s of warm-up and %s measured, so that drift of the
(shared) machine, also within a round, hits all four alike. Per window: completed requests per second,
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
- **sse**: `+"`POST /v1/chat/completions`"+` with `+"`\"stream\":true`"+` and an `+"`X-Session-Id`"+`
  header; the upstream streams 200 events, each flushed, then the usage
  and `+"`[DONE]`"+`. C reads the usage from the stream as it passes; D is C
  with `+"`read_usage off`"+`, so C / D is what reading costs.

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
	fmt.Fprintf(&b, `B does the same work as A but for hashing a header, so its distance from
1 shows how precise the ratios of this run are. The spread of Caddy's CPU
time per request, C over A and B over A, round by round (rounds in which
other processes used more than %.1f cores are run again, up to %d extra
rounds per kind, and the %d least disturbed are kept; the load of other
processes is the largest in any window of the round):

`, maxOtherLoad, cfg.Rounds/2, cfg.Rounds)
	rows = nil
	for _, k := range res.Kinds {
		var cs, bs, cds, others []string
		for r := range k.Rounds[0] {
			a, bb, c, d := k.Rounds[setupA][r], k.Rounds[setupB][r], k.Rounds[setupC][r], k.Rounds[setupD][r]
			cs = append(cs, fmt.Sprintf("%.2f", fraction64(float64(c.CPUPerReq), float64(a.CPUPerReq))))
			bs = append(bs, fmt.Sprintf("%.2f", fraction64(float64(bb.CPUPerReq), float64(a.CPUPerReq))))
			cds = append(cds, fmt.Sprintf("%.2f", fraction64(float64(c.CPUPerReq), float64(d.CPUPerReq))))
			others = append(others, fmt.Sprintf("%.2f", max(a.Other, bb.Other, c.Other, d.Other)))
		}
		rows = append(rows, []string{k.Name, strings.Join(cs, " "), strings.Join(bs, " "), strings.Join(cds, " "),
			fmt.Sprintf("%d of %d", len(k.Rounds[0]), k.Attempts), strings.Join(others, " ")})
	}
	table(&b, []string{"Kind", "C / A", "B / A", "C / D", "rounds kept", "other processes (cores)"}, rows)

	r.memory(&b)
	r.profiles(&b)
	return b.String()
}

// memory writes the memory measurement.
func (r *report) memory(b *strings.Builder) {
	res := r.overhead
	if len(res.Memory) == 0 {
		return
	}
	cfg := res.Config.Memory
	b.WriteString("### Memory under concurrent large bodies\n\n")
	fmt.Fprintf(b, `A fresh Caddy process per setup gets %d requests at once, each a %.0f MiB
OpenAI chat body with no session header (so `+"`session_keeping`"+` reads it to
fingerprint the conversation), in front of 2 upstreams that read the whole
body and answer %s later, as an engine does before its first token. The
figure is the process's peak resident memory (VmHWM from
`+"`/proc/<pid>/status`"+`); the ratio is against stock `+"`reverse_proxy`"+` in the
same run. `+"`session_keeping`"+` runs with its default budget, `+"`max_buffered 256MiB`"+`.

`, cfg.Clients, float64(cfg.BodySize)/(1<<20), cfg.Hold)
	rows := [][]string{}
	for _, m := range res.Memory {
		failed := "0"
		if m.Failures > 0 {
			failed = fmt.Sprintf("**%d**", m.Failures)
		}
		rows = append(rows, []string{m.Setup, fmt.Sprintf("%.0f MB", float64(m.PeakRSS)/1e6),
			ratio(fraction64(float64(m.PeakRSS), float64(res.Memory[0].PeakRSS))), failed})
	}
	table(b, []string{"Setup", "Peak RSS", "vs stock", "Requests not answered 200 with the body intact"}, rows)
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

For the header kind (the one the targets are about) and the kinds where
the plugin reads the body, C was profiled under the same load for %s
(`+"`/debug/pprof/profile`"+` on its admin endpoint) and the profile read with
`+"`go tool pprof -top`"+`. The plugin's own work is the
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
		var own []profileEntry
		for _, e := range p.PluginFlat {
			if e.Flat > 0 {
				own = append(own, e)
			}
		}
		for _, e := range top(own, 8) {
			rows = append(rows, []string{"`" + e.Func + "`", fmt.Sprintf("%.2f s", e.Flat), fmt.Sprintf("%.1f %%", e.FlatPct)})
		}
		b.WriteString("Inside the plugin's work, by own (flat) time:\n\n")
		table(b, []string{"Function", "flat", "of all CPU"}, rows)
		rows = nil
		for _, e := range top(pluginFunctions(p.Entries), 8) {
			rows = append(rows, []string{"`" + e.Func + "`", fmt.Sprintf("%.2f s", e.Cum), fmt.Sprintf("%.1f %%", e.CumPct)})
		}
		b.WriteString("The plugin's functions, by time spent in them and what they call (cum):\n\n")
		table(b, []string{"Function", "cum", "of all CPU"}, rows)
		fmt.Fprintf(b, "Memory management in the whole process: allocation (`runtime.mallocgc`) %.1f %%, garbage collection (`runtime.gcBgMarkWorker`, `runtime.gcAssistAlloc`) %.1f %% of the CPU time.\n\n",
			cumPct(p.Entries, "runtime.mallocgc"), cumPct(p.Entries, "runtime.gcBgMarkWorker")+cumPct(p.Entries, "runtime.gcAssistAlloc"))
		rows = nil
		for _, e := range top(p.Entries, 10) {
			rows = append(rows, []string{"`" + e.Func + "`", fmt.Sprintf("%.2f s", e.Flat), fmt.Sprintf("%.1f %%", e.FlatPct),
				fmt.Sprintf("%.2f s", e.Cum), fmt.Sprintf("%.1f %%", e.CumPct)})
		}
		b.WriteString("The whole process, by flat time:\n\n")
		table(b, []string{"Function", "flat", "flat %", "cum", "cum %"}, rows)
		if k.Allocs != nil {
			allocTable(b, k.Allocs)
		}
	}
}

// allocTable writes the comparison of two setups' allocations.
func allocTable(b *strings.Builder, a *allocComparison) {
	fmt.Fprintf(b, `Allocation does not show in a CPU profile where it is made: the garbage
collector pays for it later, in the runtime's own functions. So A and C
were also loaded for the same time with the same requests and their heap
profiles compared (`+"`/debug/pprof/allocs`"+`, the delta over the load, sampled by
the runtime): A allocates %.1f KiB and %.0f objects per request, C %.1f KiB
and %.0f objects (%s the bytes). The functions that allocate more per
request in C (the profiles are sampled, so differences of a few hundred
bytes in Caddy's own functions are noise):

`, a.Bytes[0]/1024, a.Objects[0], a.Bytes[1]/1024, a.Objects[1], ratio(fraction64(a.Bytes[1], a.Bytes[0])))
	var rows [][]string
	for _, s := range a.More[:min(8, len(a.More))] {
		rows = append(rows, []string{"`" + s.Func + "`", fmt.Sprintf("%.0f B", s.Bytes)})
	}
	table(b, []string{"Function", "more bytes per request in C"}, rows)
}

// pluginFunctions returns the plugin's functions, heaviest cum first,
// leaving out the handler's ServeHTTP and its response writer, inside
// which the rest of the route runs.
func pluginFunctions(es []profileEntry) []profileEntry {
	var out []profileEntry
	for _, e := range es {
		if !strings.HasPrefix(e.Func, pluginModule) ||
			strings.Contains(e.Func, ".(*Handler).ServeHTTP") || strings.Contains(e.Func, "outcomeWriter") {
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b profileEntry) int { return cmp.Compare(b.Cum, a.Cum) })
	return out
}

// pluginModule is the module path of the plugin.
const pluginModule = "github.com/sessionkeeping/caddy-session-keeping"

// cumPct returns the cum share of the named function, 0 if absent.
func cumPct(es []profileEntry, name string) float64 {
	for _, e := range es {
		if e.Func == name {
			return e.CumPct
		}
	}
	return 0
}

// top returns at most n entries.
func top(es []profileEntry, n int) []profileEntry {
	return es[:min(n, len(es))]
}
