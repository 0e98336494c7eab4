package main

import (
	"sync/atomic"
	"time"
)

// phases are the quarters of a measured run, between its events.
const phases = 4

// tally counts the requests of a measured run in equal time buckets, a
// whole number of them per phase, so phase totals are bucket sums.
// Agents add to it concurrently.
type tally struct {
	run      time.Duration
	prompt   []atomic.Int64
	cached   []atomic.Int64
	requests []atomic.Int64
	failed   []atomic.Int64
	dropped  []atomic.Int64
}

// newTally returns a tally of buckets (rounded up to a multiple of the
// phases) over a run of length run.
func newTally(run time.Duration, buckets int) *tally {
	buckets = (buckets + phases - 1) / phases * phases
	return &tally{
		run:      run,
		prompt:   make([]atomic.Int64, buckets),
		cached:   make([]atomic.Int64, buckets),
		requests: make([]atomic.Int64, buckets),
		failed:   make([]atomic.Int64, buckets),
		dropped:  make([]atomic.Int64, buckets),
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

// add records a request that ended at at: its prompt and cached tokens,
// or that it failed.
func (t *tally) add(at time.Duration, prompt, cached int, failed bool) {
	b := t.bucket(at)
	if b < 0 {
		return
	}
	if failed {
		t.failed[b].Add(1)
		return
	}
	t.requests[b].Add(1)
	t.prompt[b].Add(int64(prompt))
	t.cached[b].Add(int64(cached))
}

// drop records a connection lost before an answer, at at.
func (t *tally) drop(at time.Duration) {
	if b := t.bucket(at); b >= 0 {
		t.dropped[b].Add(1)
	}
}

// drops counts the lost connections over buckets [from, to).
func (t *tally) drops(from, to int) (n int64) {
	for b := from; b < to; b++ {
		n += t.dropped[b].Load()
	}
	return n
}

// tokens sums prompt and cached tokens and counts requests and failures
// over buckets [from, to).
func (t *tally) tokens(from, to int) (prompt, cached, requests, failed int64) {
	for b := from; b < to; b++ {
		prompt += t.prompt[b].Load()
		cached += t.cached[b].Load()
		requests += t.requests[b].Load()
		failed += t.failed[b].Load()
	}
	return
}

// phase returns the bucket range of phase p.
func (t *tally) phase(p int) (from, to int) {
	per := len(t.prompt) / phases
	return p * per, (p + 1) * per
}

// buckets is the number of buckets.
func (t *tally) buckets() int { return len(t.prompt) }
