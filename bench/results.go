package main

import "time"

// policyResult is one policy's run.
type policyResult struct {
	Name      string
	Prompt    int64 // prompt tokens of the answered requests
	Cached    int64 // of which the engines had in cache
	Requests  int64 // answered
	Failed    int64
	Phases    [phases]phaseResult
	Series    []float64 // cached-token ratio per bucket
	Imbalance float64   // mean over samples with requests in flight
	Decisions map[string]uint64

	// Prompt tokens whose prefix some engine had computed before: the
	// ceiling of the cached tokens.
	Computed int64
	// Times to first token over the run, and answered requests per
	// second of it.
	TTFT50, TTFT99 time.Duration
	Throughput     float64
	// The mean working set over the run: the tokens of every client's
	// conversation so far.
	WorkingSet float64

	// Connections to the gateway lost before an answer (the request was
	// resent), and how many of them came just after a config reload.
	Dropped, DroppedAtReload int64
	// Answers cut off after they started (the request was resent).
	Cut int64

	// Why requests failed, why connections were lost and why answers
	// were cut off, most frequent first.
	FailureReasons, DropReasons, CutReasons string

	// Every answer of the run, warm-up included: the usage the engines
	// reported, and the usage session_keeping read from the answers.
	EnginePrompt, EngineCached int64
	PluginPrompt, PluginCached int64

	// What each engine served over the whole run, warm-up included.
	PerEngine []engineTotals
}

// engineTotals is what one engine served.
type engineTotals struct {
	Name             string
	Requests, Prompt int64
}

// phaseResult is one phase of a policy's run.
type phaseResult struct {
	Prompt, Cached, Computed, Requests, Failed, Dropped, Cut int64
	Imbalance                                                float64
	TTFT50, TTFT99                                           time.Duration
	Throughput                                               float64 // answered requests per second
}

// Ratio is the cached-token ratio.
func (p phaseResult) Ratio() float64 { return fraction(p.Cached, p.Prompt) }

// Ratio is the cached-token ratio of the whole run.
func (p policyResult) Ratio() float64 { return fraction(p.Cached, p.Prompt) }

// Ceiling is the share of prompt tokens some engine had computed before:
// the most any router could have found cached.
func (p policyResult) Ceiling() float64 { return fraction(p.Computed, p.Prompt) }

func fraction(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// summarize turns a run's tally and load samples into its result.
func summarize(name string, t *tally, s *loadSampler) policyResult {
	r := policyResult{Name: name}
	for b := range t.buckets() {
		sums := t.tokens(b, b+1)
		r.Series = append(r.Series, fraction(sums.Cached, sums.Prompt))
	}
	phaseLen := t.run.Seconds() / phases
	for i := range phases {
		from, to := t.phase(i)
		sums := t.tokens(from, to)
		ttft := t.ttfts(i)
		dropped, cut := t.drops(from, to)
		r.Phases[i] = phaseResult{
			Prompt: sums.Prompt, Cached: sums.Cached, Computed: sums.Computed,
			Requests: sums.Requests, Failed: sums.Failed, Dropped: dropped, Cut: cut,
			Imbalance: s.mean(i), TTFT50: percentile(ttft, 0.50), TTFT99: percentile(ttft, 0.99),
			Throughput: float64(sums.Requests) / phaseLen,
		}
		ph := r.Phases[i]
		r.Dropped += ph.Dropped
		r.Cut += ph.Cut
		r.Prompt += ph.Prompt
		r.Cached += ph.Cached
		r.Computed += ph.Computed
		r.Requests += ph.Requests
		r.Failed += ph.Failed
	}
	ttft := t.ttfts(-1)
	r.TTFT50, r.TTFT99 = percentile(ttft, 0.50), percentile(ttft, 0.99)
	r.Throughput = float64(r.Requests) / t.run.Seconds()
	r.Imbalance = s.mean(-1)
	r.WorkingSet = s.meanWorkingSet()
	return r
}
