package upstreams

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// This file orders a pool's upstreams by cost: "own replicas first, a
// provider when they are full". Tiers are listed cheapest first; an
// upstream named in no tier is in a last tier of its own kind, the
// priciest. Sessions are pinned only in the home tier, the cheapest tier
// with a member in the pool, and kept there by the policy as usual; a
// request that finds no upstream of the home tier able to take it (all
// full, down, or failed for it) goes to the cheapest further tier that has
// one, without moving the pin (decision spill_tier), so the session is back
// home with its next request that finds room.

// tierSet maps dial addresses to their tier.
type tierSet struct {
	of map[string]int // dial address → tier index, cheapest 0
	n  int            // tiers listed; unlisted upstreams are in tier n
}

// newTierSet checks tiers (lists of upstream addresses, cheapest first)
// and indexes them. It returns nil for no tiers.
func newTierSet(tiers [][]string) (*tierSet, error) {
	if len(tiers) == 0 {
		return nil, nil
	}
	t := &tierSet{of: map[string]int{}, n: len(tiers)}
	for i, tier := range tiers {
		if len(tier) == 0 {
			return nil, fmt.Errorf("tiers: tier %d names no upstream", i+1)
		}
		for _, addr := range tier {
			dial, err := TierDial(addr)
			if err != nil {
				return nil, fmt.Errorf("tiers: tier %d: %v", i+1, err)
			}
			if prev, dup := t.of[dial]; dup {
				return nil, fmt.Errorf("tiers: upstream %s is in tier %d and tier %d", addr, prev+1, i+1)
			}
			t.of[dial] = i
		}
	}
	return t, nil
}

// TierDial returns the dial address (host:port) an upstream address of a
// tier stands for: host:port as it is, or a URL such as
// https://api.example.com with its port filled in (80, 443).
func TierDial(addr string) (string, error) {
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", fmt.Errorf("upstream %q: want host:port or scheme://host[:port]", addr)
		}
		host, port := u.Hostname(), u.Port()
		if port == "" {
			switch u.Scheme {
			case "http", "h2c":
				port = "80"
			case "https":
				port = "443"
			default:
				return "", fmt.Errorf("upstream %q: no port for scheme %q", addr, u.Scheme)
			}
		}
		return net.JoinHostPort(host, port), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("upstream %q: want host:port or scheme://host[:port]", addr)
	}
	return addr, nil
}

// tierOf returns the tier of an upstream.
func (t *tierSet) tierOf(u *reverseproxy.Upstream) int {
	if i, ok := t.of[u.Dial]; ok {
		return i
	}
	return t.n
}

// members appends the upstreams of tier to buf and returns it.
func (t *tierSet) members(upstreams reverseproxy.UpstreamPool, tier int, buf reverseproxy.UpstreamPool) reverseproxy.UpstreamPool {
	for _, u := range upstreams {
		if t.tierOf(u) == tier {
			buf = append(buf, u)
		}
	}
	return buf
}

// home returns the home tier of a pool, the cheapest tier with a member
// in it, and its members appended to buf.
func (t *tierSet) home(upstreams reverseproxy.UpstreamPool, buf reverseproxy.UpstreamPool) (int, reverseproxy.UpstreamPool) {
	home := t.n
	for _, u := range upstreams {
		home = min(home, t.tierOf(u))
	}
	return home, t.members(upstreams, home, buf)
}

// spill chooses an upstream for a session's request in the cheapest tier
// beyond from that has an available upstream not in exclude: by rendezvous
// hashing with bounded load within the tier, so a session spills to the
// same upstream while it can. It returns nil when no further tier can take
// the request.
func (t *tierSet) spill(key session.Key, upstreams reverseproxy.UpstreamPool, from int, exclude []string, balanceFactor float64) *reverseproxy.Upstream {
	var buf [16]*reverseproxy.Upstream
	for tier := from + 1; tier <= t.n; tier++ {
		c := pool{upstreams: t.members(upstreams, tier, buf[:0]), exclude: exclude}
		if i := Place(key, c, balanceFactor); i >= 0 {
			return c.upstreams[i]
		}
	}
	return nil
}

// spillSessionless chooses an upstream for a request without a session in
// the cheapest tier beyond from where the fallback policy finds one.
func (t *tierSet) spillSessionless(upstreams reverseproxy.UpstreamPool, from int, choose func(reverseproxy.UpstreamPool) *reverseproxy.Upstream) *reverseproxy.Upstream {
	var buf [16]*reverseproxy.Upstream
	for tier := from + 1; tier <= t.n; tier++ {
		if members := t.members(upstreams, tier, buf[:0]); len(members) > 0 {
			if up := choose(members); up != nil {
				return up
			}
		}
	}
	return nil
}
