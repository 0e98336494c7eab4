package upstreams

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/sessionkeeping/caddy-session-keeping/internal/redistest"
)

// storePins is the number of sessions the store benchmarks pin.
const storePins = 10_000

// BenchmarkSelectHitStore compares a Select hit with the pins in memory
// against the pins in a redis-server on loopback, in the same run: the
// price of sharing pins across instances, a round trip per request.
func BenchmarkSelectHitStore(b *testing.B) {
	srv := redistest.Start(b)
	for _, store := range []string{"memory", "redis"} {
		b.Run(store, func(b *testing.B) {
			p := &StickySelection{TTL: caddy.Duration(time.Hour + 71*time.Second)}
			if store == "redis" {
				p.TTL += caddy.Duration(time.Second) // a local table of its own
				p.StoreRaw = caddyconfig.JSONModuleObject(&RedisStore{Addresses: []string{srv.Addr}, KeyPrefix: "bench:"}, "backend", "redis", nil)
			}
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			if err := p.Provision(ctx); err != nil {
				b.Fatal(err)
			}
			defer p.Cleanup()
			pool := newPool(8)
			reqs, sessions := sessionRequests(randomKeys(storePins, 7))
			for i := range reqs { // pin every session
				p.Select(pool, reqs[i], nil)
			}
			before := StoreErrors()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				j := i % storePins
				selectHit(b, p, pool, reqs[j], sessions[j])
			}
			if n := StoreErrors() - before; n > 0 {
				b.Fatalf("%d store errors: some hits were answered locally", n)
			}
		})
	}
}
