package upstreams

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// pinKey returns the key of test session i in namespace 1.
func pinKey(i int) PinKey {
	return PinKey{Namespace: 1, Session: session.NewKey(nil, fmt.Sprintf("session-%d", i))}
}

// checkInvariants verifies the internal structure of every shard: the LRU
// list holds exactly len entries linked both ways, the index holds exactly
// one slot per entry, each findable by its key, and no shard is over its
// bound.
func checkInvariants(t *testing.T, pt *PinTable) {
	t.Helper()
	for si := range pt.shards {
		s := &pt.shards[si]
		s.mu.Lock()
		n := 0
		prev := int32(nilIndex)
		for i := s.head; i != nilIndex; i = s.at(i).next {
			if s.at(i).prev != prev {
				t.Errorf("shard %d: entry %d has prev %d, want %d", si, i, s.at(i).prev, prev)
			}
			if pos, j := s.find(s.at(i).key(), hashKey(s.at(i).key())); j != i || pos < 0 {
				t.Errorf("shard %d: entry %d found as %d at slot %d", si, i, j, pos)
			}
			prev = i
			n++
			if n > s.len+1 {
				t.Fatalf("shard %d: LRU list longer than len %d (a cycle?)", si, s.len)
			}
		}
		if prev != s.tail {
			t.Errorf("shard %d: list ends at %d, tail is %d", si, prev, s.tail)
		}
		slots := 0
		for _, v := range s.slots {
			if v != 0 {
				slots++
			}
		}
		if n != s.len || slots != s.len {
			t.Errorf("shard %d: len %d, list %d, index slots %d", si, s.len, n, slots)
		}
		if s.len > s.max {
			t.Errorf("shard %d: %d pins over its bound %d", si, s.len, s.max)
		}
		s.mu.Unlock()
	}
}

func TestPinTableSlidingTTL(t *testing.T) {
	clock := newFakeClock()
	pt := NewPinTable(10*time.Second, 100, clock.Now)
	used, idle, peeked := pinKey(1), pinKey(2), pinKey(3)
	for _, k := range []PinKey{used, idle, peeked} {
		if got := pt.PinIfAbsent(k, "a:1"); got != "a:1" {
			t.Fatalf("PinIfAbsent on an empty table = %q", got)
		}
	}

	clock.Advance(6 * time.Second)
	if p, ok := pt.Get(used); !ok || p.Upstream != "a:1" {
		t.Fatalf("Get within the TTL = %+v, %v", p, ok)
	}
	if _, ok := pt.Peek(peeked); !ok {
		t.Fatal("Peek within the TTL found nothing")
	}

	// 12s after pinning: past the original deadline. The pin used at 6s
	// lives; the idle one, and the one only peeked at, are gone.
	clock.Advance(6 * time.Second)
	if _, ok := pt.Get(used); !ok {
		t.Fatal("a pin used within the TTL expired at its original deadline")
	}
	if _, ok := pt.Peek(idle); ok {
		t.Fatal("an idle pin outlived its TTL")
	}
	if _, ok := pt.Peek(peeked); ok {
		t.Fatal("Peek refreshed the TTL")
	}
	if n := pt.Len(); n != 3 {
		t.Fatalf("Len before Sweep = %d, want 3 (expired pins are counted until swept)", n)
	}
	if n := pt.Sweep(); n != 2 {
		t.Fatalf("Sweep removed %d pins, want 2", n)
	}
	if n := pt.Len(); n != 1 {
		t.Fatalf("Len after Sweep = %d, want 1", n)
	}

	// The TTL is measured from the last use: at exactly ttl it is over.
	clock.Advance(10 * time.Second)
	if _, ok := pt.Get(used); ok {
		t.Fatal("a pin idle for a whole TTL is still live")
	}
	if n := pt.Len(); n != 0 {
		t.Fatalf("Get of an expired pin left it in the table: Len = %d", n)
	}

	// An expired pin is replaced by PinIfAbsent, not followed.
	pt.PinIfAbsent(idle, "a:1")
	clock.Advance(11 * time.Second)
	if got := pt.PinIfAbsent(idle, "b:2"); got != "b:2" {
		t.Fatalf("PinIfAbsent over an expired pin = %q, want the new upstream", got)
	}
	checkInvariants(t, pt)
}

