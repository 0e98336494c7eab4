// Package upstreams holds the session_sticky selection policy: the table of
// pins (session → upstream), the placement of new sessions, and the re-pin
// rules. The table and placement are written against plain types so they can
// be tested without a running Caddy.
package upstreams

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// PinKey identifies a pin: a session within a pin namespace (one pool of
// upstreams, or the policy's explicit name).
type PinKey struct {
	Namespace uint64
	Session   session.Key
}

// Pin is what the table holds for a session.
type Pin struct {
	// Upstream is the dial address the session is pinned to.
	Upstream string
	// Avoid is an upstream that failed this session; it is not chosen for
	// the session again before AvoidUntil.
	Avoid      string
	AvoidUntil time.Time
}

// Avoids reports whether the pin says to keep away from upstream at now.
func (p Pin) Avoids(upstream string, now time.Time) bool {
	return p.Avoid != "" && p.Avoid == upstream && now.Before(p.AvoidUntil)
}

const (
	shardCount = 64 // a power of two
	chunkBits  = 8  // entries are stored in chunks of 256, allocated as needed
	chunkSize  = 1 << chunkBits
	nilIndex   = -1
)

// PinTable maps sessions to upstreams with a sliding idle TTL and a bound on
// the number of pins, evicting the least recently used pin at the bound.
//
// It is split into shards, each with its own lock, map, entry storage and
// LRU list; a shard's lock guards everything in it and is never held while
// calling out. The bound is enforced per shard (max/shards), which keys
// spread evenly over. Entries hold no pointers (upstreams are interned as
// small integers) so a table of millions of pins costs the garbage collector
// nothing to scan.
type PinTable struct {
	ttl   time.Duration
	now   func() time.Time
	epoch time.Time // times are stored as seconds since epoch

	shards [shardCount]shard
	names  internTable

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

type shard struct {
	mu         sync.Mutex
	index      map[PinKey]int32
	chunks     [][]entry
	free       int32 // head of the free list, linked through next
	head, tail int32 // LRU list: head is the most recently used
	len, max   int
	evictions  uint64
}

// entry is one pin, 48 bytes.
type entry struct {
	key        PinKey
	upstream   uint32 // interned dial address
	avoid      uint32 // interned dial address + 1; 0 when none
	avoidUntil uint32 // seconds since epoch
	lastUsed   uint32 // seconds since epoch
	prev, next int32
}

// NewPinTable returns a table with the given idle TTL and bound. now is the
// clock (time.Now when nil); tests inject their own.
func NewPinTable(ttl time.Duration, maxPins int, now func() time.Time) *PinTable {
	if now == nil {
		now = time.Now
	}
	t := &PinTable{ttl: ttl, now: now, epoch: now().Add(-time.Second)}
	perShard := (maxPins + shardCount - 1) / shardCount
	if perShard < 1 {
		perShard = 1
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.index = make(map[PinKey]int32)
		s.free, s.head, s.tail = nilIndex, nilIndex, nilIndex
		s.max = perShard
	}
	t.names.ids = make(map[string]uint32)
	return t
}

// seconds converts a time to the table's stored form.
func (t *PinTable) seconds(tm time.Time) uint32 {
	d := tm.Sub(t.epoch)
	if d < 0 {
		return 0
	}
	return uint32(d / time.Second)
}

func (t *PinTable) shardOf(k PinKey) *shard {
	// The session key is a uniform hash already.
	return &t.shards[(uint64(k.Session[0])^k.Namespace)&(shardCount-1)]
}

// expired reports whether an entry last used at lastUsed is past the TTL.
func (t *PinTable) expired(lastUsed, now uint32) bool {
	return time.Duration(now-lastUsed)*time.Second >= t.ttl
}

// Get returns the live pin of k and refreshes its TTL and recency.
func (t *PinTable) Get(k PinKey) (Pin, bool) {
	now := t.seconds(t.now())
	s := t.shardOf(k)
	s.mu.Lock()
	i, ok := s.index[k]
	if !ok {
		s.mu.Unlock()
		return Pin{}, false
	}
	e := s.at(i)
	if t.expired(e.lastUsed, now) {
		s.remove(i)
		s.mu.Unlock()
		return Pin{}, false
	}
	e.lastUsed = now
	s.moveToFront(i)
	up, avoid, avoidUntil := e.upstream, e.avoid, e.avoidUntil
	s.mu.Unlock()
	return t.pin(up, avoid, avoidUntil), true
}

// Peek returns the live pin of k without refreshing it.
func (t *PinTable) Peek(k PinKey) (Pin, bool) {
	now := t.seconds(t.now())
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok || t.expired(s.at(i).lastUsed, now) {
		return Pin{}, false
	}
	e := s.at(i)
	return t.pin(e.upstream, e.avoid, e.avoidUntil), true
}

func (t *PinTable) pin(up, avoid, avoidUntil uint32) Pin {
	p := Pin{Upstream: t.names.name(up)}
	if avoid != 0 {
		p.Avoid = t.names.name(avoid - 1)
		p.AvoidUntil = t.epoch.Add(time.Duration(avoidUntil) * time.Second)
	}
	return p
}

// PinIfAbsent pins k to upstream unless it already has a live pin, and
// returns the pin now in force. Concurrent first requests of one session
// all get the upstream of whichever arrived first.
func (t *PinTable) PinIfAbsent(k PinKey, upstream string) string {
	id := t.names.id(upstream)
	now := t.seconds(t.now())
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		e := s.at(i)
		if !t.expired(e.lastUsed, now) {
			e.lastUsed = now
			s.moveToFront(i)
			return t.names.name(e.upstream)
		}
		e.upstream, e.avoid, e.lastUsed = id, 0, now
		s.moveToFront(i)
		return upstream
	}
	s.insert(k, id, now)
	return upstream
}

