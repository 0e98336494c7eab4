package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// sampleEvery is how often the load sampler looks at the engines.
const sampleEvery = 20 * time.Millisecond

// loadSampler measures load imbalance: every sampleEvery it reads the
// requests in flight at each engine that is in the pool and alive, and,
// when any request is in flight, takes max/mean over those engines. The
// imbalance of a phase is the mean of its samples: 1 is perfectly even;
// with four upstreams, 1.25 means the busiest one carries a quarter more
// than its share.
//
// It also samples the working set: the tokens of every client's
// conversation so far.
type loadSampler struct {
	engines    []*engine
	pool       *atomic.Int32
	tally      *tally
	t0         time.Time
	workingSet func() int64

	mu      sync.Mutex
	sum     [phases]float64
	counts  [phases]int
	wsSum   float64
	wsCount int
}

func newLoadSampler(engines []*engine, pool *atomic.Int32, t *tally, t0 time.Time, workingSet func() int64) *loadSampler {
	return &loadSampler{engines: engines, pool: pool, tally: t, t0: t0, workingSet: workingSet}
}

// run samples until stop is closed.
func (s *loadSampler) run(stop <-chan struct{}) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		phase := s.tally.phaseOf(time.Since(s.t0))
		if phase < 0 {
			continue
		}
		ws := float64(s.workingSet())
		v, ok := s.sample()
		s.mu.Lock()
		if ok {
			s.sum[phase] += v
			s.counts[phase]++
		}
		s.wsSum += ws
		s.wsCount++
		s.mu.Unlock()
	}
}

// sample returns max/mean of the in-flight requests over the live pool
// members, or false when nothing is in flight.
func (s *loadSampler) sample() (float64, bool) {
	var total, most int64
	n := 0
	for _, e := range s.engines[:s.pool.Load()] {
		if !e.alive() {
			continue
		}
		v := e.inFlight.Load()
		total += v
		most = max(most, v)
		n++
	}
	if total == 0 {
		return 0, false
	}
	return float64(most) * float64(n) / float64(total), true
}

// mean returns the mean imbalance of a phase, or of the whole run for -1.
func (s *loadSampler) mean(phase int) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum float64
	var n int
	for p := range phases {
		if phase < 0 || p == phase {
			sum += s.sum[p]
			n += s.counts[p]
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// meanWorkingSet returns the mean sampled working set, in tokens.
func (s *loadSampler) meanWorkingSet() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wsCount == 0 {
		return 0
	}
	return s.wsSum / float64(s.wsCount)
}
