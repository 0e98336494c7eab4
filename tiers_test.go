package sessionkeeping

import (
	"fmt"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// TestTiersOverflowAndReturn: two cheap upstreams that take two requests
// each, and an expensive one. Without overflow the expensive one gets
// nothing; under load beyond the cheap tier's room, the overflow goes to
// it (spill_tier); and the sessions that overflowed are back on the cheap
// tier as soon as it has room.
func TestTiersOverflowAndReturn(t *testing.T) {
	f := newFleet(t, 3)
	cheap1, cheap2, pricey := f.backends[0], f.backends[1], f.backends[2]
	g := startGateway(t, proxyBlock(f, fmt.Sprintf(`
		lb_policy session_sticky {
			tier %s %s
			tier %s
		}
		unhealthy_request_count 2`, cheap1.addr(), cheap2.addr(), pricey.addr())))

	// No overflow: sessions and sessionless requests, one at a time.
	for s := range 20 {
		for turn := 1; turn <= 3; turn++ {
			if r := g.call(chatPath, fmt.Sprintf("calm-%d", s), turn, false); !r.ok() || r.upstream == pricey.name {
				t.Fatalf("calm session %d turn %d: %v", s, turn, r)
			}
		}
		if r := g.call("/v1/models", "", 1, false); !r.ok() || r.upstream == pricey.name {
			t.Fatalf("sessionless request: %v", r)
		}
	}

	// Overflow: four slow requests fill the cheap tier (two each).
	entered, releaseAll := f.holdSlow(t, 4)
	slow := make(chan reply, 4)
	for i := range 4 {
		go func() { slow <- g.call("/slow", fmt.Sprintf("slow-%d", i), 1, false) }()
	}
	for range 4 {
		receive(t, entered, "the slow requests to fill the cheap tier")
	}
	spilled := map[string]bool{}
	for s := range 6 {
		sid := fmt.Sprintf("burst-%d", s)
		r := g.call(chatPath, sid, 1, false)
		if !r.ok() || r.upstream != pricey.name || r.decision != session.DecisionSpillTier {
			t.Fatalf("%s while the cheap tier is full: %v, want spill_tier to %s", sid, r, pricey.name)
		}
		spilled[sid] = true
	}
	for _, r := range []reply{g.call("/v1/models", "", 1, false)} {
		if !r.ok() || r.upstream != pricey.name {
			t.Fatalf("a sessionless request while the cheap tier is full: %v, want %s", r, pricey.name)
		}
	}
	releaseAll()
	for range 4 {
		if r := <-slow; !r.ok() || r.upstream == pricey.name {
			t.Fatalf("a slow request: %v", r)
		}
	}

	// Room again: the sessions that overflowed are back on the cheap tier
	// with their next request, as hits on the pins they got there.
	eventually(t, 5*time.Second, "the cheap tier to have room", func() bool {
		r := g.call(chatPath, "probe", 1, false)
		return r.ok() && r.upstream != pricey.name
	})
	for sid := range spilled {
		r := g.call(chatPath, sid, 2, false)
		if !r.ok() || r.upstream == pricey.name || r.decision != session.DecisionHit {
			t.Errorf("%s after the burst: %v, want a hit on the cheap tier", sid, r)
		}
	}
}
