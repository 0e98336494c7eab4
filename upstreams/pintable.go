// Package upstreams holds the session_sticky selection policy: the table of
// pins (session → upstream), the placement of new sessions, and the re-pin
// rules. The table and placement are written against plain types so they can
// be tested without a running Caddy.
package upstreams

import (
	"encoding/binary"
	"math/bits"
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
	// maxShards is the most shards a table is split into; a power of two.
	maxShards = 64
	// minPinsPerShard keeps small tables in few shards, so that their
	// bound and LRU order are exact (one shard) or close to it.
	minPinsPerShard = 1024

	chunkBits = 8 // entries are stored in chunks of 256, allocated as needed
	chunkSize = 1 << chunkBits
	nilIndex  = -1

	// minSlots is the size of a shard's index when its first pin arrives.
	minSlots = 16
)

// PinTable maps sessions to upstreams with a sliding idle TTL and a bound on
// the number of pins, evicting the least recently used pin at the bound.
//
// It is split into shards, each with its own lock, index, entry storage and
// LRU list; a shard's lock guards everything in it and is never held while
// calling out. The bound is divided between the shards, which keys spread
// evenly over; a table bounded below 64×1024 pins uses fewer shards, down
// to one, so a small bound is exact.
//
// Nothing in the table holds a pointer (upstreams are interned as small
// integers, and the index is an open-addressing array of entry numbers), so
// a table of millions of pins costs the garbage collector nothing to scan,
// and a pin costs about 64 bytes: a 48-byte entry and its index slot.
// Storage grows to the most pins held at once (at most the bound) and is
// reused, not returned, after pins expire.
type PinTable struct {
	ttl   time.Duration
	now   func() time.Time
	epoch time.Time // times are stored as whole seconds since epoch

	shards     [maxShards]shard
	shardShift uint // a key's shard is its hash >> shardShift
	names      internTable

	life    sync.Mutex // guards the expiry goroutine's lifecycle below
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

// shard is one lock's worth of the table.
type shard struct {
	mu sync.Mutex
	// slots is the index: an open-addressing hash table with linear
	// probing, each slot holding hash<<32 | (entry number + 1), 0 when
	// empty. The low 32 bits of a key's hash choose its home slot, so a
	// slot knows its home without looking at the entry.
	slots      []uint64
	chunks     [][]entry
	free       int32 // head of the free list of entries, linked through next
	head, tail int32 // LRU list: head is the most recently used
	len, max   int
	evictions  uint64
	_          [64]byte // keeps neighbouring shards' locks off one cache line
}

// entry is one pin, 48 bytes.
type entry struct {
	session    session.Key
	namespace  uint64
	upstream   uint32 // interned dial address
	avoid      uint32 // interned dial address + 1; 0 when none
	avoidUntil uint32 // seconds since epoch
	lastUsed   uint32 // seconds since epoch
	prev, next int32
}

func (e *entry) key() PinKey { return PinKey{Namespace: e.namespace, Session: e.session} }

// NewPinTable returns a table with the given idle TTL and bound. now is the
// clock (time.Now when nil); tests inject their own.
func NewPinTable(ttl time.Duration, maxPins int, now func() time.Time) *PinTable {
	if now == nil {
		now = time.Now
	}
	maxPins = max(maxPins, 1)
	shards := maxShards
	for shards > 1 && maxPins/shards < minPinsPerShard {
		shards /= 2
	}
	t := &PinTable{
		ttl:        ttl,
		now:        now,
		epoch:      now().Add(-time.Second),
		shardShift: uint(64 - bits.TrailingZeros(uint(shards))),
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.free, s.head, s.tail = nilIndex, nilIndex, nilIndex
	}
	// Divide the bound exactly: the first maxPins%shards shards take one
	// more than the rest.
	for i := 0; i < shards; i++ {
		t.shards[i].max = maxPins / shards
		if i < maxPins%shards {
			t.shards[i].max++
		}
	}
	t.names.ids = make(map[string]uint32)
	return t
}

// seconds converts a time to the table's stored form, rounding down.
func (t *PinTable) seconds(tm time.Time) uint32 {
	d := tm.Sub(t.epoch)
	if d < 0 {
		return 0
	}
	return uint32(d / time.Second)
}

// secondsCeil converts a deadline to the table's stored form, rounding up so
// that a cooldown is never cut short.
func (t *PinTable) secondsCeil(tm time.Time) uint32 {
	d := tm.Sub(t.epoch)
	if d <= 0 {
		return 0
	}
	return uint32((d + time.Second - 1) / time.Second)
}

// hashKey mixes both halves of the session key with the namespace. Session
// keys are uniform hashes already; the mixing keeps the index well spread
// even for keys that are not (as in tests).
func hashKey(k PinKey) uint64 {
	lo := binary.LittleEndian.Uint64(k.Session[:8])
	hi := binary.LittleEndian.Uint64(k.Session[8:])
	return Mix64(lo ^ Mix64(hi^k.Namespace))
}

func (t *PinTable) shardOf(h uint64) *shard {
	// With one shard the shift is 64, which gives 0.
	return &t.shards[h>>t.shardShift]
}

// expired reports whether an entry last used at lastUsed is past the TTL.
// now is read before the shard's lock is taken, so a concurrent use may
// have stamped the entry a second later: such an entry is live, not (as the
// unsigned difference would have it) four billion seconds old.
func (t *PinTable) expired(lastUsed, now uint32) bool {
	return now > lastUsed && time.Duration(now-lastUsed)*time.Second >= t.ttl
}

// Get returns the live pin of k and refreshes its TTL and recency.
func (t *PinTable) Get(k PinKey) (Pin, bool) {
	now := t.seconds(t.now())
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	pos, i := s.find(k, h)
	if i == nilIndex {
		s.mu.Unlock()
		return Pin{}, false
	}
	e := s.at(i)
	if t.expired(e.lastUsed, now) {
		s.remove(pos, i)
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
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	_, i := s.find(k, h)
	if i == nilIndex || t.expired(s.at(i).lastUsed, now) {
		s.mu.Unlock()
		return Pin{}, false
	}
	e := s.at(i)
	up, avoid, avoidUntil := e.upstream, e.avoid, e.avoidUntil
	s.mu.Unlock()
	return t.pin(up, avoid, avoidUntil), true
}

// pin builds the exported form of an entry's fields.
func (t *PinTable) pin(up, avoid, avoidUntil uint32) Pin {
	p := Pin{Upstream: t.names.name(up)}
	if avoid != 0 {
		p.Avoid = t.names.name(avoid - 1)
		p.AvoidUntil = t.epoch.Add(time.Duration(avoidUntil) * time.Second)
	}
	return p
}

// PinIfAbsent pins k to upstream unless it already has a live pin, and
// returns the upstream of the pin now in force. Concurrent first requests of
// one session all get the upstream of whichever arrived first.
func (t *PinTable) PinIfAbsent(k PinKey, upstream string) string {
	id := t.names.id(upstream)
	now := t.seconds(t.now())
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, i := s.find(k, h); i != nilIndex {
		e := s.at(i)
		if !t.expired(e.lastUsed, now) {
			e.lastUsed = now
			s.moveToFront(i)
			return t.names.name(e.upstream)
		}
		e.upstream, e.avoid, e.avoidUntil, e.lastUsed = id, 0, 0, now
		s.moveToFront(i)
		return upstream
	}
	s.insert(k, h, id, now)
	return upstream
}

// Repin moves k to upstream (pinning it if it had no pin). When avoid is not
// empty, the session keeps away from that upstream until avoidUntil;
// otherwise a cooldown still running is kept.
func (t *PinTable) Repin(k PinKey, upstream, avoid string, avoidUntil time.Time) {
	id := t.names.id(upstream)
	var av uint32
	if avoid != "" {
		av = t.names.id(avoid) + 1
	}
	now := t.seconds(t.now())
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, i := s.find(k, h)
	if i == nilIndex {
		i = s.insert(k, h, id, now)
	}
	e := s.at(i)
	e.upstream, e.lastUsed = id, now
	if av != 0 {
		e.avoid, e.avoidUntil = av, t.secondsCeil(avoidUntil)
	} else if e.avoid != 0 && now >= e.avoidUntil {
		e.avoid, e.avoidUntil = 0, 0
	}
	s.moveToFront(i)
}

// MarkFailed records that upstream failed session k: the session avoids it
// until until. The pin itself is left for the next request to move, so that
// the move is counted as a re-pin where it happens. A session without a pin
// is left alone.
func (t *PinTable) MarkFailed(k PinKey, upstream string, until time.Time) {
	av := t.names.id(upstream) + 1
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, i := s.find(k, h); i != nilIndex {
		e := s.at(i)
		e.avoid, e.avoidUntil = av, t.secondsCeil(until)
	}
}

// Delete drops the pin of k, reporting whether there was one.
func (t *PinTable) Delete(k PinKey) bool {
	h := hashKey(k)
	s := t.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, i := s.find(k, h)
	if i != nilIndex {
		s.remove(pos, i)
	}
	return i != nilIndex
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

// Range calls fn for every live pin, shard by shard and, within a shard,
// from the most recently used, until fn returns false. Each shard is copied
// under its lock and fn runs with no lock held, so fn may use the table.
func (t *PinTable) Range(fn func(PinKey, Pin) bool) {
	type snapshot struct {
		key                         PinKey
		upstream, avoid, avoidUntil uint32
	}
	now := t.seconds(t.now())
	var batch []snapshot
	for i := range t.shards {
		s := &t.shards[i]
		batch = batch[:0]
		s.mu.Lock()
		for j := s.head; j != nilIndex; j = s.at(j).next {
			if e := s.at(j); !t.expired(e.lastUsed, now) {
				batch = append(batch, snapshot{e.key(), e.upstream, e.avoid, e.avoidUntil})
			}
		}
		s.mu.Unlock()
		for _, b := range batch {
			if !fn(b.key, t.pin(b.upstream, b.avoid, b.avoidUntil)) {
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
			s.removeEntry(s.tail)
			removed++
		}
		s.mu.Unlock()
	}
	return removed
}

// StartExpiry sweeps expired pins every interval until Stop. It starts at
// most one goroutine per table, and none after Stop.
func (t *PinTable) StartExpiry(interval time.Duration) {
	t.life.Lock()
	defer t.life.Unlock()
	if t.stopped || t.stop != nil {
		return
	}
	t.stop = make(chan struct{})
	t.done = make(chan struct{})
	go t.expire(interval, t.stop, t.done)
}

// expire is the expiry goroutine.
func (t *PinTable) expire(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			t.Sweep()
		case <-stop:
			return
		}
	}
}

// Stop ends the expiry goroutine, if any, and waits for it to exit.
func (t *PinTable) Stop() {
	t.life.Lock()
	if !t.stopped && t.stop != nil {
		close(t.stop)
	}
	t.stopped = true
	done := t.done
	t.life.Unlock()
	if done != nil {
		<-done
	}
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

// find returns the index slot and entry number of k, or -1 and nilIndex.
// The caller holds s.mu.
func (s *shard) find(k PinKey, h uint64) (pos int, i int32) {
	if len(s.slots) == 0 {
		return -1, nilIndex
	}
	mask := uint32(len(s.slots) - 1)
	tag := uint32(h)
	for p := tag & mask; ; p = (p + 1) & mask {
		v := s.slots[p]
		if v == 0 {
			return -1, nilIndex
		}
		if uint32(v>>32) == tag {
			i := int32(uint32(v)) - 1
			if e := s.at(i); e.session == k.Session && e.namespace == k.Namespace {
				return int(p), i
			}
		}
	}
}

// findEntry returns the index slot that refers to entry i. The caller holds
// s.mu.
func (s *shard) findEntry(i int32) int {
	e := s.at(i)
	pos, _ := s.find(e.key(), hashKey(e.key()))
	return pos
}

// addSlot records entry i under hash h, growing the index to keep it at
// most three quarters full. The caller holds s.mu.
func (s *shard) addSlot(h uint64, i int32) {
	if (s.len+1)*4 > len(s.slots)*3 {
		s.growSlots()
	}
	placeSlot(s.slots, h<<32|uint64(i+1))
}

// placeSlot puts v into the first free slot of its probe sequence.
func placeSlot(slots []uint64, v uint64) {
	mask := uint32(len(slots) - 1)
	p := uint32(v>>32) & mask
	for slots[p] != 0 {
		p = (p + 1) & mask
	}
	slots[p] = v
}

// growSlots doubles the index. Slots carry their hash, so no entry is read.
func (s *shard) growSlots() {
	old := s.slots
	s.slots = make([]uint64, max(2*len(old), minSlots))
	for _, v := range old {
		if v != 0 {
			placeSlot(s.slots, v)
		}
	}
}

// deleteSlot empties slot pos, shifting later members of its probe run back
// so that every run stays unbroken (no tombstones). The caller holds s.mu.
func (s *shard) deleteSlot(pos int) {
	mask := uint32(len(s.slots) - 1)
	hole := uint32(pos)
	for p := (hole + 1) & mask; s.slots[p] != 0; p = (p + 1) & mask {
		v := s.slots[p]
		home := uint32(v>>32) & mask
		// v may fill the hole if the hole lies on its probe path, that
		// is, no farther back from p than v's home is.
		if (p-hole)&mask <= (p-home)&mask {
			s.slots[hole] = v
			hole = p
		}
	}
	s.slots[hole] = 0
}

// insert adds a new entry at the front, evicting the least recently used
// one when the shard is full. The caller holds s.mu.
func (s *shard) insert(k PinKey, h uint64, upstream, now uint32) int32 {
	if s.len >= s.max && s.tail != nilIndex {
		s.removeEntry(s.tail)
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
	*s.at(i) = entry{
		session:   k.Session,
		namespace: k.Namespace,
		upstream:  upstream,
		lastUsed:  now,
		prev:      nilIndex,
		next:      s.head,
	}
	if s.head != nilIndex {
		s.at(s.head).prev = i
	}
	s.head = i
	if s.tail == nilIndex {
		s.tail = i
	}
	s.addSlot(h, i)
	s.len++
	return i
}

// removeEntry removes entry i, finding its index slot first. The caller
// holds s.mu.
func (s *shard) removeEntry(i int32) {
	s.remove(s.findEntry(i), i)
}

// remove unlinks entry i, empties its index slot pos and puts the entry on
// the free list. The caller holds s.mu.
func (s *shard) remove(pos int, i int32) {
	s.unlink(i)
	s.deleteSlot(pos)
	*s.at(i) = entry{next: s.free, prev: nilIndex}
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

// id returns the number of name, assigning the next one to a new name.
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

// name returns the name numbered id.
func (n *internTable) name(id uint32) string {
	return (*n.names.Load())[id]
}
