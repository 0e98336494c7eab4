package main

import (
	"encoding/xml"
	"io"
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
}

func TestChartIsWellFormed(t *testing.T) {
	svg := affinityChart(testAffinityResult())
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
	for _, want := range []string{"session_sticky", "oracle", "u2 killed", "<polyline"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
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
	return res
}
