package main

import (
	"encoding/xml"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReportKeepsTheOtherSection(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "BENCHMARKS.md")
	old := "# old\n\n" + section(sectionOverhead, "## Overhead\n\nkept figures\n\n") + section(sectionAffinity, "## Affinity\n\nold figures\n\n")
	if err := os.WriteFile(out, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &report{machine: describeMachine(), started: time.Now(), affinity: testAffinityResult()}
	if err := r.write(out, filepath.Join(dir, "bench", "affinity.svg")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	got := string(b)
	if !strings.Contains(got, "kept figures") || strings.Contains(got, "old figures") {
		t.Errorf("sections not kept or not replaced:\n%s", got)
	}
	if !strings.Contains(got, "](bench/affinity.svg)") {
		t.Error("no link to the chart")
	}
	if strings.Count(got, "<!-- bench:overhead:begin -->") != 1 {
		t.Error("the kept section is doubled")
	}
	for _, want := range []string{"](bench/scenarios.svg)", "#### Working set 2× the cache", "**Where session_sticky loses.**",
		"working set 2×, TTFT p99: peer_least 50.0 ms (1.600×) against session_sticky's 80.0 ms", "Against the oracle:\n\n- working set 2×, TTFT p99: oracle 40.0 ms (2.000×)",
		"- working set 2×, sticky_lc (`fallback least_conn`: new sessions on the least loaded upstream): cached-token ratio 30.0 % against 90.0 % (0.333×); TTFT p50", "vLLM production-stack", "sgl-router"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bench", "scenarios.svg")); err != nil {
		t.Error(err)
	}
}

func TestChartsAreWellFormed(t *testing.T) {
	res := testAffinityResult()
	svg := affinityChart(res)
	wellFormed(t, svg)
	for _, want := range []string{"session_sticky", "oracle", "u2 killed", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	svg = scenariosChart(res)
	wellFormed(t, svg)
	for _, want := range []string{"peer_least", "2×", "TTFT p99", "<rect"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the scenarios' chart lacks %q", want)
		}
	}
}

func wellFormed(t *testing.T, svg string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed XML: %v", err)
		}
	}
}

func testAffinityResult() *affinityResult {
	res := &affinityResult{MeanPrompt: 5000, WorkingSet: 1e6}
	res.Config.Upstreams, res.Config.Run, res.Config.Workload.Clients = 4, 8*time.Second, 10
	for i, name := range []string{"round_robin", "session_sticky", "oracle"} {
		p := policyResult{Name: name, Prompt: 100, Cached: int64(50 + 20*i)}
		for ph := range p.Phases {
			p.Phases[ph] = phaseResult{Prompt: 100, Cached: int64(50 + 20*i), Imbalance: 1.1}
		}
		for b := range 8 {
			p.Series = append(p.Series, 0.5+0.05*float64(i)+0.01*float64(b))
		}
		res.Policies = append(res.Policies, p)
	}
	// session_sticky loses on TTFT p99 to peer_least at 2×.
	for _, pressure := range []float64{0.5, 2} {
		sc := scenarioResult{Pressure: pressure, CacheTokens: 1000}
		for i, name := range []string{"session_sticky", "peer_least", "oracle", "sticky_lc"} {
			p := policyResult{Name: name, Prompt: 100, Cached: int64(90 - 20*i), Computed: 95, Throughput: 700, Imbalance: 1.1,
				TTFT50: 10 * time.Millisecond, TTFT99: 40 * time.Millisecond}
			if pressure == 2 {
				p.TTFT99 = []time.Duration{80, 50, 40, 20}[i] * time.Millisecond
			}
			sc.Policies = append(sc.Policies, p)
		}
		res.Scenarios = append(res.Scenarios, sc)
	}
	return res
}

func TestReasonsSpanTheRun(t *testing.T) {
	var r reasons
	run := 100 * time.Second
	for _, at := range []time.Duration{26, 49, 30} {
		r.add(errors.New("503 Service Unavailable"), at*time.Second, run)
	}
	r.add(&url.Error{Op: "Post", URL: "http://x", Err: errors.New("read tcp 127.0.0.1:5->127.0.0.1:6: reset")}, 63*time.Second, run)
	if got, want := r.String(), "3× 503 Service Unavailable at 26–49%; 1× read tcp gateway: reset at 63%"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
