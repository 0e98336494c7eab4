package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// affinityConfig sets the affinity part's size.
type affinityConfig struct {
	Upstreams   int
	Workload    workloadConfig
	BlockSize   int
	CacheTokens int // per engine in the events run; 0: twice an upstream's fair share of the working set
	Seqs        int // sequences an engine serves at once
	StreamEvery int // generated tokens per streamed event
	Warmup, Run time.Duration
	Buckets     int
	Latency     latencyModel
	Policies    []string

	// The cache-pressure scenarios: the working set over the fleet's
	// whole cache, and the policies compared at each.
	Pressures                   []float64
	ScenarioPolicies            []string
	ScenarioWarmup, ScenarioRun time.Duration
}

// affinityResult is the affinity part's outcome.
type affinityResult struct {
	Config     affinityConfig
	MeanPrompt float64 // tokens per request, estimated from the workload
	WorkingSet float64 // tokens of all live conversations at once
	Policies   []policyResult
	Scenarios  []scenarioResult
}

// scenarioResult is one cache-pressure scenario: every policy over the
// same engines with caches of the same size.
type scenarioResult struct {
	Pressure    float64 // the working set over the fleet's cache, as configured
	CacheTokens int     // per engine
	Policies    []policyResult
}

// runShape is what differs between the affinity part's runs.
type runShape struct {
	label       string // in progress lines
	cacheTokens int    // per engine
	warmup, run time.Duration
	events      bool // the kill, restore, reload and scale-out
}

// runAffinity runs the workload once per policy, one after another, each
// against fresh engines and a fresh Caddy process: first through the
// events, then in each cache-pressure scenario.
func runAffinity(env *benchEnv, cfg affinityConfig) (*affinityResult, error) {
	w := newWorkload(cfg.Workload)
	res := &affinityResult{MeanPrompt: w.meanPromptTokens()}
	res.WorkingSet = res.MeanPrompt * float64(cfg.Workload.Clients)
	if cfg.CacheTokens == 0 {
		cfg.CacheTokens = cacheFor(res.WorkingSet, 0.5, cfg.Upstreams, cfg.BlockSize)
	}
	res.Config = cfg
	env.logf("affinity: %d clients, %d upstreams (+1 at 75%%), about %.0f prompt tokens per request, working set %.0fk tokens, cache %dk tokens per upstream",
		cfg.Workload.Clients, cfg.Upstreams, res.MeanPrompt, res.WorkingSet/1000, cfg.CacheTokens/1000)

	ports, err := freePorts(cfg.Upstreams + 3)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Concat(cfg.Policies, cfg.ScenarioPolicies) {
		if !slices.Contains(policyNames(), name) {
			return nil, fmt.Errorf("affinity: unknown policy %q (known: %s)", name, strings.Join(policyNames(), ", "))
		}
	}
	events := runShape{label: "events", cacheTokens: cfg.CacheTokens, warmup: cfg.Warmup, run: cfg.Run, events: true}
	if res.Policies, err = runPolicies(env, cfg, w, cfg.Policies, events, ports); err != nil {
		return nil, err
	}
	for _, pressure := range cfg.Pressures {
		sc := scenarioResult{Pressure: pressure, CacheTokens: cacheFor(res.WorkingSet, pressure, cfg.Upstreams, cfg.BlockSize)}
		shape := runShape{label: fmt.Sprintf("pressure %g×", pressure), cacheTokens: sc.CacheTokens, warmup: cfg.ScenarioWarmup, run: cfg.ScenarioRun}
		if sc.Policies, err = runPolicies(env, cfg, w, cfg.ScenarioPolicies, shape, ports); err != nil {
			return nil, err
		}
		res.Scenarios = append(res.Scenarios, sc)
	}
	if len(res.Policies) == 0 && len(res.Scenarios) == 0 {
		return nil, fmt.Errorf("affinity: no policy to run")
	}
	return res, nil
}

// cacheFor returns the cache of each of n engines, in whole blocks, for a
// working set that is pressure times the fleet's cache.
func cacheFor(workingSet, pressure float64, n, block int) int {
	return int(workingSet/pressure/float64(n)) / block * block
}

