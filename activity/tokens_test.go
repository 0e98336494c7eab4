package activity

import (
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func TestTokensAndColdSessions(t *testing.T) {
	l := New(10, 1000)
	t0 := time.Unix(1_800_000_000, 0)
	answer := func(s int, i int, decision string, prompt, cached int64) {
		r := req(t0, i)
		r.Decision, r.PromptTokens, r.CachedTokens, r.UsageRead = decision, prompt, cached, true
		l.Record(sess(s), "", r)
		l.Account(r.Upstream, prompt, cached)
	}
	cold := func(s int) (bool, string) {
		sum, _, _ := l.Session(sess(s).Key)
		return sum.Cold, sum.ColdUpstream
	}

	// Session 1: placed, then hits that find the cache cold.
	answer(1, 0, session.DecisionNew, 5000, 0)
	answer(1, 1, session.DecisionHit, 6000, 0)
	answer(1, 2, session.DecisionHit, 7000, 0)
	if c, _ := cold(1); c {
		t.Fatalf("cold after two cold hits")
	}
	// A small prompt is no evidence either way.
	answer(1, 3, session.DecisionHit, 500, 0)
	if c, _ := cold(1); c {
		t.Fatalf("cold after a small prompt")
	}
	answer(1, 4, session.DecisionHit, 8000, 0)
	if c, up := cold(1); !c || up != "u1" {
		t.Fatalf("not cold at u1 after three cold hits: %v %q", c, up)
	}
	if n := l.ColdSessions()["u1"]; n != 1 {
		t.Fatalf("%d cold sessions at u1", n)
	}
	// A hit that finds the cache warms the session again.
	answer(1, 5, session.DecisionHit, 9000, 8192)
	if c, _ := cold(1); c || len(l.ColdSessions()) != 0 {
		t.Fatalf("still cold after a cached hit")
	}
	// A re-pin starts the count again.
	answer(2, 0, session.DecisionHit, 5000, 0)
	answer(2, 1, session.DecisionHit, 5000, 0)
	answer(2, 2, session.DecisionRepinFailed, 5000, 0)
	answer(2, 3, session.DecisionHit, 5000, 0)
	if c, _ := cold(2); c {
		t.Fatalf("a re-pin did not start the count again")
	}

	sum, _, _ := l.Session(sess(1).Key)
	if sum.PromptTokens != 5000+6000+7000+500+8000+9000 || sum.CachedTokens != 8192 || sum.Answers != 6 {
		t.Fatalf("session totals %+v", sum.Tokens)
	}
	ups := l.Upstreams()
	if len(ups) != 1 || ups[0].Upstream != "u1" || ups[0].PromptTokens != sum.PromptTokens+4*5000 || ups[0].CachedTokens != 8192 {
		t.Fatalf("upstream totals %+v", ups)
	}
	if r := ups[0].CachedRatio; r <= 0 || r >= 1 {
		t.Fatalf("ratio %v", r)
	}
}

func TestAccountBoundsUpstreams(t *testing.T) {
	l := New(10, 1000)
	for i := range maxUpstreams + 10 {
		l.Account(string(rune('a'+i%26))+string(rune(i)), 10, 1)
	}
	ups := l.Upstreams()
	if len(ups) != maxUpstreams+1 {
		t.Fatalf("%d upstreams accounted, want %d and %q", len(ups), maxUpstreams, OtherUpstreams)
	}
}