func TestPinTableSweepStopsAtLivePins(t *testing.T) {
	clock := newFakeClock()
	pt := NewPinTable(time.Minute, 10_000, clock.Now)
	for i := 0; i < 1000; i++ {
		pt.PinIfAbsent(pinKey(i), "a:1")
	}
	clock.Advance(30 * time.Second)
	for i := 1000; i < 1500; i++ {
		pt.PinIfAbsent(pinKey(i), "a:1")
	}
	for i := 0; i < 100; i++ {
		pt.Get(pinKey(i)) // refreshed: these stay
	}
	clock.Advance(40 * time.Second)
	if n := pt.Sweep(); n != 900 {
		t.Fatalf("Sweep removed %d, want 900", n)
	}
	if n := pt.Len(); n != 600 {
		t.Fatalf("Len = %d, want 600", n)
	}
	for i := 0; i < 1500; i++ {
		_, ok := pt.Peek(pinKey(i))
		if want := i < 100 || i >= 1000; ok != want {
			t.Fatalf("pin %d live = %v, want %v", i, ok, want)
		}
	}
	checkInvariants(t, pt)
}

func TestPinTableLRUEviction(t *testing.T) {
	pt := NewPinTable(time.Hour, 3, nil)
	k1, k2, k3, k4, k5 := pinKey(1), pinKey(2), pinKey(3), pinKey(4), pinKey(5)
	pt.PinIfAbsent(k1, "a:1")
	pt.PinIfAbsent(k2, "a:1")
	pt.PinIfAbsent(k3, "a:1")
	if _, ok := pt.Get(k1); !ok { // touched: now the most recently used
		t.Fatal("k1 missing")
	}
	pt.PinIfAbsent(k4, "a:1") // full: the least recently used, k2, goes
	if _, ok := pt.Peek(k2); ok {
		t.Fatal("the least recently used pin was not evicted")
	}
	for _, k := range []PinKey{k1, k3, k4} {
		if _, ok := pt.Peek(k); !ok {
			t.Fatalf("pin %v evicted instead of the least recently used", k.Session)
		}
	}
	if n, e := pt.Len(), pt.Evictions(); n != 3 || e != 1 {
		t.Fatalf("Len %d, Evictions %d; want 3, 1", n, e)
	}

	// Peek and MarkFailed do not count as use; Repin does.
	pt.Peek(k3)
	pt.MarkFailed(k3, "a:1", time.Now().Add(time.Minute))
	pt.Repin(k1, "b:2", "", time.Time{})
	pt.PinIfAbsent(k5, "a:1") // order was k1, k4, k3: k3 goes
	if _, ok := pt.Peek(k3); ok {
		t.Fatal("Peek or MarkFailed protected a pin from eviction")
	}
	if _, ok := pt.Peek(k1); !ok {
		t.Fatal("Repin did not count as use")
	}
	if e := pt.Evictions(); e != 2 {
		t.Fatalf("Evictions = %d, want 2", e)
	}
	checkInvariants(t, pt)
}

func TestPinTableBoundIsExact(t *testing.T) {
	for _, bound := range []int{1, 7, 1000, 100_000} {
		pt := NewPinTable(time.Hour, bound, nil)
		inserts := bound + bound/2 + 10
		for i := 0; i < inserts; i++ {
			pt.PinIfAbsent(pinKey(i), "a:1")
		}
		// The shards' bounds add up to the table's, never more.
		sum := 0
		for i := range pt.shards {
			sum += pt.shards[i].max
		}
		if sum != bound {
			t.Errorf("bound %d: shard bounds add up to %d", bound, sum)
		}
		if n := pt.Len(); n > bound || n < bound*9/10 {
			t.Errorf("bound %d: Len = %d after %d inserts", bound, n, inserts)
		}
		if e := pt.Evictions(); int(e) != inserts-pt.Len() {
			t.Errorf("bound %d: Evictions = %d, want %d", bound, e, inserts-pt.Len())
		}
		checkInvariants(t, pt)
	}
}

