package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// pluginFocus selects the samples of the plugin's own work: resolving the
// session (the session package, body capture and scanning included),
// choosing the upstream (upstreams) and recording the request for the
// admin API. The handler's ServeHTTP is left out because the rest of the
// route (reverse_proxy) runs inside it.
const pluginFocus = `caddy-session-keeping/(session|upstreams|activity)\.|caddy-session-keeping\.\(\*Handler\)\.record`

// profileSummary is a CPU profile as `go tool pprof -top` prints it: the
// whole profile, and the part spent in the plugin's own work.
type profileSummary struct {
	Header     []string       // pprof's summary lines (duration, total samples)
	Total      float64        // seconds of CPU in the profile
	Entries    []profileEntry // every function, heaviest flat first
	Plugin     float64        // seconds of CPU under pluginFocus
	PluginFlat []profileEntry // functions under pluginFocus, heaviest flat first
}

// profileEntry is one function's line.
type profileEntry struct {
	Func            string
	Flat, Cum       float64 // seconds, bytes or objects, as the profile counts
	FlatPct, CumPct float64 // of the whole profile
}

// summarizeProfile runs `go tool pprof -top` on a profile, once whole and
// once focused on the plugin's work, and parses the tables. No node is
// dropped, so shares can be summed.
func summarizeProfile(path string) (*profileSummary, error) {
	all, err := pprofTop(path)
	if err != nil {
		return nil, err
	}
	focused, err := pprofTop(path, "-focus="+pluginFocus)
	if err != nil {
		return nil, err
	}
	for _, e := range all.Entries {
		all.Total += e.Flat
	}
	for _, e := range focused.Entries {
		all.Plugin += e.Flat
	}
	all.PluginFlat = focused.Entries
	return all, nil
}

// pprofTop runs `go tool pprof -top` with extra flags and parses it.
func pprofTop(path string, flags ...string) (*profileSummary, error) {
	args := append([]string{"tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0"}, flags...)
	out, err := exec.Command("go", append(args, path)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %v", err)
	}
	return parsePprofTop(out)
}

// parsePprofTop parses the output of `go tool pprof -top`.
func parsePprofTop(out []byte) (*profileSummary, error) {
	s := &profileSummary{}
	table := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if !table {
			if len(fields) >= 5 && fields[0] == "flat" && fields[1] == "flat%" {
				table = true
				continue
			}
			if strings.HasPrefix(line, "Duration:") {
				s.Header = append(s.Header, strings.TrimSpace(line))
			}
			continue
		}
		if len(fields) < 6 {
			continue
		}
		e := profileEntry{Func: strings.Join(fields[5:], " ")}
		var err error
		if e.Flat, err = parseQuantity(fields[0]); err != nil {
			return nil, err
		}
		if e.FlatPct, err = parsePercent(fields[1]); err != nil {
			return nil, err
		}
		if e.Cum, err = parseQuantity(fields[3]); err != nil {
			return nil, err
		}
		if e.CumPct, err = parsePercent(fields[4]); err != nil {
			return nil, err
		}
		s.Entries = append(s.Entries, e)
	}
	if !table {
		return nil, fmt.Errorf("go tool pprof: no table in its output:\n%s", out)
	}
	return s, sc.Err()
}

// quantityUnits are the unit suffixes pprof prints, longest first, with
// their scale to seconds or bytes (pprof's kB is 1024 bytes).
var quantityUnits = []struct {
	suffix string
	scale  float64
}{
	{"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9},
	{"kB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
	{"s", 1}, {"B", 1},
}

// parseQuantity reads a pprof value: a duration such as 1.20s or 350ms
// (in seconds), a size such as 12.5MB (in bytes), or a plain count.
func parseQuantity(v string) (float64, error) {
	num, scale := v, 1.0
	for _, u := range quantityUnits {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, scale = n, u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("pprof: bad value %q", v)
	}
	return f * scale, nil
}

// parsePercent reads a pprof percentage such as 12.5%.
func parsePercent(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("pprof: bad percentage %q", v)
	}
	return f, nil
}
