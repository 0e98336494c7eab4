package session

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBuffered is the default budget of a BufferPool: the bytes that
// the request bodies of the whole process may hold at once.
const DefaultMaxBuffered = 256 << 20

const (
	// minClassShift is log2 of the smallest buffer handed out (4 KiB).
	minClassShift = 12
	// maxClassShift is log2 of the largest size class (1 TiB, the largest
	// max_body).
	maxClassShift = 40
	// numClasses counts the size classes: the smallest, then four steps a
	// doubling (1¼, 1½, 1¾, 2 times the power of two below).
	numClasses = (maxClassShift-minClassShift)*4 + 1
	// idleTTL is how long an unused buffer is kept for reuse.
	idleTTL = time.Minute
)

// BufferPool hands out the buffers that request bodies are read into, and
// bounds the bytes of every buffer it holds, in use or idle, by a budget.
//
// Buffers come in size classes a quarter of a power of two apart, so a
// buffer is at most 25 % larger than the body it holds, and a returned buffer
// serves the next body of its class without being allocated, cleared or
// collected again. A buffer not reused within a minute is dropped.
//
// All fields behind mu are owned by the pool; the buffers it hands out
// belong to the caller until Put.
type BufferPool struct {
	refused atomic.Uint64 // Get calls turned down by the budget

	mu        sync.Mutex
	budget    int64 // bytes that in-use and idle buffers may take together
	inUse     int64 // bytes of the buffers handed out
	idle      int64 // bytes of the buffers in free
	free      [numClasses][]idleBuffer
	lastSweep time.Time
}

// idleBuffer is a returned buffer waiting for reuse.
type idleBuffer struct {
	buf   []byte
	since time.Time
}

// NewBufferPool returns a pool with the given budget in bytes.
func NewBufferPool(budget int64) *BufferPool {
	return &BufferPool{budget: budget}
}

// SetBudget changes the budget. Buffers in use stay where they are; while
// they exceed the new budget, Get refuses.
func (p *BufferPool) SetBudget(budget int64) {
	p.mu.Lock()
	p.budget = budget
	p.trim(0)
	p.mu.Unlock()
}

// Stats reports the budget, the bytes in use, the idle bytes kept for reuse
// and how many Get calls the budget turned down.
func (p *BufferPool) Stats() (budget, inUse, idle int64, refused uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.budget, p.inUse, p.idle, p.refused.Load()
}

// Get returns a buffer of length n (its capacity is n's size class), or nil
// when holding it would exceed the budget. A nil pool allocates a new
// buffer every time, with no budget.
func (p *BufferPool) Get(n int64) []byte {
	class, size := sizeClass(n)
	if p == nil {
		return make([]byte, n, size)
	}
	p.mu.Lock()
	if p.inUse+size > p.budget {
		p.mu.Unlock()
		p.refused.Add(1)
		return nil
	}
	p.inUse += size
	if free := p.free[class]; len(free) > 0 {
		b := free[len(free)-1].buf
		free[len(free)-1] = idleBuffer{}
		p.free[class] = free[:len(free)-1]
		p.idle -= size
		p.mu.Unlock()
		return b[:n]
	}
	// Make room for a new buffer by dropping idle ones of other sizes.
	p.trim(size)
	p.mu.Unlock()
	return make([]byte, n, size)
}

// Put returns a buffer that Get handed out. The caller must not use it
// afterwards.
func (p *BufferPool) Put(b []byte) {
	if p == nil {
		return
	}
	class, size := sizeClass(int64(cap(b)))
	if size != int64(cap(b)) {
		return // not one of ours
	}
	now := time.Now()
	p.mu.Lock()
	if now.Sub(p.lastSweep) > idleTTL/4 {
		p.sweep(now)
	}
	p.inUse -= size
	if p.inUse+p.idle+size <= p.budget {
		p.free[class] = append(p.free[class], idleBuffer{buf: b[:0], since: now})
		p.idle += size
	}
	p.mu.Unlock()
}

// Forget takes a buffer that Get handed out off the budget without
// taking it back: whoever still holds it may read it, and the garbage
// collector has it once nobody does.
func (p *BufferPool) Forget(b []byte) {
	if p == nil {
		return
	}
	_, size := sizeClass(int64(cap(b)))
	p.mu.Lock()
	p.inUse -= size
	p.mu.Unlock()
}

// trim drops idle buffers, the largest first, until in-use and idle
// buffers plus extra bytes fit the budget. p.mu is held.
func (p *BufferPool) trim(extra int64) {
	for c := numClasses - 1; c >= 0 && p.inUse+p.idle+extra > p.budget; c-- {
		for len(p.free[c]) > 0 && p.inUse+p.idle+extra > p.budget {
			p.dropOldest(c)
		}
	}
}

// sweep drops the buffers that have been idle longer than idleTTL. p.mu is
// held.
func (p *BufferPool) sweep(now time.Time) {
	p.lastSweep = now
	if p.idle == 0 {
		return
	}
	for c := range p.free {
		for len(p.free[c]) > 0 && now.Sub(p.free[c][0].since) > idleTTL {
			p.dropOldest(c)
		}
	}
}

// dropOldest forgets the longest idle buffer of class c, leaving it to the
// garbage collector. p.mu is held.
func (p *BufferPool) dropOldest(c int) {
	free := p.free[c]
	p.idle -= int64(cap(free[0].buf))
	n := copy(free, free[1:])
	free[n] = idleBuffer{}
	p.free[c] = free[:n]
}

// sizeClass returns the size class of an n-byte buffer and the capacity of
// its buffers: 4 KiB for small ones, else the next step of a quarter of a
// power of two at or above n.
func sizeClass(n int64) (class int, size int64) {
	if n <= 1<<minClassShift {
		return 0, 1 << minClassShift
	}
	e := bits.Len64(uint64(n-1)) - 1 // 2^e < n <= 2^(e+1)
	step := int64(1) << (e - 2)
	q := (n - 1 - 1<<e) / step // 0..3
	return (e-minClassShift)*4 + int(q) + 1, 1<<e + (q+1)*step
}
