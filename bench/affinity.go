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
	CacheTokens int // per engine; 0: twice an upstream's fair share of the working set
	Warmup, Run time.Duration
	Buckets     int
	Latency     latencyModel
	Policies    []string
}

// affinityResult is the affinity part's outcome.
type affinityResult struct {
	Config     affinityConfig
	MeanPrompt float64 // tokens per request, estimated from the workload
	WorkingSet float64 // tokens of all live conversations at once
	Policies   []policyResult
}

// runAffinity runs the workload once per policy, one after another, each
// against fresh engines and a fresh Caddy process.
func runAffinity(env *benchEnv, cfg affinityConfig) (*affinityResult, error) {
	w := newWorkload(cfg.Workload)
	res := &affinityResult{MeanPrompt: w.meanPromptTokens()}
	res.WorkingSet = res.MeanPrompt * float64(cfg.Workload.Clients)
	if cfg.CacheTokens == 0 {
		cfg.CacheTokens = int(2*res.WorkingSet/float64(cfg.Upstreams)) / cfg.BlockSize * cfg.BlockSize
	}
	res.Config = cfg
	env.logf("affinity: %d clients, %d upstreams (+1 at 75%%), about %.0f prompt tokens per request, working set %.0fk tokens, cache %dk tokens per upstream",
		cfg.Workload.Clients, cfg.Upstreams, res.MeanPrompt, res.WorkingSet/1000, cfg.CacheTokens/1000)

	ports, err := freePorts(cfg.Upstreams + 3)
	if err != nil {
		return nil, err
	}
	for _, name := range cfg.Policies {
		if !slices.Contains(policyNames(), name) {
			return nil, fmt.Errorf("affinity: unknown policy %q (known: %s)", name, strings.Join(policyNames(), ", "))
		}
	}
	for _, p := range affinityPolicies {
		if !slices.Contains(cfg.Policies, p.name) {
			continue
		}
		r, err := runPolicy(env, cfg, w, p, ports)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", p.name, err)
		}
		res.Policies = append(res.Policies, r)
	}
	if len(res.Policies) == 0 {
		return nil, fmt.Errorf("affinity: no policy to run")
	}
	return res, nil
}

// runPolicy runs the workload through one policy: a warm-up, then the
// measured run with its events.
func runPolicy(env *benchEnv, cfg affinityConfig, w *workload, p affinityPolicy, ports []int) (policyResult, error) {
	adminPort, sitePort := ports[0], ports[1]
	engines := make([]*engine, cfg.Upstreams+1)
	addrs := make([]string, len(engines))
	for i := range engines {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[2+i])
		engines[i] = &engine{
			name: fmt.Sprintf("u%d", i+1), addr: addrs[i], blockSize: cfg.BlockSize,
			blocks: cfg.CacheTokens / cfg.BlockSize, latency: cfg.Latency,
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
	t0 := start.Add(cfg.Warmup)
	a := &agents{
		w: w, client: newLoadClient(cfg.Workload.Clients),
		url:       fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", sitePort),
		blockSize: cfg.BlockSize, start: start, t0: t0, end: t0.Add(cfg.Run),
		tally: newTally(cfg.Run, cfg.Buckets),
	}
	if p.routed != nil {
		a.router, a.cookies = p.routed(engines, &pool), engineCookies(engines)
	}
	var clients sync.WaitGroup
	for _, c := range w.clients {
		clients.Go(func() { a.run(c) })
	}
	sampler := newLoadSampler(engines, &pool, a.tally, t0)
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() { sampler.run(stopSampling) })

	env.logf("affinity %-14s warm-up %s, then %s measured", p.name, cfg.Warmup, cfg.Run)
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
		sleepUntil(t0.Add(time.Duration(ev.at * float64(cfg.Run))))
		env.logf("affinity %-14s %3.0f%% %s", p.name, 100*ev.at, ev.label)
		if err := actions[i](); err != nil && eventErr == nil {
			eventErr = err
		}
	}
	sleepUntil(a.end)
	clients.Wait()
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
		env.logf("affinity %s: usage: %v", p.name, err)
	}
	if p.keeping {
		r.Decisions, err = stickyDecisions(proc)
		if err != nil {
			env.logf("affinity %s: decisions: %v", p.name, err)
		}
	}
	for i, ph := range r.Phases {
		env.logf("affinity %-14s phase %d: %6d requests, cached %s, failed %d, dropped %d, imbalance %.2f",
			p.name, i+1, ph.Requests, pct(ph.Ratio()), ph.Failed, ph.Dropped, ph.Imbalance)
	}
	env.logf("affinity %-14s overall: %6d requests, cached %s, failed %d, dropped %d, imbalance %.2f",
		p.name, r.Requests, pct(r.Ratio()), r.Failed, r.Dropped, r.Imbalance)
	r.FailureReasons, r.DropReasons = a.failures.String(), a.drops.String()
	if r.Failed > 0 {
		env.logf("affinity %-14s failures: %s", p.name, r.FailureReasons)
	}
	if r.Dropped > 0 {
		env.logf("affinity %-14s dropped connections (resent): %s", p.name, r.DropReasons)
	}
	return r, nil
}