func TestPinIfAbsentConcurrentFirstRequests(t *testing.T) {
	pt := NewPinTable(time.Hour, 10_000, nil)
	const goroutines = 32
	for i := 0; i < 50; i++ {
		k := pinKey(i)
		start := make(chan struct{})
		got := make([]string, goroutines)
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Go(func() {
				<-start
				got[g] = pt.PinIfAbsent(k, fmt.Sprintf("up%d:80", g))
			})
		}
		close(start)
		wg.Wait()
		p, ok := pt.Peek(k)
		if !ok {
			t.Fatal("no pin after PinIfAbsent")
		}
		for g, up := range got {
			if up != p.Upstream {
				t.Fatalf("session %d: goroutine %d got %q, the pin is %q", i, g, up, p.Upstream)
			}
		}
	}
}

func TestPinTableRepinAndCooldown(t *testing.T) {
	clock := newFakeClock()
	pt := NewPinTable(time.Hour, 100, clock.Now)
	k := pinKey(1)
	pt.PinIfAbsent(k, "a:1")

	// A failure marks the upstream to avoid but leaves the pin in place.
	pt.MarkFailed(k, "a:1", clock.Now().Add(30*time.Second+500*time.Millisecond))
	p, _ := pt.Peek(k)
	if p.Upstream != "a:1" || !p.Avoids("a:1", clock.Now()) || p.Avoids("b:2", clock.Now()) {
		t.Fatalf("after MarkFailed: %+v", p)
	}
	clock.Advance(30 * time.Second)
	if p, _ := pt.Peek(k); !p.Avoids("a:1", clock.Now().Add(400*time.Millisecond)) {
		t.Fatal("the cooldown was cut short")
	}

	// Repin moves the pin and records the upstream to avoid.
	until := clock.Now().Add(30 * time.Second)
	pt.Repin(k, "b:2", "a:1", until)
	p, _ = pt.Peek(k)
	if p.Upstream != "b:2" || p.Avoid != "a:1" || !p.Avoids("a:1", clock.Now()) {
		t.Fatalf("after Repin: %+v", p)
	}
	// Handing the pin's own cooldown back (as Select does when it moves a
	// pin) does not stretch it.
	for i := 0; i < 5; i++ {
		p, _ := pt.Peek(k)
		pt.Repin(k, "b:2", p.Avoid, p.AvoidUntil)
	}
	if p2, _ := pt.Peek(k); !p2.AvoidUntil.Equal(p.AvoidUntil) {
		t.Fatalf("repeated Repin moved the cooldown from %v to %v", p.AvoidUntil, p2.AvoidUntil)
	}
	// A Repin without an upstream to avoid keeps a running cooldown...
	pt.Repin(k, "c:3", "", time.Time{})
	if p, _ := pt.Peek(k); p.Upstream != "c:3" || !p.Avoids("a:1", clock.Now()) {
		t.Fatalf("Repin dropped a running cooldown: %+v", p)
	}
	// ...which ends on time, and is then cleared.
	clock.Advance(31 * time.Second)
	if p, _ := pt.Peek(k); p.Avoids("a:1", clock.Now()) {
		t.Fatalf("the cooldown outlived its deadline: %+v", p)
	}
	pt.Repin(k, "d:4", "", time.Time{})
	if p, _ := pt.Peek(k); p.Upstream != "d:4" || p.Avoid != "" {
		t.Fatalf("after the cooldown: %+v", p)
	}

	// Repin of a session without a pin pins it; MarkFailed does not.
	pt.Repin(pinKey(2), "e:5", "", time.Time{})
	if p, ok := pt.Peek(pinKey(2)); !ok || p.Upstream != "e:5" {
		t.Fatalf("Repin without a pin: %+v, %v", p, ok)
	}
	pt.MarkFailed(pinKey(3), "a:1", clock.Now().Add(time.Minute))
	if _, ok := pt.Peek(pinKey(3)); ok {
		t.Fatal("MarkFailed created a pin")
	}
	checkInvariants(t, pt)
}