// Repin moves k to upstream. When avoid is not empty, the session keeps away
// from that upstream until avoidUntil.
func (t *PinTable) Repin(k PinKey, upstream, avoid string, avoidUntil time.Time) {
	id := t.names.id(upstream)
	var av uint32
	if avoid != "" {
		av = t.names.id(avoid) + 1
	}
	now := t.seconds(t.now())
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if !ok {
		i = s.insert(k, id, now)
	}
	e := s.at(i)
	e.upstream, e.lastUsed = id, now
	if av != 0 {
		e.avoid, e.avoidUntil = av, t.seconds(avoidUntil)+1
	} else if e.avoid != 0 && !t.avoiding(e, now) {
		e.avoid = 0
	}
	s.moveToFront(i)
}

func (t *PinTable) avoiding(e *entry, now uint32) bool { return e.avoid != 0 && now < e.avoidUntil }

// MarkFailed records that upstream failed session k: the session avoids it
// until until. The pin itself is left for the next request to move, so that
// the move is counted as a re-pin where it happens.
func (t *PinTable) MarkFailed(k PinKey, upstream string, until time.Time) {
	av := t.names.id(upstream) + 1
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[k]; ok {
		e := s.at(i)
		e.avoid, e.avoidUntil = av, t.seconds(until)+1
	}
}

// Delete drops the pin of k, reporting whether there was one.
func (t *PinTable) Delete(k PinKey) bool {
	s := t.shardOf(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[k]
	if ok {
		s.remove(i)
	}
	return ok
}

// Len returns the number of pins held, expired ones not yet swept included.
func (t *PinTable) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.len
		s.mu.Unlock()
	}
	return n
}

// Evictions returns how many pins were evicted at the bound so far.
func (t *PinTable) Evictions() uint64 {
	var n uint64
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += s.evictions
		s.mu.Unlock()
	}
	return n
}

// Range calls fn for every live pin, shard by shard, until fn returns false.
// fn runs without any lock held.
func (t *PinTable) Range(fn func(PinKey, Pin) bool) {
	now := t.seconds(t.now())
	var batch []PinKey
	for i := range t.shards {
		s := &t.shards[i]
		batch = batch[:0]
		s.mu.Lock()
		for j := s.head; j != nilIndex; j = s.at(j).next {
			if e := s.at(j); !t.expired(e.lastUsed, now) {
				batch = append(batch, e.key)
			}
		}
		s.mu.Unlock()
		for _, k := range batch {
			if p, ok := t.Peek(k); ok && !fn(k, p) {
				return
			}
		}
	}
}

