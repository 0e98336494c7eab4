package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// policyStyles are the colours and dash patterns of the chart's lines.
var policyStyles = map[string]struct {
	color string
	dash  string
	width float64
}{
	"round_robin":    {"#4e79a7", "", 1.5},
	"least_conn":     {"#9c755f", "", 1.5},
	"random":         {"#76b7b2", "", 1.5},
	"header":         {"#edc948", "", 1.5},
	"session_sticky": {"#e15759", "", 3},
	"sticky_bf110":   {"#ff9da7", "6 3", 2},
	"sticky_bf100":   {"#bab0ac", "6 3", 2},
	"sticky_lc":      {"#b07aa1", "6 3", 2},
	"sticky_tiers":   {"#f28e2b", "6 3", 2},
	"peer_ring":      {"#b6992d", "", 1.5},
	"peer_prefix":    {"#499894", "", 2},
	"peer_least":     {"#d37295", "", 1.5},
	"oracle":         {"#59a14f", "2 3", 2},
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH             = 900, 440
	plotL, plotR, plotT, plotB = 64, 700, 56, 390
)

// affinityChart draws the cached-token ratio of each policy over the
// measured run, one line per policy, with the events marked.
func affinityChart(res *affinityResult) string {
	lo := 1.0
	for _, p := range res.Policies {
		for _, v := range p.Series {
			lo = min(lo, v)
		}
	}
	// The axis starts at a round tenth, at least 0.05 below the lowest point.
	lo = math.Max(0, math.Floor(lo*10-0.5)/10)
	x := func(f float64) float64 { return plotL + f*(plotR-plotL) }
	y := func(v float64) float64 { return plotB - (v-lo)/(1-lo)*(plotB-plotT) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	buckets := len(res.Policies[0].Series)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">Cached-token ratio over the measured run, per policy</text>`+"\n", plotL)
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%d conversations, %d engines (+1 at 75 %%), %s measured, one point per %s</text>`+"\n",
		plotL, res.Config.Workload.Clients, res.Config.Upstreams, res.Config.Run, res.Config.Run/time.Duration(buckets))

	// Grid and y labels, every tenth (every twentieth on a short axis).
	step := 0.1
	if 1-lo <= 0.3 {
		step = 0.05
	}
	for v := lo; v <= 1.0001; v += step {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotL, y(v), plotR, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%.0f %%</text>`+"\n", plotL-6, y(v)+4, 100*v)
	}
	// X axis: percent of the run.
	for f := 0.0; f <= 1.0001; f += 0.25 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%.0f %%</text>`+"\n", x(f), plotB+18, 100*f)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">time, in percent of the measured run</text>`+"\n", x(0.5), plotB+38)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", plotL, plotT, plotR-plotL, plotB-plotT)

	// Events.
	for i, ev := range runEvents {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#666" stroke-dasharray="4 4"/>`+"\n", x(ev.at), plotT, x(ev.at), plotB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#444" font-size="11">%s</text>`+"\n", x(ev.at)+3, plotB-8-14*(i%2), html.EscapeString(ev.label))
	}

	// One line per policy, a point at the middle of each bucket.
	for _, p := range res.Policies {
		st := policyStyles[p.Name]
		var pts []string
		n := len(p.Series)
		for i, v := range p.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x((float64(i)+0.5)/float64(n)), y(v)))
		}
		dash := ""
		if st.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`+"\n",
			st.color, st.width, dash, strings.Join(pts, " "))
	}

	// Legend, with each policy's ratio over the run.
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">policy (whole run)</text>`+"\n", plotR+20, plotT+4)
	for i, p := range res.Policies {
		st := policyStyles[p.Name]
		ly := plotT + 26 + 22*i
		dash := ""
		if st.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, st.dash)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"%s/>`+"\n",
			plotR+20, ly-4, plotR+48, ly-4, st.color, st.width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s (%s)</text>`+"\n", plotR+54, ly, html.EscapeString(p.Name), pct(p.Ratio()))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
