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
	cookies []string      // the cookie value that selects each engine
}

// newOracle returns an oracle over engines, whose pool is the first
// pool.Load() of them.
func newOracle(engines []*engine, pool *atomic.Int32) *oracle {
	o := &oracle{engines: engines, pool: pool}
	for _, e := range engines {
		mac := hmac.New(sha256.New, []byte(oracleSecret))
		mac.Write([]byte(e.addr))
		o.cookies = append(o.cookies, hex.EncodeToString(mac.Sum(nil)))
	}
	return o
}

// route returns the cookie value that sends a prompt of blocks to its
// best engine; first is whether the prompt opens a conversation.
func (o *oracle) route(blocks []uint64, first bool) string {
	best, bestHit, bestLoad := -1, 0, int64(0)
	for i, e := range o.engines[:o.pool.Load()] {
		if !e.alive() {
			continue
		}
		hit, load := e.cachedBlocks(blocks), e.inFlight.Load()
		better := hit > bestHit || hit == bestHit && load < bestLoad
		if first {
			better = load < bestLoad || load == bestLoad && hit > bestHit
		}
		if best < 0 || better {
			best, bestHit, bestLoad = i, hit, load
		}
	}
	if best < 0 {
		return ""
	}
	return o.cookies[best]
}