// Sweep removes expired pins and returns how many it removed. Because each
// shard's LRU list is in recency order, it only walks from the tail until
// the first live pin.
func (t *PinTable) Sweep() int {
	now := t.seconds(t.now())
	removed := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for s.tail != nilIndex && t.expired(s.at(s.tail).lastUsed, now) {
			s.remove(s.tail)
			removed++
		}
		s.mu.Unlock()
	}
	return removed
}

// StartExpiry sweeps expired pins every interval until Stop.
func (t *PinTable) StartExpiry(interval time.Duration) {
	t.stop = make(chan struct{})
	t.done = make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				t.Sweep()
			case <-t.stop:
				return
			}
		}
	}()
}

// Stop ends the expiry goroutine, if any, and waits for it to exit.
func (t *PinTable) Stop() {
	t.stopOnce.Do(func() {
		if t.stop != nil {
			close(t.stop)
			<-t.done
		}
	})
}

// Destruct stops the table when the last config using it is unloaded
// (caddy.Destructor, for caddy.UsagePool).
func (t *PinTable) Destruct() error {
	t.Stop()
	return nil
}

func (s *shard) at(i int32) *entry {
	return &s.chunks[i>>chunkBits][i&(chunkSize-1)]
}

// insert adds a new entry at the front, evicting the least recently used
// one when the shard is full. The caller holds s.mu.
func (s *shard) insert(k PinKey, upstream, now uint32) int32 {
	if s.len >= s.max && s.tail != nilIndex {
		s.remove(s.tail)
		s.evictions++
	}
	i := s.free
	if i != nilIndex {
		s.free = s.at(i).next
	} else {
		last := len(s.chunks) - 1
		if last < 0 || len(s.chunks[last]) == chunkSize {
			s.chunks = append(s.chunks, make([]entry, 0, chunkSize))
			last++
		}
		c := s.chunks[last]
		i = int32(last)<<chunkBits | int32(len(c))
		s.chunks[last] = c[:len(c)+1]
	}
	*s.at(i) = entry{key: k, upstream: upstream, lastUsed: now, prev: nilIndex, next: s.head}
	if s.head != nilIndex {
		s.at(s.head).prev = i
	}
	s.head = i
	if s.tail == nilIndex {
		s.tail = i
	}
	s.index[k] = i
	s.len++
	return i
}

// remove unlinks entry i and puts it on the free list. The caller holds s.mu.
func (s *shard) remove(i int32) {
	e := s.at(i)
	s.unlink(i)
	delete(s.index, e.key)
	*e = entry{next: s.free, prev: nilIndex}
	s.free = i
	s.len--
}

func (s *shard) unlink(i int32) {
	e := s.at(i)
	if e.prev != nilIndex {
		s.at(e.prev).next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nilIndex {
		s.at(e.next).prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nilIndex, nilIndex
}

func (s *shard) moveToFront(i int32) {
	if s.head == i {
		return
	}
	s.unlink(i)
	e := s.at(i)
	e.next = s.head
	if s.head != nilIndex {
		s.at(s.head).prev = i
	}
	s.head = i
	if s.tail == nilIndex {
		s.tail = i
	}
}

// internTable maps dial addresses to small integers and back. Upstreams are
// few and long-lived, so names are never removed. Reads of a name take no
// lock: the list is append-only and published by copy on write.
type internTable struct {
	mu    sync.Mutex // serialises writers
	ids   map[string]uint32
	names atomic.Pointer[[]string]
}

func (n *internTable) id(name string) uint32 {
	if names := n.names.Load(); names != nil {
		// Few names: a scan is cheaper than taking the lock.
		for i, have := range *names {
			if have == name {
				return uint32(i)
			}
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok := n.ids[name]; ok {
		return id
	}
	var names []string
	if p := n.names.Load(); p != nil {
		names = append(names, *p...)
	}
	id := uint32(len(names))
	names = append(names, name)
	n.ids[name] = id
	n.names.Store(&names)
	return id
}

func (n *internTable) name(id uint32) string {
	return (*n.names.Load())[id]
}