func TestPinAvoids(t *testing.T) {
	now := time.Now()
	p := Pin{Upstream: "b:2", Avoid: "a:1", AvoidUntil: now.Add(time.Second)}
	switch {
	case !p.Avoids("a:1", now):
		t.Error("does not avoid the failed upstream during the cooldown")
	case p.Avoids("b:2", now):
		t.Error("avoids another upstream")
	case p.Avoids("a:1", now.Add(time.Second)):
		t.Error("avoids the failed upstream after the cooldown")
	case (Pin{Upstream: "a:1"}).Avoids("", now):
		t.Error("a pin without a failure avoids the empty name")
	}
}

func TestPinTableDelete(t *testing.T) {
	pt := NewPinTable(time.Hour, 100, nil)
	for i := 0; i < 10; i++ {
		pt.PinIfAbsent(pinKey(i), "a:1")
	}
	if !pt.Delete(pinKey(3)) {
		t.Fatal("Delete of a pin reported none")
	}
	if pt.Delete(pinKey(3)) {
		t.Fatal("second Delete reported a pin")
	}
	if _, ok := pt.Get(pinKey(3)); ok {
		t.Fatal("deleted pin still found")
	}
	if n := pt.Len(); n != 9 {
		t.Fatalf("Len = %d, want 9", n)
	}
	for i := 0; i < 10; i++ {
		if _, ok := pt.Peek(pinKey(i)); ok != (i != 3) {
			t.Fatalf("pin %d: found = %v", i, ok)
		}
	}
	checkInvariants(t, pt)
}

func TestPinTableRange(t *testing.T) {
	clock := newFakeClock()
	pt := NewPinTable(time.Minute, 1000, clock.Now)
	pt.PinIfAbsent(pinKey(999), "old:1")
	clock.Advance(2 * time.Minute) // pin 999 has expired
	want := map[PinKey]string{}
	for i := 0; i < 100; i++ {
		up := fmt.Sprintf("up%d:80", i%4)
		pt.PinIfAbsent(pinKey(i), up)
		want[pinKey(i)] = up
	}
	pt.MarkFailed(pinKey(7), "up0:80", clock.Now().Add(time.Minute))

	got := map[PinKey]Pin{}
	pt.Range(func(k PinKey, p Pin) bool {
		if _, dup := got[k]; dup {
			t.Errorf("Range gave %v twice", k.Session)
		}
		got[k] = p
		pt.Get(k) // fn may use the table
		return true
	})
	if len(got) != len(want) {
		t.Fatalf("Range gave %d pins, want %d", len(got), len(want))
	}
	for k, up := range want {
		if got[k].Upstream != up {
			t.Fatalf("Range: pin %v on %q, want %q", k.Session, got[k].Upstream, up)
		}
	}
	if p := got[pinKey(7)]; p.Avoid != "up0:80" || p.AvoidUntil.IsZero() {
		t.Fatalf("Range lost the failure mark: %+v", p)
	}

	calls := 0
	pt.Range(func(PinKey, Pin) bool { calls++; return false })
	if calls != 1 {
		t.Fatalf("Range went on after fn returned false: %d calls", calls)
	}
}

