package sessionkeeping

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// adminGet fetches an admin path and decodes its JSON into v, returning
// the status.
func (g *gw) adminDo(method, path string, v any) int {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.admin+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			g.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

type sessionJSON struct {
	Key          string `json:"key"`
	ID           string `json:"id"`
	Source       string `json:"source"`
	Requests     int    `json:"requests"`
	LastDecision string `json:"last_decision"`
	LastUpstream string `json:"last_upstream"`
	Pins         []struct {
		Pool     string `json:"pool"`
		Upstream string `json:"upstream"`
	} `json:"pins"`
}

type requestJSON struct {
	Method   string `json:"method"`
	Path     string `json:"path"`
	Model    string `json:"model"`
	Upstream string `json:"upstream"`
	Status   int    `json:"status"`
	Decision string `json:"decision"`
	Retries  int    `json:"retries"`
}

type memberJSON struct {
	Pool      string            `json:"pool"`
	Dial      string            `json:"dial"`
	LivePins  int               `json:"live_pins"`
	InFlight  int               `json:"in_flight"`
	Healthy   bool              `json:"healthy"`
	Available bool              `json:"available"`
	Decisions map[string]uint64 `json:"decisions"`
}

func keyOf(id string) string { return session.NewKey([]string{""}, id).String() }

func TestAdminAPI(t *testing.T) {
	f := newFleet(t, 3)
	g := startGatewayWith(t, gwOptions{admin: true}, proxyBlock(f, "\t\tlb_policy session_sticky"))

	var before struct{ Upstreams []memberJSON }
	g.adminDo("GET", "/session_keeping/upstreams", &before)

	// Three sessions with 1, 3 and 5 requests, and two without a session.
	prefix := t.Name()
	counts := map[string]int{prefix + "-a": 1, prefix + "-b": 3, prefix + "-c": 5}
	for _, sid := range []string{prefix + "-a", prefix + "-b", prefix + "-c"} {
		for turn := 0; turn < counts[sid]; turn++ {
			if r := g.call("/v1/chat/completions", sid, turn, turn%2 == 1); !r.ok() {
				t.Fatalf("%s turn %d: %v", sid, turn, r)
			}
		}
	}
	for i := 0; i < 2; i++ {
		if r := g.call("/v1/models", "", i, false); !r.ok() {
			t.Fatal(r)
		}
	}

	// The list, newest activity first.
	var list struct{ Sessions []sessionJSON }
	if st := g.adminDo("GET", "/session_keeping/sessions?limit=3", &list); st != 200 {
		t.Fatalf("list: %d", st)
	}
	if len(list.Sessions) != 3 || list.Sessions[0].Key != keyOf(prefix+"-c") || list.Sessions[2].Key != keyOf(prefix+"-a") {
		t.Fatalf("list order: %+v", list.Sessions)
	}
	for _, s := range list.Sessions {
		sid := map[string]string{keyOf(prefix + "-a"): prefix + "-a", keyOf(prefix + "-b"): prefix + "-b", keyOf(prefix + "-c"): prefix + "-c"}[s.Key]
		if s.Requests != counts[sid] {
			t.Errorf("%s: %d requests, want %d", sid, s.Requests, counts[sid])
		}
		if s.ID != "" {
			t.Errorf("raw id %q shown without record_ids raw", s.ID)
		}
		if len(s.Pins) != 1 || s.Pins[0].Upstream != s.LastUpstream || s.LastDecision != "hit" && counts[sid] > 1 {
			t.Errorf("%s: pins %+v, last upstream %q, last decision %q", sid, s.Pins, s.LastUpstream, s.LastDecision)
		}
	}
	// Filters: each answer holds the session it was asked about, and
	// only sessions that match.
	c := list.Sessions[0]
	var byUpstream struct{ Sessions []sessionJSON }
	if st := g.adminDo("GET", "/session_keeping/sessions?upstream="+c.LastUpstream, &byUpstream); st != 200 {
		t.Fatalf("upstream filter: %d", st)
	}
	if !slices.ContainsFunc(byUpstream.Sessions, func(s sessionJSON) bool { return s.Key == c.Key }) {
		t.Errorf("upstream filter dropped %s: %+v", c.Key, byUpstream.Sessions)
	}
	for _, s := range byUpstream.Sessions {
		if s.LastUpstream != c.LastUpstream && (len(s.Pins) == 0 || s.Pins[0].Upstream != c.LastUpstream) {
			t.Errorf("upstream filter let through %+v", s)
		}
	}
	for _, tc := range []struct {
		source   string
		wantThis bool // whether c (a header session) is in the answer
	}{{"header", true}, {"auto", false}} {
		var bySource struct{ Sessions []sessionJSON }
		if st := g.adminDo("GET", "/session_keeping/sessions?source="+tc.source, &bySource); st != 200 {
			t.Fatalf("source filter %s: %d", tc.source, st)
		}
		if got := slices.ContainsFunc(bySource.Sessions, func(s sessionJSON) bool { return s.Key == c.Key }); got != tc.wantThis {
			t.Errorf("source=%s: %s in the answer = %v, want %v", tc.source, c.Key, got, tc.wantThis)
		}
		for _, s := range bySource.Sessions {
			if sourceKind(s.Source) != tc.source {
				t.Errorf("source filter %s let through %+v", tc.source, s)
			}
		}
	}

	// One session, newest request first.
	var one struct {
		Session  sessionJSON
		Requests []requestJSON
	}
	if st := g.adminDo("GET", "/session_keeping/sessions/"+keyOf(prefix+"-c"), &one); st != 200 {
		t.Fatalf("one: %d", st)
	}
	if len(one.Requests) != 5 || one.Requests[4].Decision != "new" || one.Requests[0].Decision != "hit" ||
		one.Requests[0].Status != 200 || one.Requests[0].Method != "POST" || one.Requests[0].Path != "/v1/chat/completions" || one.Requests[0].Model != "m" && one.Requests[0].Model != "" {
		t.Fatalf("requests: %+v", one.Requests)
	}

	// The upstreams: every member, with counts that add up.
	var after struct{ Upstreams []memberJSON }
	g.adminDo("GET", "/session_keeping/upstreams", &after)
	delta := map[string]uint64{}
	pins := 0
	for _, m := range after.Upstreams {
		if !strings.Contains(f.addrs(), m.Dial) {
			continue
		}
		if !m.Healthy || !m.Available {
			t.Errorf("%s not healthy/available", m.Dial)
		}
		pins += m.LivePins
		for k, v := range m.Decisions {
			delta[k] += v
		}
		for _, b := range before.Upstreams {
			if b.Dial == m.Dial {
				for k, v := range b.Decisions {
					delta[k] -= v
				}
			}
		}
	}
	members := 0
	for _, m := range after.Upstreams {
		if strings.Contains(f.addrs(), m.Dial) {
			members++
		}
	}
	if members != 3 || pins != 3 || delta["new"] != 3 || delta["hit"] != 6 || delta["none"] != 2 {
		t.Fatalf("upstreams: %d members, %d pins, decisions %v; want 3, 3, new 3 hit 6 none 2", members, pins, delta)
	}

	// Delete: the next request is placed afresh.
	if st := g.adminDo("DELETE", "/session_keeping/sessions/"+keyOf(prefix+"-b"), nil); st != 200 {
		t.Fatalf("delete: %d", st)
	}
	if r := g.call("/v1/chat/completions", prefix+"-b", 9, false); r.decision != "new" {
		t.Fatalf("after delete: %v, want new", r)
	}

	// Errors.
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/session_keeping/sessions/" + keyOf("never-seen"), 404},
		{"DELETE", "/session_keeping/sessions/" + keyOf("never-seen"), 404},
		{"GET", "/session_keeping/sessions/not-a-key", 404},
		{"POST", "/session_keeping/sessions", 405},
		{"PUT", "/session_keeping/sessions/" + keyOf(prefix+"-a"), 405},
		{"DELETE", "/session_keeping/upstreams", 405},
		{"GET", "/session_keeping/sessions?limit=zero", 400},
		{"GET", "/session_keeping/nothing", 404},
	} {
		if st := g.adminDo(tc.method, tc.path, nil); st != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, st, tc.want)
		}
	}
}

