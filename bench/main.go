// Command bench measures what the plugin costs and what it buys, and
// writes the figures to BENCHMARKS.md with two charts.
//
// The overhead part runs four real Caddy processes on loopback, stock
// reverse_proxy with round_robin, stock header hashing, session_keeping
// with session_sticky, and the same with read_usage off, interleaved round
// by round, and compares throughput, latency and Caddy's CPU time per
// request.
//
// The affinity part runs an agent workload against emulated inference
// engines with prefix caches, bounded batches and streamed answers, once
// per load-balancing policy: through an upstream kill, a restore, a reload
// and a scale-out, then with caches sized to a multiple of the working
// set, against the routers of other gateways. It compares the share of
// prompt tokens the engines found in their caches, the time to first
// token and the throughput.
//
// Run it from the module root: make bench, or go run ./bench -h.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command line flags.
type options struct {
	part     string
	out, svg string
	caddy    string
	keep     bool
	seed     uint64
	overhead overheadConfig
	affinity affinityConfig
}

func parseFlags() (options, error) {
	var o options
	var kinds, policies, scenarioPolicies, pressures string
	flag.StringVar(&o.part, "part", "all", "which part to run: overhead, affinity or all")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "the report to write; a part not run keeps its section")
	flag.StringVar(&o.svg, "svg", "bench/affinity.svg", "the affinity chart to write, linked from the report; the cache-pressure chart goes beside it as scenarios.svg")
	flag.StringVar(&o.caddy, "caddy", "", "a Caddy binary with the plugin (default: go build ./cmd/caddy)")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (Caddyfiles, Caddy logs, profiles) and print its path")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of every request body and of the agent workload")

	ov := &o.overhead
	flag.IntVar(&ov.Rounds, "rounds", 8, "overhead: rounds of A, B, C, D kept per request kind (up to half as many more run when other processes disturb them)")
	flag.DurationVar(&ov.Window, "window", 800*time.Millisecond, "overhead: measured window per setup and round")
	flag.DurationVar(&ov.Warmup, "warmup", 200*time.Millisecond, "overhead: unmeasured load before each window")
	flag.IntVar(&ov.Concurrency, "concurrency", 8, "overhead: concurrent keep-alive clients")
	flag.IntVar(&ov.Upstreams, "sinks", 4, "overhead: upstream servers behind each Caddy")
	flag.StringVar(&kinds, "kinds", "", "overhead: comma-separated request kinds (header, body, auto-50k, auto-1m, get, sse); default all")
	flag.DurationVar(&ov.Profile, "profile", 3*time.Second, "overhead: CPU profile length of config C for the body and auto-detect kinds; 0 for none")
	flag.IntVar(&ov.Memory.Clients, "memory-clients", 32, "overhead: concurrent large bodies of the memory measurement; 0 for none")
	flag.IntVar(&ov.Memory.BodySize, "memory-body", 30<<20, "overhead: bytes of each body of the memory measurement")
	flag.DurationVar(&ov.Memory.Hold, "memory-hold", 300*time.Millisecond, "overhead: memory measurement, how long an upstream waits after reading a body before it answers")

	af := &o.affinity
	flag.IntVar(&af.Upstreams, "upstreams", 4, "affinity: engines at the start (one more joins at 75%)")
	flag.IntVar(&af.Workload.Clients, "conversations", 200, "affinity: concurrent agent conversations")
	flag.IntVar(&af.Workload.MinTurns, "min-turns", 5, "affinity: fewest turns of a conversation")
	flag.IntVar(&af.Workload.MaxTurns, "max-turns", 50, "affinity: most turns of a conversation")
	flag.DurationVar(&af.Workload.ThinkMin, "think-min", 30*time.Millisecond, "affinity: shortest think time between turns")
	flag.DurationVar(&af.Workload.ThinkMax, "think-max", 200*time.Millisecond, "affinity: longest think time between turns")
	flag.IntVar(&af.BlockSize, "block", 16, "affinity: tokens per prefix-cache block")
	flag.IntVar(&af.CacheTokens, "cache-tokens", 0, "affinity: prefix-cache capacity per engine in tokens (default: twice an engine's fair share of the working set)")
	flag.DurationVar(&af.Warmup, "affinity-warmup", 2*time.Second, "affinity: unmeasured start of each policy's run through the events")
	flag.DurationVar(&af.Run, "run", 20*time.Second, "affinity: measured length of each policy's run through the events")
	flag.IntVar(&af.Buckets, "buckets", 40, "affinity: time buckets of the chart (a multiple of 4)")
	flag.DurationVar(&af.Latency.Base, "latency-base", 5*time.Millisecond, "affinity: engine time per request")
	flag.DurationVar(&af.Latency.Prefill, "latency-prefill", 4*time.Microsecond, "affinity: engine time per uncached prompt token")
	flag.DurationVar(&af.Latency.Decode, "latency-decode", 1500*time.Microsecond, "affinity: engine time per generated token")
	flag.IntVar(&af.Seqs, "seqs", 32, "affinity: sequences an engine serves at once (later requests wait); 0 for no bound")
	flag.IntVar(&af.StreamEvery, "stream-every", 16, "affinity: generated tokens per streamed event after the first")
	flag.StringVar(&policies, "policies", strings.Join(defaultPolicies, ","), "affinity: comma-separated policies of the events run, of "+strings.Join(policyNames(), ", "))
	flag.StringVar(&pressures, "pressures", "0.5,1,2", "affinity: comma-separated cache-pressure scenarios, each the working set over the fleet's whole cache; empty for none")
	flag.StringVar(&scenarioPolicies, "scenario-policies", strings.Join(defaultScenarioPolicies, ","), "affinity: comma-separated policies of each cache-pressure scenario")
	flag.DurationVar(&af.ScenarioWarmup, "scenario-warmup", 1500*time.Millisecond, "affinity: unmeasured start of each scenario run")
	flag.DurationVar(&af.ScenarioRun, "scenario-run", 5*time.Second, "affinity: measured length of each scenario run")
	flag.Parse()

	ov.Seed, af.Workload.Seed = o.seed, o.seed
	ov.Kinds, af.Policies, af.ScenarioPolicies = splitList(kinds), splitList(policies), splitList(scenarioPolicies)
	for _, f := range splitList(pressures) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return o, fmt.Errorf("-pressures: %q is not a positive number", f)
		}
		af.Pressures = append(af.Pressures, v)
	}
	switch o.part {
	case "all", "overhead", "affinity":
	default:
		return o, fmt.Errorf("-part: want overhead, affinity or all, got %q", o.part)
	}
	switch {
	case ov.Rounds < 1 || ov.Concurrency < 1 || ov.Upstreams < 1 || ov.Window <= 0:
		return o, fmt.Errorf("overhead: -rounds, -concurrency, -sinks and -window must be positive")
	case af.Upstreams < 2 || af.Workload.Clients < 1 || af.BlockSize < 1 || af.Run <= 0 || af.ScenarioRun <= 0 || af.Buckets < phases:
		return o, fmt.Errorf("affinity: need at least 2 upstreams, 1 conversation, a block, a run and %d buckets", phases)
	case af.Seqs < 0 || af.StreamEvery < 1:
		return o, fmt.Errorf("affinity: -seqs must be at least 0 and -stream-every at least 1")
	case af.Workload.MinTurns < 1 || af.Workload.MaxTurns < af.Workload.MinTurns:
		return o, fmt.Errorf("affinity: -min-turns must be at least 1 and at most -max-turns")
	case af.Workload.ThinkMin < 0 || af.Workload.ThinkMax < af.Workload.ThinkMin:
		return o, fmt.Errorf("affinity: -think-min must be at least 0 and at most -think-max")
	}
	return o, nil
}

