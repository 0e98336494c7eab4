package upstreams

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/internal/redistest"
	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// redisReplica provisions a policy with the redis store, as one Caddy
// instance of a fleet has it. Policies with different TTLs get different
// local tables, so replicas share nothing but Redis. The timeout is long,
// so that a loaded test machine does not make the store fail open where a
// test checks what is shared.
func redisReplica(t *testing.T, srv *redistest.Server, ttl time.Duration, configure func(*StickySelection, *RedisStore)) *StickySelection {
	t.Helper()
	store := &RedisStore{Addresses: []string{srv.Addr}, KeyPrefix: "test:", Timeout: caddy.Duration(2 * time.Second)}
	p := &StickySelection{TTL: caddy.Duration(ttl)}
	if configure != nil {
		configure(p, store)
	}
	p.StoreRaw = caddyconfig.JSONModuleObject(store, "backend", "redis", nil)
	provisionPolicy(t, p)
	if _, ok := p.store.(*RedisStore); !ok {
		t.Fatalf("store is %T, want *RedisStore", p.store)
	}
	return p
}

// pick runs one request of session k through p and returns the chosen
// upstream's dial address and the decision.
func pick(t *testing.T, p *StickySelection, pool reverseproxy.UpstreamPool, k session.Key) (string, string) {
	t.Helper()
	r, s := sessionRequest(k)
	up := p.Select(pool, r, nil)
	if up == nil {
		t.Fatalf("session %s: no upstream", k)
	}
	return up.Dial, s.Decision
}

func without(pool reverseproxy.UpstreamPool, dial string) reverseproxy.UpstreamPool {
	return slices.DeleteFunc(slices.Clone(pool), func(u *reverseproxy.Upstream) bool { return u.Dial == dial })
}

func TestRedisReplicasFollowRepins(t *testing.T) {
	srv := redistest.Start(t)
	// A named pin namespace, so that a replica whose pool lost a member
	// still reads the same pins.
	named := func(p *StickySelection, _ *RedisStore) { p.Name = "fleet" }
	a := redisReplica(t, srv, time.Hour+11*time.Second, named)
	b := redisReplica(t, srv, time.Hour+12*time.Second, named)
	if a.table == b.table {
		t.Fatal("the replicas share a local table")
	}
	pool := newPool(4)
	for _, k := range sessionKeys(40) {
		home, d := pick(t, a, pool, k)
		if d != session.DecisionNew {
			t.Fatalf("first request: decision %q, want new", d)
		}
		if got, d := pick(t, b, pool, k); got != home || d != session.DecisionHit {
			t.Fatalf("other replica: %s (%s), want %s (hit)", got, d, home)
		}

		// a re-pins the session because a request failed on home there;
		// b follows without having seen the failure.
		r, s := sessionRequest(k)
		if up := a.Select(pool, r, nil); up == nil || up.Dial != home {
			t.Fatalf("before failure: %v", up)
		}
		s.Balancer.Done(s, 502)
		key := a.store.(*RedisStore).key(PinKey{Namespace: Namespace("fleet", poolCandidates(pool)), Session: k})
		if v := srv.Do("GET", key); !strings.HasPrefix(v, home+"\n"+home+"\n") {
			t.Fatalf("after a 502 Redis holds %q, want %s avoiding itself", v, home)
		}
		moved, d := pick(t, a, pool, k)
		if moved == home || d != session.DecisionRepinFailed {
			t.Fatalf("after failure on a: %s (%s), want away from %s (repin_failed)", moved, d, home)
		}
		if got, d := pick(t, b, pool, k); got != moved || d != session.DecisionHit {
			t.Fatalf("other replica after re-pin: %s (%s), want %s (hit)", got, d, moved)
		}

		// And the other way round: b loses the upstream from its pool.
		smaller := without(pool, moved)
		again, d := pick(t, b, smaller, k)
		if again == moved || d != session.DecisionRepinRemoved {
			t.Fatalf("b without %s: %s (%s)", moved, again, d)
		}
		// a's pool still has the old upstream, and still follows b.
		if got, _ := pick(t, a, smaller, k); got != again {
			t.Fatalf("a after b's re-pin: %s, want %s", got, again)
		}
	}
}

