package main

import "time"

// setupSummary aggregates one setup's rounds of one request kind: each
// figure is the median over rounds, and each ratio the median over rounds
// of the figure divided by A's in the same round, so that drift between
// rounds cancels out.
type setupSummary struct {
	RPS                          float64
	P50, P99, CPUPerReq          time.Duration
	RPSRatio, P99Ratio, CPURatio float64
	Errors                       int
}

// summary aggregates setup i of the kind.
func (k kindResult) summary(i int) setupSummary {
	var s setupSummary
	var rps, p50, p99, cpu, rRPS, rP99, rCPU []float64
	for r, m := range k.Rounds[i] {
		a := k.Rounds[0][r]
		rps = append(rps, m.RPS)
		p50 = append(p50, float64(m.P50))
		p99 = append(p99, float64(m.P99))
		cpu = append(cpu, float64(m.CPUPerReq))
		rRPS = append(rRPS, fraction64(m.RPS, a.RPS))
		rP99 = append(rP99, fraction64(float64(m.P99), float64(a.P99)))
		rCPU = append(rCPU, fraction64(float64(m.CPUPerReq), float64(a.CPUPerReq)))
		s.Errors += m.Errors
	}
	s.RPS = median(rps)
	s.P50, s.P99, s.CPUPerReq = time.Duration(median(p50)), time.Duration(median(p99)), time.Duration(median(cpu))
	s.RPSRatio, s.P99Ratio, s.CPURatio = median(rRPS), median(rP99), median(rCPU)
	return s
}

// ratioOf returns the median over rounds of setup i's CPU time per
// request divided by setup j's in the same round.
func (k kindResult) ratioOf(i, j int) float64 {
	var r []float64
	for n, m := range k.Rounds[i] {
		r = append(r, fraction64(float64(m.CPUPerReq), float64(k.Rounds[j][n].CPUPerReq)))
	}
	return median(r)
}
