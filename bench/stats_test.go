package main

import (
	"testing"
	"time"
)

func TestPercentileAndMedian(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Errorf("p99 of 1..100: %d", p)
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Errorf("p50 of 1..100: %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("p50 of nothing: %d", p)
	}
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 1 2: %g", m)
	}
	if m := median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median of 4 1 2 3: %g", m)
	}
}

func TestKeepQuietest(t *testing.T) {
	m := func(rps float64) []measurement {
		out := make([]measurement, len(overheadSetups))
		for i := range out {
			out[i].RPS = rps
		}
		return out
	}
	rounds := []round{{m(1), 0.5}, {m(2), 0.1}, {m(3), 0.9}, {m(4), 0.0}}
	got := keepQuietest(rounds, 2)
	if len(got) != len(overheadSetups) || len(got[0]) != 2 || got[0][0].RPS != 2 || got[0][1].RPS != 4 || got[3][1].RPS != 4 {
		t.Errorf("kept %+v, want rounds 2 and 4 in order", got)
	}
}