func TestRedisConcurrentFirstRequestsAgree(t *testing.T) {
	srv := redistest.Start(t)
	// Random placement, so that two replicas left alone would disagree on
	// most sessions: only the store can make them agree.
	random := func(p *StickySelection, _ *RedisStore) {
		p.FallbackRaw = caddyconfig.JSONModuleObject(reverseproxy.RandomSelection{}, "policy", "random", nil)
	}
	a := redisReplica(t, srv, time.Hour+21*time.Second, random)
	b := redisReplica(t, srv, time.Hour+22*time.Second, random)
	pool := newPool(8)
	for i, k := range sessionKeys(300) {
		var ua, ub string
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; ua, _ = pickAsync(a, pool, k) }()
		go func() { defer wg.Done(); <-start; ub, _ = pickAsync(b, pool, k) }()
		close(start)
		wg.Wait()
		if ua == "" || ua != ub {
			t.Fatalf("session %d: replicas chose %q and %q", i, ua, ub)
		}
		key := a.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: k})
		if v := srv.Do("GET", key); v != ua {
			t.Fatalf("session %d: Redis holds %q, requests went to %q", i, v, ua)
		}
	}
}

// pickAsync is pick for goroutines: it reports instead of failing.
func pickAsync(p *StickySelection, pool reverseproxy.UpstreamPool, k session.Key) (string, string) {
	r, s := sessionRequest(k)
	up := p.Select(pool, r, nil)
	if up == nil {
		return "", s.Decision
	}
	return up.Dial, s.Decision
}

func TestRedisTTL(t *testing.T) {
	srv := redistest.Start(t)
	p := redisReplica(t, srv, time.Second, nil)
	pool := newPool(3)
	k := session.NewKey([]string{"tenant"}, "ttl")
	key := p.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: k})
	pttl := func() int {
		n, err := strconv.Atoi(srv.Do("PTTL", key)[1:])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	pick(t, p, pool, k)
	if n := pttl(); n <= 0 || n > 1000 {
		t.Fatalf("PTTL after pinning = %d, want in (0, 1000]", n)
	}
	time.Sleep(600 * time.Millisecond)
	if n := pttl(); n > 500 {
		t.Fatalf("PTTL after 600ms = %d, want at most 500", n)
	}
	if _, d := pick(t, p, pool, k); d != session.DecisionHit {
		t.Fatalf("decision %q, want hit", d)
	}
	if n := pttl(); n < 700 {
		t.Fatalf("PTTL after a hit = %d, want refreshed to about 1000", n)
	}
	time.Sleep(1100 * time.Millisecond)
	if v := srv.Do("EXISTS", key); v != ":0" {
		t.Fatalf("EXISTS after the TTL = %s, want :0", v)
	}
	if _, d := pick(t, p, pool, k); d != session.DecisionNew {
		t.Fatalf("after the TTL: decision %q, want new", d)
	}
}

func TestRedisKeysHoldNoClientValues(t *testing.T) {
	srv := redistest.Start(t)
	p := redisReplica(t, srv, time.Hour+31*time.Second, func(_ *StickySelection, s *RedisStore) {
		s.KeyPrefix = "gw:"
	})
	pool := newPool(2)
	k := session.NewKey([]string{"tenant-secret-token"}, "raw-conversation-id")
	home, _ := pick(t, p, pool, k)
	keys := srv.Keys("*")
	if len(keys) != 1 {
		t.Fatalf("keys %q, want one", keys)
	}
	if !regexp.MustCompile(`^gw:[0-9a-f]{16}:[0-9a-f]{32}$`).MatchString(keys[0]) {
		t.Fatalf("key %q is not prefix + namespace + session hash", keys[0])
	}
	if v := srv.Do("GET", keys[0]); v != home {
		t.Fatalf("value %q, want the upstream %q", v, home)
	}

	// The admin API's unpin removes the shared pin.
	if n := Unpin(k); n != 1 {
		t.Fatalf("Unpin = %d, want 1", n)
	}
	if v := srv.Do("GET", keys[0]); v != unpinned {
		t.Fatalf("value after Unpin %q, want the unpinned marker", v)
	}
	if _, d := pick(t, p, pool, k); d != session.DecisionNew {
		t.Fatalf("after Unpin: decision %q, want new", d)
	}
}

