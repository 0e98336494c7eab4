package upstreams

import (
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func TestTierDial(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:8000":               "10.0.0.1:8000",
		"http://10.0.0.1":             "10.0.0.1:80",
		"https://api.example.com":     "api.example.com:443",
		"https://api.example.com/":    "api.example.com:443",
		"https://[::1]:8443":          "[::1]:8443",
		"h2c://inference.local:50051": "inference.local:50051",
	} {
		if got, err := TierDial(in); err != nil || got != want {
			t.Errorf("TierDial(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.0.0.1", "ftp://x.example", "https://api.example.com/v1", "unix//run/x.sock"} {
		if got, err := TierDial(in); err == nil {
			t.Errorf("TierDial(%q) = %q, want an error", in, got)
		}
	}
}

func TestTierSpill(t *testing.T) {
	tiers, err := newTierSet([][]string{{"a:1", "b:1"}, {"c:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ups := reverseproxy.UpstreamPool{
		{Dial: "a:1", MaxRequests: 1}, {Dial: "b:1", MaxRequests: 1}, {Dial: "c:1"}, {Dial: "d:1"},
	}
	for _, u := range ups {
		u.Host = new(reverseproxy.Host)
	}
	home, members := tiers.home(ups, nil)
	if home != 0 || len(members) != 2 {
		t.Fatalf("home tier %d with %d members", home, len(members))
	}
	key := session.NewKey(nil, "s")
	// Room at home: no spill is needed, but a spill goes to tier 2.
	if up := tiers.spill(key, ups, home, nil, 1.25); up == nil || up.Dial != "c:1" {
		t.Fatalf("spill from the home tier: %v", up)
	}
	// Tier 2 excluded (it failed this request): the unlisted last tier.
	if up := tiers.spill(key, ups, home, []string{"c:1"}, 1.25); up == nil || up.Dial != "d:1" {
		t.Fatalf("spill past an excluded tier: %v", up)
	}
	// Without the cheap members in the pool, the home tier is the next.
	if home, _ := tiers.home(ups[2:], nil); home != 1 {
		t.Fatalf("home tier without the cheap members: %d", home)
	}
}
