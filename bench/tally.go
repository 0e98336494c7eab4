package main

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// phases are the quarters of a measured run, between its events.
const phases = 4

// tally counts the requests of a measured run in equal time buckets, a
// whole number of them per phase, so phase totals are bucket sums.
// Agents add to it concurrently: the counters are atomic, the times to
// first token are appended under mu.
type tally struct {
	run      time.Duration
	prompt   []atomic.Int64
	cached   []atomic.Int64
	computed []atomic.Int64 // prompt tokens some engine had computed before
	requests []atomic.Int64
	failed   []atomic.Int64
	dropped  []atomic.Int64
	cutoff   []atomic.Int64 // answers cut off after they started

	mu   sync.Mutex
	ttft [phases][]time.Duration
}

// answer is what one answered request adds to the tally.
type answer struct {
	prompt, cached, computed int
	ttft                     time.Duration
}

// newTally returns a tally of buckets (rounded up to a multiple of the
// phases) over a run of length run.
func newTally(run time.Duration, buckets int) *tally {
	buckets = (buckets + phases - 1) / phases * phases
	return &tally{
		run:      run,
		prompt:   make([]atomic.Int64, buckets),
		cached:   make([]atomic.Int64, buckets),
		computed: make([]atomic.Int64, buckets),
		requests: make([]atomic.Int64, buckets),
		failed:   make([]atomic.Int64, buckets),
		dropped:  make([]atomic.Int64, buckets),
		cutoff:   make([]atomic.Int64, buckets),
	}
}

// bucket returns the bucket of a time since the run started, or -1
// outside the run (the warm-up, or after the end).
func (t *tally) bucket(at time.Duration) int {
	if at < 0 || at >= t.run {
		return -1
	}
	return int(int64(at) * int64(len(t.prompt)) / int64(t.run))
}

// phaseOf returns the phase of a time since the run started, or -1.
func (t *tally) phaseOf(at time.Duration) int {
	b := t.bucket(at)
	if b < 0 {
		return -1
	}
	return b * phases / len(t.prompt)
}

// answer records a request answered at at.
func (t *tally) answer(at time.Duration, a answer) {
	b := t.bucket(at)
	if b < 0 {
		return
	}
	t.requests[b].Add(1)
	t.prompt[b].Add(int64(a.prompt))
	t.cached[b].Add(int64(a.cached))
	t.computed[b].Add(int64(a.computed))
	p := b * phases / len(t.prompt)
	t.mu.Lock()
	t.ttft[p] = append(t.ttft[p], a.ttft)
	t.mu.Unlock()
}

// fail records a request that failed at at.
func (t *tally) fail(at time.Duration) {
	if b := t.bucket(at); b >= 0 {
		t.failed[b].Add(1)
	}
}

// drop records a connection lost before an answer, at at.
func (t *tally) drop(at time.Duration) {
	if b := t.bucket(at); b >= 0 {
		t.dropped[b].Add(1)
	}
}

// cut records an answer cut off at at, after it started.
func (t *tally) cut(at time.Duration) {
	if b := t.bucket(at); b >= 0 {
		t.cutoff[b].Add(1)
	}
}

// drops counts the lost connections and the answers cut off over
// buckets [from, to).
func (t *tally) drops(from, to int) (dropped, cut int64) {
	for b := from; b < to; b++ {
		dropped += t.dropped[b].Load()
		cut += t.cutoff[b].Load()
	}
	return dropped, cut
}

// tokens sums prompt, cached and computed tokens and counts requests and
// failures over buckets [from, to).
func (t *tally) tokens(from, to int) (s tokenSums) {
	for b := from; b < to; b++ {
		s.Prompt += t.prompt[b].Load()
		s.Cached += t.cached[b].Load()
		s.Computed += t.computed[b].Load()
		s.Requests += t.requests[b].Load()
		s.Failed += t.failed[b].Load()
	}
	return s
}

// tokenSums are a period's totals.
type tokenSums struct {
	Prompt, Cached, Computed, Requests, Failed int64
}

// ttfts returns the sorted times to first token of a phase, or of the
// whole run for -1.
func (t *tally) ttfts(phase int) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for p := range phases {
		if phase < 0 || p == phase {
			out = append(out, t.ttft[p]...)
		}
	}
	slices.Sort(out)
	return out
}

// phase returns the bucket range of phase p.
func (t *tally) phase(p int) (from, to int) {
	per := len(t.prompt) / phases
	return p * per, (p + 1) * per
}

// buckets is the number of buckets.
func (t *tally) buckets() int { return len(t.prompt) }