// runPolicies runs the named policies, in the order they are known.
func runPolicies(env *benchEnv, cfg affinityConfig, w *workload, names []string, shape runShape, ports []int) ([]policyResult, error) {
	var out []policyResult
	for _, p := range affinityPolicies {
		if !slices.Contains(names, p.name) {
			continue
		}
		r, err := runPolicy(env, cfg, w, p, shape, ports)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %v", p.name, shape.label, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// runPolicy runs the workload through one policy: a warm-up, then the
// measured run, with its events if the shape has them.
func runPolicy(env *benchEnv, cfg affinityConfig, w *workload, p affinityPolicy, shape runShape, ports []int) (policyResult, error) {
	adminPort, sitePort := ports[0], ports[1]
	upstreams := cfg.Upstreams
	if shape.events {
		upstreams++ // the one added at 75 %
	}
	engines := make([]*engine, upstreams)
	addrs := make([]string, len(engines))
	computed := newBlockSet()
	for i := range engines {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[2+i])
		engines[i] = &engine{
			name: fmt.Sprintf("u%d", i+1), addr: addrs[i], blockSize: cfg.BlockSize,
			blocks: shape.cacheTokens / cfg.BlockSize, seqs: cfg.Seqs, streamEvery: cfg.StreamEvery,
			latency: cfg.Latency, computed: computed,
		}
	}
	defer func() {
		for _, e := range engines {
			e.stop()
		}
	}()
	for _, e := range engines[:cfg.Upstreams] {
		if err := e.start(); err != nil {
			return policyResult{}, err
		}
	}
	var pool atomic.Int32
	pool.Store(int32(cfg.Upstreams))
	config := func(n int) string { return caddyfile(adminPort, sitePort, p.site(addrs[:n])) }
	proc, err := startCaddy(env.caddy, env.dir, "affinity-"+p.name, config(cfg.Upstreams), adminPort, sitePort)
	if err != nil {
		return policyResult{}, err
	}
	defer proc.stop()

	start := time.Now()
	t0 := start.Add(shape.warmup)
	a := &agents{
		w: w, client: newLoadClient(cfg.Workload.Clients),
		url:       fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", sitePort),
		blockSize: cfg.BlockSize, start: start, t0: t0, end: t0.Add(shape.run),
		tally:   newTally(shape.run, cfg.Buckets),
		context: make([]atomic.Int64, len(w.clients)),
	}
	if p.routed != nil {
		a.router, a.cookies = p.routed(engines, &pool), engineCookies(engines)
	}
	var clients sync.WaitGroup
	for _, c := range w.clients {
		clients.Go(func() { a.run(c) })
	}
	sampler := newLoadSampler(engines, &pool, a.tally, t0, a.workingSet)
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() { sampler.run(stopSampling) })

	name := fmt.Sprintf("%-14s %s", p.name, shape.label)
	env.logf("affinity %s: warm-up %s, then %s measured", name, shape.warmup, shape.run)
	actions := []func() error{
		func() error { engines[victim].stop(); return nil },
		engines[victim].start,
		func() error { return proc.load(config(cfg.Upstreams)) },
		func() error {
			if err := engines[cfg.Upstreams].start(); err != nil {
				return err
			}
			if err := proc.load(config(cfg.Upstreams + 1)); err != nil {
				return err
			}
			pool.Store(int32(cfg.Upstreams + 1))
			return nil
		},
	}
	var eventErr error
	for i, ev := range runEvents {
		if !shape.events {
			break
		}
		sleepUntil(t0.Add(time.Duration(ev.at * float64(shape.run))))
		env.logf("affinity %s: %3.0f%% %s", name, 100*ev.at, ev.label)
		if err := actions[i](); err != nil && eventErr == nil {
			eventErr = err
		}
	}
	sleepUntil(a.end)
	clients.Wait()
	// Connections the client dialled but never used are new to Caddy's
	// server, which would wait 5 s for them when it stops.
	a.client.CloseIdleConnections()
	close(stopSampling)
	sampling.Wait()
	if eventErr != nil {
		return policyResult{}, eventErr
	}

	r := summarize(p.name, a.tally, sampler)
	r.DroppedAtReload = a.dropsAtReload.Load()
	for _, e := range engines {
		r.EnginePrompt += e.reportedPrompt.Load()
		r.EngineCached += e.reportedCached.Load()
		r.PerEngine = append(r.PerEngine, engineTotals{e.name, e.served.Load(), e.reportedPrompt.Load()})
	}
	if r.PluginPrompt, r.PluginCached, err = pluginUsage(proc); err != nil {
		env.logf("affinity %s: usage: %v", name, err)
	}
	if p.keeping {
		r.Decisions, err = stickyDecisions(proc)
		if err != nil {
			env.logf("affinity %s: decisions: %v", name, err)
		}
	}
	if shape.events {
		for i, ph := range r.Phases {
			env.logf("affinity %s: phase %d: %6d requests, cached %s, failed %d, dropped %d, cut %d, imbalance %.2f",
				name, i+1, ph.Requests, pct(ph.Ratio()), ph.Failed, ph.Dropped, ph.Cut, ph.Imbalance)
		}
	}
	env.logf("affinity %s: %6d requests (%.0f/s), cached %s of %s, TTFT p50 %s p99 %s, failed %d, dropped %d, cut %d, imbalance %.2f, working set %.0fk",
		name, r.Requests, r.Throughput, pct(r.Ratio()), pct(r.Ceiling()), ms(r.TTFT50), ms(r.TTFT99), r.Failed, r.Dropped, r.Cut, r.Imbalance, r.WorkingSet/1000)
	r.FailureReasons, r.DropReasons, r.CutReasons = a.failures.String(), a.drops.String(), a.cuts.String()
	if r.Failed > 0 {
		env.logf("affinity %s: failures: %s", name, r.FailureReasons)
	}
	if r.Dropped > 0 {
		env.logf("affinity %s: dropped connections (resent): %s", name, r.DropReasons)
	}
	if r.Cut > 0 {
		env.logf("affinity %s: answers cut off (resent): %s", name, r.CutReasons)
	}
	return r, nil
}
