package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// report is what one run of the program found; write turns it into
// BENCHMARKS.md and the chart.
type report struct {
	machine  machine
	started  time.Time
	elapsed  time.Duration
	args     string // the flags the program ran with
	overhead *overheadResult
	affinity *affinityResult
}

// The report's sections, each between markers, so that a run of one part
// replaces its section and keeps the other's.
const (
	sectionOverhead = "overhead"
	sectionAffinity = "affinity"
)

// write writes the report to out and the chart to svg, keeping the
// section of a part that did not run from the existing report.
func (r *report) write(out, svg string) error {
	old, _ := os.ReadFile(out)
	var b strings.Builder
	b.WriteString(r.header())

	if r.overhead != nil {
		b.WriteString(section(sectionOverhead, r.overheadSection()))
	} else {
		b.WriteString(keptSection(old, sectionOverhead, "-part overhead"))
	}

	if r.affinity != nil {
		if err := os.MkdirAll(filepath.Dir(svg), 0o755); err != nil {
			return err
		}
		// The scenarios' chart goes next to the run's.
		scenariosSVG := filepath.Join(filepath.Dir(svg), "scenarios.svg")
		if len(r.affinity.Policies) > 0 {
			if err := os.WriteFile(svg, []byte(affinityChart(r.affinity)), 0o644); err != nil {
				return err
			}
		}
		if len(r.affinity.Scenarios) > 0 {
			if err := os.WriteFile(scenariosSVG, []byte(scenariosChart(r.affinity)), 0o644); err != nil {
				return err
			}
		}
		b.WriteString(section(sectionAffinity, r.affinitySection(relLink(out, svg), relLink(out, scenariosSVG))))
	} else {
		b.WriteString(keptSection(old, sectionAffinity, "-part affinity"))
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// relLink returns the link from the report out to file.
func relLink(out, file string) string {
	link, err := filepath.Rel(filepath.Dir(out), file)
	if err != nil {
		link = file
	}
	return filepath.ToSlash(link)
}

func (r *report) header() string {
	return `# Benchmarks

Written by ` + "`make bench`" + `, the program in [` + "`bench/`" + `](bench): two parts, the
**overhead** of ` + "`session_keeping`" + ` + ` + "`lb_policy session_sticky`" + ` against
stock Caddy policies, and the **affinity** it buys: the share of prompt
tokens that inference engines find in their prefix cache, the time to
first token and the throughput, per load-balancing policy: through an
upstream failure and a scale-out, and with caches too small for the
working set, against the routers of vLLM's production stack and SGLang.

- Rerun both parts: ` + "`make bench`" + ` (about 8 minutes on 2 cores; larger
  runs with ` + "`-conversations`" + `, ` + "`-run`" + `, ` + "`-scenario-run`" + ` and ` + "`-pressures`" + `). One
  part: ` + "`go run ./bench -part overhead`" + ` or ` + "`go run ./bench -part affinity`" + `; the
  other part's section below is kept as it is. Sizes and durations:
  ` + "`go run ./bench -h`" + `; with make, ` + "`make bench BENCHFLAGS='-rounds 10'`" + `.
- ` + "`-keep`" + ` keeps the scratch directory: the Caddyfiles, Caddy's logs and the
  CPU profiles (for ` + "`go tool pprof`" + `).
- Each section says when, where and with which flags it was measured.

`
}

// section wraps body in the markers of a section.
func section(name, body string) string {
	return fmt.Sprintf("<!-- bench:%s:begin -->\n%s<!-- bench:%s:end -->\n\n", name, body, name)
}

// keptSection returns a section of the old report, or a note that the
// part has not been run.
func keptSection(old []byte, name, flag string) string {
	begin := []byte(fmt.Sprintf("<!-- bench:%s:begin -->\n", name))
	end := []byte(fmt.Sprintf("<!-- bench:%s:end -->\n", name))
	if i := bytes.Index(old, begin); i >= 0 {
		if j := bytes.Index(old[i:], end); j >= 0 {
			return string(old[i:i+j+len(end)]) + "\n"
		}
	}
	return section(name, fmt.Sprintf("## %s\n\nNot measured yet: `go run ./bench %s`.\n\n", strings.ToUpper(name[:1])+name[1:], flag))
}

// measuredOn describes the run, for the top of each section.
func (r *report) measuredOn() string {
	m := r.machine
	kernel := ""
	if m.Kernel != "" {
		kernel = ", Linux " + m.Kernel
	}
	return fmt.Sprintf("Measured %s on %s (%d cores%s), %s, %s. The whole run (`go run ./bench%s`) took %s.\n\n",
		r.started.UTC().Format("2006-01-02 15:04 MST"), m.CPU, m.Cores, kernel, m.Go, m.OS, r.args,
		r.elapsed.Round(time.Second))
}

// table writes a Markdown table.
func table(b *strings.Builder, head []string, rows [][]string) {
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n")
}

// targetList writes targets as a list.
func targetList(b *strings.Builder, ts []target) {
	for _, t := range ts {
		b.WriteString(t.String() + "\n")
	}
	b.WriteString("\n")
}
