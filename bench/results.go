package main

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

	// Connections to the gateway lost before an answer (the request was
	// resent), and how many of them came just after a config reload.
	Dropped, DroppedAtReload int64

	// Why requests failed, and why connections were lost, most frequent
	// first.
	FailureReasons, DropReasons string

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
	Prompt, Cached, Requests, Failed, Dropped int64
	Imbalance                                 float64
}

// Ratio is the cached-token ratio.
func (p phaseResult) Ratio() float64 { return fraction(p.Cached, p.Prompt) }

// Ratio is the cached-token ratio of the whole run.
func (p policyResult) Ratio() float64 { return fraction(p.Cached, p.Prompt) }

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
		p, c, _, _ := t.tokens(b, b+1)
		r.Series = append(r.Series, fraction(c, p))
	}
	for i := range phases {
		from, to := t.phase(i)
		ph := &r.Phases[i]
		ph.Prompt, ph.Cached, ph.Requests, ph.Failed = t.tokens(from, to)
		ph.Dropped = t.drops(from, to)
		ph.Imbalance = s.mean(i)
		r.Dropped += ph.Dropped
		r.Prompt += ph.Prompt
		r.Cached += ph.Cached
		r.Requests += ph.Requests
		r.Failed += ph.Failed
	}
	r.Imbalance = s.mean(-1)
	return r
}
