package activity

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func sess(n int) *session.Session {
	var k session.Key
	binary.LittleEndian.PutUint64(k[:], uint64(n)+1)
	return &session.Session{Key: k, Source: "header:X-Session-Id"}
}

func req(t0 time.Time, i int) Request {
	return Request{Time: t0.Add(time.Duration(i) * time.Second), Method: "POST", Path: "/v1/messages", Decision: "hit", Status: 200, Upstream: "u1"}
}

func TestRecordAndOrder(t *testing.T) {
	l := New(10, 1000)
	t0 := time.Unix(1_800_000_000, 0)
	l.Record(sess(1), "", req(t0, 0))
	l.Record(sess(2), "raw-2", req(t0, 1))
	l.Record(sess(1), "", req(t0, 2))

	list := l.Sessions(100, nil)
	if len(list) != 2 || list[0].Key != sess(1).Key.String() || list[1].Key != sess(2).Key.String() {
		t.Fatalf("order: %+v", list)
	}
	if list[0].Requests != 2 || !list[0].FirstSeen.Equal(t0) || !list[0].LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("summary: %+v", list[0])
	}
	if list[0].ID != "" || list[1].ID != "raw-2" {
		t.Fatalf("ids: %q %q", list[0].ID, list[1].ID)
	}
	if got := l.Sessions(1, nil); len(got) != 1 {
		t.Fatalf("limit: %d", len(got))
	}
	if got := l.Sessions(10, func(s *Summary) bool { return s.ID != "" }); len(got) != 1 || got[0].ID != "raw-2" {
		t.Fatalf("filter: %+v", got)
	}
}

func TestPerSessionRing(t *testing.T) {
	l := New(10, 1000)
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < PerSession+8; i++ {
		l.Record(sess(1), "", req(t0, i))
	}
	sum, reqs, ok := l.Session(sess(1).Key)
	if !ok || sum.Requests != PerSession+8 || len(reqs) != PerSession {
		t.Fatalf("ok=%v count=%d kept=%d", ok, sum.Requests, len(reqs))
	}
	// Newest first, and the oldest 8 dropped.
	for i, r := range reqs {
		want := t0.Add(time.Duration(PerSession+8-1-i) * time.Second)
		if !r.Time.Equal(want) {
			t.Fatalf("reqs[%d] at %v, want %v", i, r.Time, want)
		}
	}
	if _, n, dropped := l.Stats(); n != PerSession || dropped != 8 {
		t.Fatalf("requests %d dropped %d", n, dropped)
	}
}

func TestBoundsDropOldest(t *testing.T) {
	l := New(3, 1000)
	t0 := time.Unix(1_800_000_000, 0)
	for i := 0; i < 5; i++ {
		l.Record(sess(i), "", req(t0, i))
	}
	if _, _, ok := l.Session(sess(0).Key); ok {
		t.Fatal("the oldest session survived the session bound")
	}
	if _, _, ok := l.Session(sess(4).Key); !ok {
		t.Fatal("the newest session was dropped")
	}

	l = New(100, 10)
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			l.Record(sess(i), "", req(t0, i*10+j))
		}
	}
	sessions, requests, dropped := l.Stats()
	// 16 requests of 4 sessions under a bound of 10: the third session
	// pushes out the first, the fourth the second.
	if sessions != 2 || requests != 8 || dropped != 8 {
		t.Fatalf("request bound: sessions %d requests %d dropped %d", sessions, requests, dropped)
	}
}

func TestForget(t *testing.T) {
	l := New(10, 100)
	l.Record(sess(1), "", req(time.Now(), 0))
	if !l.Forget(sess(1).Key) || l.Forget(sess(1).Key) {
		t.Fatal("Forget")
	}
	if s, r, _ := l.Stats(); s != 0 || r != 0 {
		t.Fatalf("left %d sessions %d requests", s, r)
	}
}

// TestFloodStaysWithinBounds sends 100,000 distinct sessions and measures
// the heap: it must stay near what the bounds allow, not grow with the flood.
func TestFloodStaysWithinBounds(t *testing.T) {
	const maxSessions, maxRequests = 2_000, 20_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	l := New(maxSessions, maxRequests)
	t0 := time.Now()
	fill := func(from, to int) {
		for i := from; i < to; i++ {
			r := req(t0, i)
			r.Path = fmt.Sprintf("/v1/messages/%d", i) // a distinct string per request
			l.Record(sess(i), "", r)
		}
	}
	fill(0, 10_000)
	at10k := heap()
	fill(10_000, 100_000)
	at100k := heap()
	sessions, requests, _ := l.Stats()
	if sessions > maxSessions || requests > maxRequests {
		t.Fatalf("bounds exceeded: %d sessions, %d requests", sessions, requests)
	}
	grown := int64(at100k) - int64(at10k)
	t.Logf("heap: %d B after 10k sessions, %d B after 100k (%+d B); %d sessions kept", at10k-before, at100k-before, grown, sessions)
	// The log holds the same number of sessions at both points; allow some
	// slack for map growth and garbage collector noise.
	if grown > int64(at10k-before)/2+1<<20 {
		t.Fatalf("memory grew with the flood: %d B after 10k sessions, %d B after 100k", at10k-before, at100k-before)
	}
	runtime.KeepAlive(l)
}

// Records of the same path and model share one copy of each, and the
// table of shared strings stays within its bound.
func TestRecordsShareStrings(t *testing.T) {
	l := New(0, 0)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range 100 {
		r := req(t0, i)
		// A fresh string per request, as a request line or body gives.
		r.Path = string([]byte("/v1/chat/completions"))
		r.Model = fmt.Sprint("model-", i%2)
		l.Record(sess(i), "", r)
	}
	_, a, _ := l.Session(sess(0).Key)
	_, b, _ := l.Session(sess(2).Key)
	if unsafe.StringData(a[0].Path) != unsafe.StringData(b[0].Path) || unsafe.StringData(a[0].Model) != unsafe.StringData(b[0].Model) {
		t.Error("two records hold their own copies of one path and model")
	}
	for i := range 2 * maxShared {
		r := req(t0, i)
		r.Path = fmt.Sprint("/path/", i)
		l.Record(sess(1000+i), "", r)
	}
	if n := l.nShared.Load(); n > maxShared {
		t.Errorf("%d shared strings, bound %d", n, maxShared)
	}
	if _, got, _ := l.Session(sess(1000 + 2*maxShared - 1).Key); got[0].Path != fmt.Sprint("/path/", 2*maxShared-1) {
		t.Errorf("a path past the bound reads %q", got[0].Path)
	}
}