func TestRedisLostPinsAreWrittenBackButUnpinsAreNot(t *testing.T) {
	srv := redistest.Start(t)
	named := func(p *StickySelection, _ *RedisStore) { p.Name = "fleet" }
	a := redisReplica(t, srv, time.Hour+61*time.Second, named)
	b := redisReplica(t, srv, time.Hour+62*time.Second, named)
	pool := newPool(4)
	keys := sessionKeys(20)
	home := map[session.Key]string{}
	for _, k := range keys {
		home[k], _ = pick(t, a, pool, k)
		pick(t, b, pool, k) // b holds a copy of every pin
	}

	// Redis loses everything: the next request of each session writes its
	// pin back, and the session stays home.
	srv.Do("FLUSHALL")
	for _, k := range keys {
		if got, d := pick(t, b, pool, k); got != home[k] || d != session.DecisionHit {
			t.Fatalf("after FLUSHALL: %s (%s), want %s (hit)", got, d, home[k])
		}
		key := a.store.(*RedisStore).key(PinKey{Namespace: Namespace("fleet", poolCandidates(pool)), Session: k})
		if v := srv.Do("GET", key); v != home[k] {
			t.Fatalf("Redis holds %q, want the pin written back (%s)", v, home[k])
		}
	}

	// An unpin through a is not undone by b's copy.
	k := keys[0]
	if !a.store.Delete(PinKey{Namespace: Namespace("fleet", poolCandidates(pool)), Session: k}) {
		t.Fatal("Delete found no pin")
	}
	if _, ok := b.table.Peek(PinKey{Namespace: Namespace("fleet", poolCandidates(pool)), Session: k}); !ok {
		t.Fatal("b has no copy of the pin; the test proves nothing")
	}
	if _, d := pick(t, b, pool, k); d != session.DecisionNew {
		t.Fatalf("b after the unpin: decision %q, want new", d)
	}
}

func TestRedisFailsOpen(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = 100 * time.Millisecond
	p := redisReplica(t, srv, time.Hour+41*time.Second, func(_ *StickySelection, s *RedisStore) {
		s.Timeout = caddy.Duration(timeout)
	})
	pool := newPool(4)
	keys := sessionKeys(60)
	home := map[session.Key]string{}
	for _, k := range keys[:30] {
		home[k], _ = pick(t, p, pool, k)
	}
	// The slowest a request may be: the timeout plus slack for a shared,
	// loaded test machine. Without the timeout, a hung Redis would hold a
	// request for seconds.
	const bound = timeout + 400*time.Millisecond

	for _, outage := range []struct {
		name       string
		start, end func()
	}{
		{"stopped", srv.Stop, srv.Restart},
		{"hung", srv.Pause, srv.Resume},
	} {
		t.Run(outage.name, func(t *testing.T) {
			before := StoreErrors()
			outage.start()
			var slowest time.Duration
			deadline := time.Now().Add(700 * time.Millisecond) // spans a few retries
			for i := 0; time.Now().Before(deadline); i++ {
				k := keys[i%len(keys)]
				began := time.Now()
				got, _ := pick(t, p, pool, k)
				slowest = max(slowest, time.Since(began))
				if want, ok := home[k]; ok && got != want {
					t.Fatalf("during the outage a pinned session moved: %s, want %s", got, want)
				}
				home[k] = got
			}
			t.Logf("slowest request during the outage: %s (timeout %s)", slowest, timeout)
			if slowest > bound {
				t.Errorf("slowest request during the outage took %s, want at most %s", slowest, bound)
			}
			if StoreErrors() == before {
				t.Error("the store error count did not rise")
			}
			outage.end()

			// Redis answers again: new pins are written there.
			fresh := session.NewKey([]string{"after"}, outage.name)
			key := p.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: fresh})
			deadline = time.Now().Add(5 * time.Second)
			for srv.Do("EXISTS", key) != ":1" {
				if time.Now().After(deadline) {
					t.Fatal("no pin was written to Redis after it came back")
				}
				pick(t, p, pool, fresh)
				time.Sleep(50 * time.Millisecond)
			}
			// Sessions pinned before keep their upstream, written again
			// to an emptied Redis as they come back.
			for _, k := range keys[:30] {
				if got, _ := pick(t, p, pool, k); got != home[k] {
					t.Fatalf("after the outage: %s, want %s", got, home[k])
				}
				hk := p.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: k})
				if v := srv.Do("GET", hk); v != home[k] {
					t.Fatalf("Redis holds %q for a session on %s", v, home[k])
				}
			}
		})
	}
}