// scrape returns the value of each sample of the named metrics.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "caddy_session_keeping_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetrics(t *testing.T) {
	f := newFleet(t, 2)
	g := startGatewayWith(t, gwOptions{admin: true}, proxyBlock(f, "\t\tlb_policy session_sticky"))
	before := scrape(t, g.admin+"/metrics")

	sid := t.Name()
	for turn := 0; turn < 4; turn++ {
		if r := g.call("/v1/chat/completions", sid, turn, false); !r.ok() {
			t.Fatal(r)
		}
	}
	g.call("/v1/models", "", 0, false)
	// An invalid header value is skipped, then the body field is used.
	req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(`{"model":"m","session_id":"`+sid+`-body"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", strings.Repeat("x", 300))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	after := scrape(t, g.admin+"/metrics")
	d := func(name string) float64 { return after[name] - before[name] }
	checks := map[string]float64{
		`caddy_session_keeping_resolutions_total{source="header"}`: 4,
		`caddy_session_keeping_resolutions_total{source="body"}`:   1,
		`caddy_session_keeping_resolutions_total{source="none"}`:   1,
		`caddy_session_keeping_invalid_ids_total`:                  1,
		`caddy_session_keeping_decisions_total{decision="new"}`:    2,
		`caddy_session_keeping_decisions_total{decision="hit"}`:    3,
		`caddy_session_keeping_decisions_total{decision="none"}`:   1,
	}
	for name, want := range checks {
		if got := d(name); got != want {
			t.Errorf("%s rose by %v, want %v", name, got, want)
		}
	}
	if after["caddy_session_keeping_pins"] < 2 {
		t.Errorf("pins gauge %v, want at least the 2 sessions just pinned", after["caddy_session_keeping_pins"])
	}
	for _, name := range []string{"caddy_session_keeping_pin_evictions_total", "caddy_session_keeping_store_errors_total", "caddy_session_keeping_history_dropped_total"} {
		if _, ok := after[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint(after))
	}
}
