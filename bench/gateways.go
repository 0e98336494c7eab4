package main

import (
	"fmt"
	"net/http"
)

// gateways are the Caddy processes of the overhead part, one per setup,
// in front of the same upstreams.
type gateways struct {
	procs []*caddyProcess
	bases []string // each one's site, as a URL prefix
	pids  []int
}

// startGateways starts one Caddy process per setup over upstreams (dial
// addresses separated by spaces).
func startGateways(env *benchEnv, upstreams string) (*gateways, error) {
	ports, err := freePorts(2 * len(overheadSetups))
	if err != nil {
		return nil, err
	}
	g := &gateways{}
	for i, s := range overheadSetups {
		admin, site := ports[2*i], ports[2*i+1]
		p, err := startCaddy(env.caddy, env.dir, "overhead-"+s.id, caddyfile(admin, site, s.site(upstreams)), admin, site)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.procs = append(g.procs, p)
		g.bases = append(g.bases, fmt.Sprintf("http://127.0.0.1:%d", site))
		g.pids = append(g.pids, p.cmd.Process.Pid)
	}
	return g, nil
}

// stop stops every process.
func (g *gateways) stop() {
	for _, p := range g.procs {
		p.stop()
	}
}

// meter reads the CPU time of setup i against the rest of the machine.
func (g *gateways) meter(i int) cpuMeter {
	return cpuMeter{target: g.pids[i], ours: g.pids}
}

// requests returns the requests of kind k aimed at setup i.
func (g *gateways) requests(k *requestKind, i int) func(uint64) *http.Request {
	return func(n uint64) *http.Request { return k.request(g.bases[i], n) }
}
