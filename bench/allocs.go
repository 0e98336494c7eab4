package main

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
)

// allocComparison is what two setups allocate per request of one kind,
// from the heap profiles of their processes (/debug/pprof/allocs, a delta
// over a load run). Allocation is the part of a handler's cost that a CPU
// profile does not show where it belongs: the garbage collector pays it
// later, in the runtime's functions.
type allocComparison struct {
	Bytes   [2]float64 // allocated bytes per request
	Objects [2]float64 // allocated objects per request
	More    []allocSite
}

// allocSite is a function that allocates more per request in the
// compared setup than in the baseline.
type allocSite struct {
	Func  string
	Bytes float64 // per request, compared minus baseline
}

// compareAllocs loads each of two Caddy processes with the same requests
// for length and compares their allocations per request.
func compareAllocs(env *benchEnv, client *http.Client, procs [2]*caddyProcess, requests [2]func(uint64) *http.Request,
	cfg overheadConfig, meters [2]cpuMeter, kind string) (*allocComparison, error) {
	res := &allocComparison{}
	var sites [2]map[string]float64
	for i, p := range procs {
		env.logf("overhead %-8s heap profile of Caddy %s", kind, p.name)
		before := filepath.Join(env.dir, fmt.Sprintf("allocs-%s-%s-before.pb.gz", kind, p.name))
		after := filepath.Join(env.dir, fmt.Sprintf("allocs-%s-%s-after.pb.gz", kind, p.name))
		if err := p.fetchProfile(context.Background(), "allocs", before); err != nil {
			return nil, err
		}
		w, err := runLoad(client, requests[i], cfg.Concurrency, 0, cfg.Profile, meters[i])
		if err != nil {
			return nil, err
		}
		n := float64(max(w.Sent, 1))
		if err := p.fetchProfile(context.Background(), "allocs", after); err != nil {
			return nil, err
		}
		space, err := pprofTop(after, "-sample_index=alloc_space", "-base="+before)
		if err != nil {
			return nil, err
		}
		objects, err := pprofTop(after, "-sample_index=alloc_objects", "-base="+before)
		if err != nil {
			return nil, err
		}
		sites[i] = map[string]float64{}
		for _, e := range space.Entries {
			res.Bytes[i] += e.Flat / n
			sites[i][e.Func] += e.Flat / n
		}
		for _, e := range objects.Entries {
			res.Objects[i] += e.Flat / n
		}
	}
	for f, b := range sites[1] {
		if d := b - sites[0][f]; d > 0 {
			res.More = append(res.More, allocSite{Func: f, Bytes: d})
		}
	}
	slices.SortFunc(res.More, func(a, b allocSite) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return res, nil
}
