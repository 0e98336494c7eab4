package main

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// affinityPolicy is one load-balancing set-up of the affinity part.
type affinityPolicy struct {
	name    string
	lb      string // the lb_policy directive, with its block
	keeping bool   // session_keeping resolves sessions in front
	tiered  bool   // lb gets tiers: the expensive upstream apart, the rest cheap

	// routed makes the router that picks each request's engine in the
	// load generator (lb is then Caddy's cookie policy): the oracle, and
	// the peers' algorithms.
	routed func(engines []*engine, pool *atomic.Int32) router
}

// byCookie is the lb of the policies whose load generator picks the
// engine: Caddy's cookie policy, least_conn for a request without the
// cookie.
var byCookie = fmt.Sprintf("lb_policy cookie %s %s {\n\tfallback least_conn\n}", oracleCookie, oracleSecret)

// The tiered scenario: the upstream at expensiveIndex (u4) is a pricier
// tier of its own, the others are the cheap tier, and every upstream
// serves at most tierRoom requests at once, so that the cheap tier fills
// at the workload's peaks and overflows.
const (
	expensiveIndex = 3
	tierRoom       = 40
)

// affinityPolicies are the policies the affinity part knows, in the order
// they run.
var affinityPolicies = []affinityPolicy{
	{name: "round_robin", lb: "lb_policy round_robin"},
	{name: "least_conn", lb: "lb_policy least_conn"},
	{name: "random", lb: "lb_policy random"},
	{name: "header", lb: "lb_policy header X-Session-Id"},
	// A name keeps the pins when the pool changes (the fifth upstream).
	{name: "session_sticky", lb: "lb_policy session_sticky {\n\tname affinity\n}", keeping: true},
	// Not run by default: session_sticky with a tighter load bound, and
	// placing new sessions by load.
	{name: "sticky_bf110", lb: "lb_policy session_sticky {\n\tname affinity\n\tbalance_factor 1.1\n}", keeping: true},
	{name: "sticky_bf100", lb: "lb_policy session_sticky {\n\tname affinity\n\tbalance_factor 1.0\n}", keeping: true},
	{name: "sticky_lc", lb: "lb_policy session_sticky {\n\tname affinity\n\tfallback least_conn\n}", keeping: true},
	{name: "sticky_tiers", lb: "lb_policy session_sticky {\n\tname affinity\n%s}\nunhealthy_request_count " + fmt.Sprint(tierRoom), keeping: true, tiered: true},
	{name: "oracle", lb: byCookie, routed: func(e []*engine, p *atomic.Int32) router { return newOracle(e, p) }},
	// The peers' algorithms, not run by default.
	{name: "peer_ring", lb: byCookie, routed: func(e []*engine, p *atomic.Int32) router { return newRingRouter(e, p) }},
	{name: "peer_prefix", lb: byCookie, routed: func(e []*engine, p *atomic.Int32) router { return newPrefixRouter(e, p) }},
	{name: "peer_least", lb: byCookie, routed: func(e []*engine, p *atomic.Int32) router { return leastLoaded{e, p} }},
}

// defaultPolicies are the policies the events run compares unless told
// otherwise.
var defaultPolicies = []string{"round_robin", "header", "session_sticky", "sticky_tiers", "oracle"}

// defaultScenarioPolicies are the policies each cache-pressure scenario
// compares unless told otherwise: session_sticky with its defaults and
// with new sessions placed by load, the peers' routers and the oracle.
var defaultScenarioPolicies = []string{"session_sticky", "sticky_lc", "peer_ring", "peer_prefix", "peer_least", "oracle"}

// policyNames lists every known policy.
func policyNames() []string {
	names := make([]string, len(affinityPolicies))
	for i, p := range affinityPolicies {
		names[i] = p.name
	}
	return names
}

// failover is the same for every policy: a request that fails on an
// upstream (refused, or cut off mid-request when the upstream dies) is
// retried elsewhere with its buffered body, and the failed upstream is
// skipped for fail_duration (passive health checks). Durations are scaled
// down like the rest of the run. The body is buffered by Caddy's
// request_buffers for the stock policies, and by session_keeping's
// buffer_bodies where the plugin runs, as its recipe says.
const failover = `lb_retries 3
lb_try_duration 5s
lb_try_interval 20ms
lb_retry_match {
	method POST
}
fail_duration 3s
max_fails 1`

// site returns the Caddyfile site body of the policy over upstreams.
func (p affinityPolicy) site(upstreams []string) string {
	var b strings.Builder
	buffers := "\nrequest_buffers 4MiB"
	if p.keeping {
		b.WriteString("session_keeping {\n\tbuffer_bodies on\n}\n")
		buffers = ""
	} else {
		// Only to read the answers' usage: the stock policy routes.
		b.WriteString("session_keeping\n")
	}
	lb := p.lb
	if p.tiered {
		var cheap []string
		for i, u := range upstreams {
			if i != expensiveIndex {
				cheap = append(cheap, u)
			}
		}
		lb = fmt.Sprintf(lb, fmt.Sprintf("\ttier %s\n\ttier %s\n", strings.Join(cheap, " "), upstreams[expensiveIndex]))
	}
	fmt.Fprintf(&b, "reverse_proxy %s {\n%s\n%s\n}", strings.Join(upstreams, " "), indent(lb), indent(failover+buffers))
	return b.String()
}
