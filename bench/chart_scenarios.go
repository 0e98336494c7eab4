package main

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
)

// scenariosChart draws, per cache-pressure scenario, a bar per policy: the
// cached-token ratio in the left panel, the TTFT p99 in the right one.
func scenariosChart(res *affinityResult) string {
	const (
		w, h       = 900, 430
		top, base  = 70, 340 // the panels' top and baseline
		panelW     = 380
		leftL      = 60
		rightL     = leftL + panelW + 70
		groupSpace = 0.8 // of a group's width, the rest is the gap
	)
	var names []string
	var worst float64
	for _, sc := range res.Scenarios {
		for _, p := range sc.Policies {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
			worst = max(worst, p.TTFT99.Seconds()*1000)
		}
	}
	ttftTop := niceCeil(worst)

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">Cache pressure: cached-token ratio and time to first token, per policy</text>`+"\n", leftL)
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%d conversations, %d engines; scenario = working set over the fleet's whole cache</text>`+"\n",
		leftL, res.Config.Workload.Clients, res.Config.Upstreams)

	panel := func(left float64, title string, top0 float64, label func(v float64) string, value func(policyResult) float64, topV float64, better string) {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-weight="bold">%s</text><text x="%.0f" y="%d" fill="#555" text-anchor="end">%s</text>`+"\n",
			left, top-12, html.EscapeString(title), left+panelW, top-12, better)
		y := func(v float64) float64 { return base - (v-top0)/(topV-top0)*(base-top) }
		for i := 0; i <= 5; i++ {
			v := top0 + (topV-top0)*float64(i)/5
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y(v), left+panelW, y(v))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", left-6, y(v)+4, label(v))
		}
		groupW := float64(panelW) / float64(max(len(res.Scenarios), 1))
		for g, sc := range res.Scenarios {
			barW := groupW * groupSpace / float64(max(len(names), 1))
			x0 := left + float64(g)*groupW + groupW*(1-groupSpace)/2
			for _, p := range sc.Policies {
				i := slices.Index(names, p.Name)
				v := min(value(p), topV)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %g×: %s</title></rect>`+"\n",
					x0+float64(i)*barW, y(v), barW-1, base-y(v), policyStyles[p.Name].color, p.Name, sc.Pressure, label(value(p)))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%g×</text>`+"\n", left+(float64(g)+0.5)*groupW, base+18, sc.Pressure)
		}
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="#999"/>`+"\n", left, base, left+panelW, base)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#333">working set / cache</text>`+"\n", left+panelW/2, base+36)
	}
	panel(leftL, "Cached-token ratio", 0, func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) }, policyResult.Ratio, 1, "higher is better")
	panel(rightL, "TTFT p99", 0, func(v float64) string { return fmt.Sprintf("%.0f ms", v) },
		func(p policyResult) float64 { return p.TTFT99.Seconds() * 1000 }, ttftTop, "lower is better")

	// Legend.
	for i, n := range names {
		x := leftL + i*150
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x, h-30, policyStyles[n].color, x+20, h-19, html.EscapeString(n))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2, 3 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 3, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
