package sessionkeeping

import (
	"io"
	"net/http"
	"testing"

	"github.com/sessionkeeping/caddy-session-keeping/internal/capture"
)

// TestQwenCodeResumedSessionsThroughCaddy replays what Qwen Code 0.24.4 sent
// for six sessions, each a first run and a resume with --continue, through
// a real Caddy over four upstreams. Qwen Code sends no session signal, so
// auto-detection alone must keep each session's conversation on one
// upstream, while the six sessions spread over the fleet.
func TestQwenCodeResumedSessionsThroughCaddy(t *testing.T) {
	reqs, err := capture.Load("session/testdata/clients/qwen-code")
	if err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, 4)
	g := startGateway(t, proxyBlock(f, "\t\tlb_policy session_sticky"))

	// upstreams[session][kind] is where each kind of request of the
	// session went: its conversation (-1), its memory extraction (-2).
	type route struct {
		session, seq int
	}
	upstreams := map[route]map[string]bool{}
	decisions := map[string]int{}
	for _, c := range reqs {
		req, err := c.NewHTTP(g.base)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := g.client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", c.Name, resp.StatusCode)
		}
		up := resp.Header.Get("X-Upstream")
		rt := route{c.Session, c.Seq}
		if upstreams[rt] == nil {
			upstreams[rt] = map[string]bool{}
		}
		upstreams[rt][up] = true
		if c.Run == "resume" {
			decisions[resp.Header.Get("X-Decision")]++
		}
	}

	spread := map[string]bool{}
	for s := 1; s <= 6; s++ {
		conv := upstreams[route{s, 1}]
		if len(conv) != 1 {
			t.Errorf("session %d: its conversation went to %v, want one upstream", s, conv)
		}
		for up := range conv {
			spread[up] = true
		}
		if mem := upstreams[route{s, 2}]; len(mem) != 1 {
			t.Errorf("session %d: its memory requests went to %v, want one upstream", s, mem)
		}
	}
	if len(spread) < 2 {
		t.Errorf("six sessions all on %v", spread)
	}
	if decisions["hit"] != 12 {
		t.Errorf("resumed requests decided %v, want 12 hits", decisions)
	}
}
