package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// proxySetup is one gateway configuration of the overhead part.
type proxySetup struct {
	id   string // A, B, C, D: A is the baseline
	name string
	site func(upstreams string) string
}

// overheadSetups are the compared configurations, each run as its own
// Caddy process with the same upstreams.
var overheadSetups = []proxySetup{
	{"A", "`reverse_proxy`, `lb_policy round_robin`", func(up string) string {
		return "reverse_proxy " + up + " {\n\tlb_policy round_robin\n}"
	}},
	{"B", "`reverse_proxy`, `lb_policy header X-Session-Id`", func(up string) string {
		return "reverse_proxy " + up + " {\n\tlb_policy header X-Session-Id\n}"
	}},
	{"C", "`session_keeping` + `lb_policy session_sticky`", func(up string) string {
		return "session_keeping\nreverse_proxy " + up + " {\n\tlb_policy session_sticky\n}"
	}},
	{"D", "C with `read_usage off`", func(up string) string {
		return "session_keeping {\n\tread_usage off\n}\nreverse_proxy " + up + " {\n\tlb_policy session_sticky\n}"
	}},
}

// Indexes of the setups the report compares: C against A (and B, the
// same work as A, as a check on precision), and C against D for what
// reading the answers' usage costs.
const (
	setupA = 0
	setupB = 1
	setupC = 2
	setupD = 3
)

// overheadConfig sets the overhead part's size.
type overheadConfig struct {
	Rounds      int
	Window      time.Duration
	Warmup      time.Duration
	Concurrency int
	Upstreams   int
	Kinds       []string
	Profile     time.Duration // 0: no profiles
	Seed        uint64
	Memory      memoryConfig // Clients 0: no memory measurement
}

// profiledKinds are the kinds whose CPU profile of C explains the cost:
// the kind of the targets, and the ones where the plugin reads the body.
var profiledKinds = []string{"header", "body", "auto-50k", "auto-1m"}

// allocKind is the kind whose allocations A and C are compared: the one
// the targets are about, where the plugin does the least work, so that
// what it allocates stands out.
const allocKind = "header"

// measurement is one window's figures.
type measurement struct {
	RPS       float64
	P50, P99  time.Duration
	CPUPerReq time.Duration
	Requests  int
	Errors    int
	Other     float64 // CPU used by other processes, in cores
}

// kindResult holds the kept windows of one request kind.
type kindResult struct {
	Name, Title string
	Rounds      [][]measurement // [setup][round]
	Attempts    int             // rounds run, disturbed ones included
	Profile     *profileSummary
	Allocs      *allocComparison
}

// overheadResult is the overhead part's outcome.
type overheadResult struct {
	Config overheadConfig
	Kinds  []kindResult
	Memory []memoryResult
}

