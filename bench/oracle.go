package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"
)

// The oracle routes through Caddy's cookie policy: a cookie that carries
// the HMAC of an upstream's dial address (with the policy's secret)
// selects that upstream, so the proxy path is the same as every other
// policy's, lb_retries included.
const (
	oracleCookie = "bench_oracle"
	oracleSecret = "bench-oracle-secret"
)

// oracle knows every engine's cache and load. It places the first request
// of a conversation on the least loaded engine (preferring, among equally
// loaded ones, the one holding more of the prompt) and sends every later
// request to the engine that holds the longest prefix of its prompt (the
// least loaded among equals). No balancer can find more of a
// conversation's prompt in cache than that, which makes it the yardstick.
type oracle struct {
	engines []*engine
	pool    *atomic.Int32 // how many engines are in Caddy's pool now
}

// newOracle returns an oracle over engines, whose pool is the first
// pool.Load() of them.
func newOracle(engines []*engine, pool *atomic.Int32) *oracle {
	return &oracle{engines: engines, pool: pool}
}

// router picks the engine of a request in the load generator, for the
// policies that route by knowledge Caddy lacks (the oracle) or by another
// gateway's algorithm (the peers); Caddy's cookie policy then sends the
// request there, with the same failover as every other policy.
type router interface {
	// route returns the index of the engine for the request, or -1.
	route(r routeRequest) int
}

// routeRequest is what a router knows of a request.
type routeRequest struct {
	session string   // the session header's value; "" when the client sends none
	blocks  []uint64 // the prompt's block hashes, as the engines cache them
	first   bool     // the request opens a conversation
}

// engineCookies returns the cookie value that selects each engine.
func engineCookies(engines []*engine) []string {
	var out []string
	for _, e := range engines {
		mac := hmac.New(sha256.New, []byte(oracleSecret))
		mac.Write([]byte(e.addr))
		out = append(out, hex.EncodeToString(mac.Sum(nil)))
	}
	return out
}

// route sends a prompt to its best engine.
func (o *oracle) route(r routeRequest) int {
	best, bestHit, bestLoad := -1, 0, int64(0)
	for i, e := range o.engines[:o.pool.Load()] {
		if !e.alive() {
			continue
		}
		hit, load := e.cachedBlocks(r.blocks), e.inFlight.Load()
		better := hit > bestHit || hit == bestHit && load < bestLoad
		if r.first {
			better = load < bestLoad || load == bestLoad && hit > bestHit
		}
		if best < 0 || better {
			best, bestHit, bestLoad = i, hit, load
		}
	}
	return best
}