func TestPinEncoding(t *testing.T) {
	until := time.UnixMilli(1_800_000_000_123)
	for _, tc := range []struct {
		pin  Pin
		want string
	}{
		{Pin{Upstream: "10.0.0.1:8000"}, "10.0.0.1:8000"},
		{Pin{Upstream: "a:1", Avoid: "b:2", AvoidUntil: until}, "a:1\nb:2\n1800000000123"},
	} {
		v := encodePin(tc.pin.Upstream, tc.pin.Avoid, tc.pin.AvoidUntil)
		if v != tc.want {
			t.Errorf("encodePin(%+v) = %q, want %q", tc.pin, v, tc.want)
		}
		got, err := decodePin(v)
		if err != nil || got.Upstream != tc.pin.Upstream || got.Avoid != tc.pin.Avoid || !got.AvoidUntil.Equal(tc.pin.AvoidUntil) {
			t.Errorf("decodePin(%q) = %+v, %v", v, got, err)
		}
	}
	for _, bad := range []string{"", "\nb:2\n1", "a:1\n", "a:1\nb:2", "a:1\nb:2\nsoon", "a:1\n\n5"} {
		if p, err := decodePin(bad); err == nil {
			t.Errorf("decodePin(%q) = %+v, want an error", bad, p)
		}
	}
}

func TestRedisStoreValidate(t *testing.T) {
	for _, tc := range []struct {
		store RedisStore
		want  string
	}{
		{RedisStore{Timeout: -1}, "timeout"},
		{RedisStore{DB: -1}, "db"},
		{RedisStore{DB: 1, Addresses: []string{"a:1", "b:2"}}, "db"},
		{RedisStore{Addresses: []string{""}}, "address"},
	} {
		err := tc.store.Validate()
		if err == nil || !regexp.MustCompile("^"+tc.want+":").MatchString(err.Error()) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", tc.store, err, tc.want)
		}
	}
	raw, _ := json.Marshal(RedisStore{Addresses: []string{"not-an-address"}})
	p := &StickySelection{TTL: caddy.Duration(time.Hour + 51*time.Second), StoreRaw: json.RawMessage(fmt.Sprintf(`{"backend":"redis",%s`, raw[1:]))}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	defer cancel()
	err := p.Provision(ctx)
	if err == nil || !regexp.MustCompile(`store: .*address: "not-an-address"`).MatchString(err.Error()) {
		t.Fatalf("Provision = %v, want an address error", err)
	}
	// Caddy cleans up a module whose Provision failed.
	if err := p.Cleanup(); err != nil {
		t.Fatalf("Cleanup after a failed Provision: %v", err)
	}
}

func TestRedisUnreadableValueIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	p := redisReplica(t, srv, time.Hour+81*time.Second, nil)
	pool := newPool(3)
	k := session.NewKey([]string{"tenant"}, "garbled")
	key := p.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: k})
	srv.Do("SET", key, "a:1\nnot a pin")

	before := StoreErrors()
	up, d := pick(t, p, pool, k)
	if d != session.DecisionNew {
		t.Fatalf("decision %q for an unreadable pin, want new", d)
	}
	if v := srv.Do("GET", key); v != up {
		t.Fatalf("Redis holds %q, want the new pin %q", v, up)
	}
	if StoreErrors() == before {
		t.Fatal("the unreadable value was not counted as a store error")
	}
	// Redis answered all along: the next session's pin goes there too.
	other := session.NewKey([]string{"tenant"}, "next")
	pick(t, p, pool, other)
	if v := srv.Do("EXISTS", p.store.(*RedisStore).key(PinKey{Namespace: Namespace("", poolCandidates(pool)), Session: other})); v != ":1" {
		t.Fatal("an unreadable value made the store stop using Redis")
	}
}