// runOverhead measures every request kind against every setup, in
// interleaved rounds (A, B, C, then C, B, A, ...) so that drift of the
// machine hits all setups alike.
func runOverhead(env *benchEnv, cfg overheadConfig) (*overheadResult, error) {
	all := requestKinds(cfg.Seed)
	for _, name := range cfg.Kinds {
		if !slices.ContainsFunc(all, func(k *requestKind) bool { return k.name == name }) {
			return nil, fmt.Errorf("overhead: unknown request kind %q", name)
		}
	}
	kinds := selectKinds(all, cfg.Kinds)
	addrs, stopSinks, err := startSinks(cfg.Upstreams, sink)
	if err != nil {
		return nil, err
	}
	defer stopSinks()
	g, err := startGateways(env, strings.Join(addrs, " "))
	if err != nil {
		return nil, err
	}
	defer g.stop()
	env.logf("overhead: %d Caddy processes up (pids %v), %d upstreams, concurrency %d", len(g.pids), g.pids, len(addrs), cfg.Concurrency)

	client := newLoadClient(cfg.Concurrency)
	// A process that has just started is slower for a moment (its heap
	// and connection pools grow): warm each up before anything counts.
	for i := range overheadSetups {
		if _, err := runLoad(client, g.requests(kinds[0], i), cfg.Concurrency, 0, time.Second, g.meter(i)); err != nil {
			return nil, err
		}
	}
	res := &overheadResult{Config: cfg}
	for _, k := range kinds {
		kr, err := measureKind(env, g, client, k, cfg)
		if err != nil {
			return nil, err
		}
		explainKind(env, g, client, k, cfg, &kr)
		res.Kinds = append(res.Kinds, kr)
	}
	if cfg.Memory.Clients > 0 {
		if res.Memory, err = runMemory(env, cfg.Memory); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// measureKind runs the rounds of one request kind. Every other round runs
// the setups in reverse order (A B C, C B A, ...), so that a setup's place
// in a round, and drift within a round, favour none of them. A round
// disturbed by other processes is made up for by another, up to half as
// many more rounds, and the least disturbed rounds are kept.
func measureKind(env *benchEnv, g *gateways, client *http.Client, k *requestKind, cfg overheadConfig) (kindResult, error) {
	kr := kindResult{Name: k.name, Title: k.title}
	var rounds []round
	clean := 0
	for n := 0; n < cfg.Rounds+cfg.Rounds/2 && (n < cfg.Rounds || clean < cfg.Rounds); n++ {
		rd := round{setups: make([]measurement, len(overheadSetups))}
		for j := range overheadSetups {
			i := j
			if n%2 == 1 {
				i = len(overheadSetups) - 1 - j
			}
			w, err := runLoad(client, g.requests(k, i), cfg.Concurrency, cfg.Warmup, cfg.Window, g.meter(i))
			if err != nil {
				return kr, err
			}
			m := measure(w)
			rd.setups[i] = m
			rd.other = max(rd.other, m.Other)
			env.logf("overhead %-8s round %2d %s: %6.0f req/s  p50 %-8s p99 %-8s Caddy CPU/req %-8s other load %.2f cores",
				k.name, n+1, overheadSetups[i].id, m.RPS, ms(m.P50), ms(m.P99), us(m.CPUPerReq), m.Other)
		}
		if rd.other <= maxOtherLoad {
			clean++
		}
		rounds = append(rounds, rd)
	}
	kr.Attempts = len(rounds)
	kr.Rounds = keepQuietest(rounds, cfg.Rounds)
	return kr, nil
}

// explainKind adds C's CPU profile and the comparison of A's and C's
// allocations, for the kinds that get them. Without them the figures
// still stand, so a failure is only reported.
func explainKind(env *benchEnv, g *gateways, client *http.Client, k *requestKind, cfg overheadConfig, kr *kindResult) {
	if cfg.Profile <= 0 {
		return
	}
	a, c := setupA, setupC
	if slices.Contains(profiledKinds, k.name) {
		p, err := profileSetup(env, client, g.procs[c], g.requests(k, c), cfg, k.name, g.meter(c))
		if err != nil {
			env.logf("overhead %s: no profile: %v", k.name, err)
		}
		kr.Profile = p
	}
	if k.name == allocKind {
		allocs, err := compareAllocs(env, client, [2]*caddyProcess{g.procs[a], g.procs[c]},
			[2]func(uint64) *http.Request{g.requests(k, a), g.requests(k, c)}, cfg, [2]cpuMeter{g.meter(a), g.meter(c)}, k.name)
		if err != nil {
			env.logf("overhead %s: no heap profiles: %v", k.name, err)
		}
		kr.Allocs = allocs
	}
}

// maxOtherLoad is the CPU, in cores, that processes outside the
// benchmark may use during a round before the round counts as disturbed.
const maxOtherLoad = 0.2

// round is one window per setup, taken one after another.
type round struct {
	setups []measurement
	other  float64 // the most CPU other processes used in a window, in cores
}

// keepQuietest returns the n rounds least disturbed by other processes,
// in the order they ran, as [setup][round].
func keepQuietest(rounds []round, n int) [][]measurement {
	order := make([]int, len(rounds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rounds[a].other, rounds[b].other) })
	order = order[:min(n, len(order))]
	slices.Sort(order)
	out := make([][]measurement, len(overheadSetups))
	for _, i := range order {
		for s, m := range rounds[i].setups {
			out[s] = append(out[s], m)
		}
	}
	return out
}

// profileSetup loads a Caddy process with one kind of request while its
// admin endpoint records a CPU profile, and summarises the profile.
func profileSetup(env *benchEnv, client *http.Client, p *caddyProcess, newRequest func(uint64) *http.Request,
	cfg overheadConfig, kind string, meter cpuMeter) (*profileSummary, error) {
	seconds := max(int(cfg.Profile.Round(time.Second)/time.Second), 1)
	env.logf("overhead %-8s profiling Caddy %s for %ds", kind, p.name, seconds)
	path := filepath.Join(env.dir, "profile-"+kind+".pb.gz")
	var wg sync.WaitGroup
	var loadErr error
	wg.Go(func() {
		_, loadErr = runLoad(client, newRequest, cfg.Concurrency, cfg.Warmup,
			time.Duration(seconds)*time.Second+cfg.Warmup, meter)
	})
	time.Sleep(cfg.Warmup)
	err := p.cpuProfile(context.Background(), seconds, path)
	wg.Wait()
	if err = firstErr(err, loadErr); err != nil {
		return nil, err
	}
	return summarizeProfile(path)
}

// measure condenses a window into its figures.
func measure(w window) measurement {
	return measurement{
		RPS: w.RPS(), P50: w.Percentile(0.50), P99: w.Percentile(0.99),
		CPUPerReq: w.CPUPerRequest(), Requests: w.Requests, Errors: w.Errors,
		Other: w.OtherLoad(),
	}
}

// selectKinds returns the kinds named in names, all of them for none.
func selectKinds(all []*requestKind, names []string) []*requestKind {
	if len(names) == 0 {
		return all
	}
	var out []*requestKind
	for _, k := range all {
		if slices.Contains(names, k.name) {
			out = append(out, k)
		}
	}
	return out
}