// TestPinTableMatchesModel runs random operations against the table and a
// plain reference model (a map and a use counter for recency), in one
// shard so that the LRU order is exact, and compares them after each step.
func TestPinTableMatchesModel(t *testing.T) {
	const bound, keys, steps = 200, 600, 30_000
	pt := NewPinTable(time.Hour, bound, nil)
	type modelPin struct {
		upstream string
		used     int
	}
	model := map[int]*modelPin{}
	evictions := 0
	clock := 0
	touch := func(i int, up string) {
		clock++
		if p := model[i]; p != nil {
			p.used = clock
			if up != "" {
				p.upstream = up
			}
			return
		}
		if len(model) == bound {
			oldest := -1
			for j, p := range model {
				if oldest < 0 || p.used < model[oldest].used {
					oldest = j
				}
			}
			delete(model, oldest)
			evictions++
		}
		model[i] = &modelPin{upstream: up, used: clock}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	ups := []string{"a:1", "b:2", "c:3"}
	for step := 0; step < steps; step++ {
		i := rng.IntN(keys)
		k := pinKey(i)
		up := ups[rng.IntN(len(ups))]
		switch op := rng.IntN(10); {
		case op < 4:
			got := pt.PinIfAbsent(k, up)
			if p := model[i]; p != nil {
				up = p.upstream
			}
			touch(i, up)
			if got != up {
				t.Fatalf("step %d: PinIfAbsent = %q, model %q", step, got, up)
			}
		case op < 7:
			p, ok := pt.Get(k)
			m := model[i]
			if ok != (m != nil) || (ok && p.Upstream != m.upstream) {
				t.Fatalf("step %d: Get = %+v, %v; model %+v", step, p, ok, m)
			}
			if ok {
				touch(i, "")
			}
		case op < 8:
			pt.Repin(k, up, "", time.Time{})
			touch(i, up)
		default:
			ok := pt.Delete(k)
			if ok != (model[i] != nil) {
				t.Fatalf("step %d: Delete = %v, model has it: %v", step, ok, model[i] != nil)
			}
			delete(model, i)
		}
		if pt.Len() != len(model) {
			t.Fatalf("step %d: Len %d, model %d", step, pt.Len(), len(model))
		}
	}
	if int(pt.Evictions()) != evictions {
		t.Fatalf("Evictions %d, model %d", pt.Evictions(), evictions)
	}
	for i := 0; i < keys; i++ {
		p, ok := pt.Peek(pinKey(i))
		if m := model[i]; ok != (m != nil) || (ok && p.Upstream != m.upstream) {
			t.Fatalf("pin %d: table %+v, %v; model %+v", i, p, ok, m)
		}
	}
	checkInvariants(t, pt)
}

func TestPinTableConcurrentUse(t *testing.T) {
	clock := newFakeClock()
	// Four shards, and more keys than fit: evictions happen too.
	const bound, goroutines, steps, keys = 4096, 16, 2000, 10_000
	pt := NewPinTable(time.Minute, bound, clock.Now)
	pt.StartExpiry(5 * time.Millisecond)
	defer pt.Stop()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for step := 0; step < steps; step++ {
				k := pinKey(rng.IntN(keys))
				up := fmt.Sprintf("up%d:80", rng.IntN(5))
				switch rng.IntN(8) {
				case 0, 1:
					pt.PinIfAbsent(k, up)
				case 2, 3:
					if p, ok := pt.Get(k); ok && p.Upstream == "" {
						t.Error("a live pin without an upstream")
						return
					}
				case 4:
					pt.Repin(k, up, "up0:80", clock.Now().Add(time.Second))
				case 5:
					pt.MarkFailed(k, up, clock.Now().Add(time.Second))
				case 6:
					pt.Delete(k)
				default:
					if step%500 == 0 {
						clock.Advance(10 * time.Second)
						pt.Range(func(PinKey, Pin) bool { return true })
					}
					pt.Peek(k)
				}
			}
		})
	}
	wg.Wait()
	if n := pt.Len(); n > bound {
		t.Fatalf("Len %d over the bound", n)
	}
	if pt.Evictions() == 0 {
		t.Fatal("no evictions: the test did not reach the bound")
	}
	checkInvariants(t, pt)
}