// setFlags returns the flags given on the command line, as they would be
// typed, with a leading space; empty for none.
func setFlags() string {
	var b strings.Builder
	flag.Visit(func(f *flag.Flag) {
		fmt.Fprintf(&b, " -%s=%s", f.Name, f.Value)
	})
	return b.String()
}

// splitList splits a comma-separated flag value.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "caddy-session-keeping-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Println("scratch directory kept:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	env := &benchEnv{dir: dir, start: time.Now(), caddy: o.caddy}

	if env.caddy == "" {
		env.logf("building Caddy with the plugin (go build ./cmd/caddy)")
		if env.caddy, err = buildCaddy(dir); err != nil {
			return err
		}
	}
	rep := &report{machine: describeMachine(), started: time.Now(), args: setFlags()}
	if o.part != "affinity" {
		if o.overhead.Profile > 0 {
			// The first run of pprof may build it; do that before
			// anything is measured.
			exec.Command("go", "tool", "pprof", "-h").Run()
		}
		env.logf("overhead part: %d kinds × %d rounds × %d setups × %s", len(selectKinds(requestKinds(o.seed), o.overhead.Kinds)), o.overhead.Rounds, len(overheadSetups), o.overhead.Window+o.overhead.Warmup)
		if rep.overhead, err = runOverhead(env, o.overhead); err != nil {
			return err
		}
	}
	if o.part != "overhead" {
		af := o.affinity
		env.logf("affinity part: %d policies × %s, then %d scenarios × %d policies × %s", len(af.Policies), af.Warmup+af.Run,
			len(af.Pressures), len(af.ScenarioPolicies), af.ScenarioWarmup+af.ScenarioRun)
		if rep.affinity, err = runAffinity(env, o.affinity); err != nil {
			return err
		}
	}
	rep.elapsed = time.Since(env.start)
	if err := rep.write(o.out, o.svg); err != nil {
		return err
	}
	env.logf("wrote %s", o.out)
	return nil
}