// waitClosed reports whether ch is closed within a second.
func waitClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(time.Second):
		return false
	}
}

func TestPinTableExpiryGoroutine(t *testing.T) {
	clock := newFakeClock()
	pt := NewPinTable(time.Minute, 100, clock.Now)
	pt.StartExpiry(time.Millisecond)
	pt.StartExpiry(time.Millisecond) // a second start does not start a second goroutine
	done := pt.done

	// The goroutine sweeps: an expired pin disappears without any call.
	pt.PinIfAbsent(pinKey(1), "a:1")
	clock.Advance(2 * time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for pt.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the expiry goroutine did not sweep an expired pin")
		}
		time.Sleep(time.Millisecond)
	}

	if err := pt.Destruct(); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(done) {
		t.Fatal("the expiry goroutine is still running after Destruct")
	}
	pt.Stop() // stopping again is harmless
	pt.StartExpiry(time.Millisecond)
	if pt.done != done {
		t.Fatal("StartExpiry after Stop started a goroutine")
	}

	// Stop without a goroutine returns at once.
	NewPinTable(time.Minute, 1, nil).Stop()
}

// TestPolicyTableLifecycle checks the pin table's life through the module:
// a reload provisions the new config before cleaning up the old, so two
// policies with the same settings share one table, and its expiry goroutine
// ends only when both are cleaned up.
func TestPolicyTableLifecycle(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	// A TTL no other test uses, so the table is this test's own.
	settings := `{"ttl": "1h3s", "max_sessions": 5000}`
	newPolicy := func() *StickySelection {
		p := new(StickySelection)
		if err := json.Unmarshal([]byte(settings), p); err != nil {
			t.Fatal(err)
		}
		if err := p.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := newPolicy()
	done := old.table.done
	if done == nil {
		t.Fatal("Provision did not start the expiry goroutine")
	}
	k := PinKey{Namespace: 9, Session: session.NewKey(nil, "reloaded")}
	old.table.PinIfAbsent(k, "a:1")

	reloaded := newPolicy()
	if reloaded.table != old.table {
		t.Fatal("a policy with the same settings got a table of its own: pins are lost on reload")
	}
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("the table stopped while the reloaded config still uses it")
	case <-time.After(20 * time.Millisecond):
	}
	if p, ok := reloaded.table.Peek(k); !ok || p.Upstream != "a:1" {
		t.Fatal("the pin did not survive the reload")
	}

	other := &StickySelection{TTL: caddy.Duration(time.Hour + 4*time.Second), MaxSessions: 5000}
	if err := other.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if other.table == reloaded.table {
		t.Fatal("policies with different settings share a table")
	}

	if err := reloaded.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(done) {
		t.Fatal("the expiry goroutine is still running after the last Cleanup")
	}
	otherDone := other.table.done
	if err := other.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if !waitClosed(otherDone) {
		t.Fatal("the second table's goroutine is still running after Cleanup")
	}
}

func TestPinTableUseStampedLaterIsLive(t *testing.T) {
	// A request reads the clock, then waits for the shard's lock while
	// another, a second later, stamps the pin: to the first, the pin was
	// used in its future. It is live, not expired.
	clock := newFakeClock()
	pt := NewPinTable(time.Hour, 100, clock.Now)
	k := pinKey(1)
	pt.PinIfAbsent(k, "a:1")
	clock.Advance(time.Second)
	pt.Get(k) // stamped at +1s
	clock.Advance(-time.Second)
	if p, ok := pt.Get(k); !ok || p.Upstream != "a:1" {
		t.Fatalf("Get with a clock a second behind the last use = %+v, %v", p, ok)
	}
	if got := pt.PinIfAbsent(k, "b:2"); got != "a:1" {
		t.Fatalf("PinIfAbsent replaced a live pin with %q", got)
	}
	if pt.Sweep() != 0 {
		t.Fatal("Sweep removed a live pin")
	}
}
