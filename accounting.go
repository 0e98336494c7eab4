package sessionkeeping

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sessionkeeping/caddy-session-keeping/activity"
	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
	"github.com/sessionkeeping/caddy-session-keeping/usage"
)

// account reads what the answer reported and counts it: in the metrics by
// upstream and decision, and in the history's totals per upstream; and it
// links a stored response (OpenAI Responses) to the session that made it,
// when the writer has not done so already. s is the request's session, nil
// without one. It returns the usage read.
func (x *exchange) account(repl *caddy.Replacer, s *session.Session, scope []string) usage.Usage {
	u, outcome, read := x.writer.finish()
	if !read {
		return usage.Usage{}
	}
	if u.ResponseID != "" && s != nil && !x.writer.linked {
		// A later request may continue this response with only its id.
		upstreams.LinkResponse(session.NewKey(scope, u.ResponseID), s.Key)
	}
	usageOutcomes[outcome].Inc()
	if outcome != usage.Read {
		return u
	}
	decision := session.DecisionNone
	if s != nil && s.Decision != "" {
		decision = s.Decision
	}
	hostport, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	c := tokenCountersOf(hostport, decision)
	c.prompt.Add(float64(u.Prompt))
	c.cached.Add(float64(u.Cached))
	history.Account(c.upstream, u.Prompt, u.Cached)
	return u
}

// usageOutcomes are the answer counters by outcome, looked up once.
var usageOutcomes = func() (out [usage.Unsupported + 1]prometheus.Counter) {
	for o := range out {
		out[o] = usageAnswers.WithLabelValues(usage.Outcome(o).String())
	}
	return out
}()

// tokenCounters are the token counters of one upstream and decision.
type tokenCounters struct {
	upstream       string // the label: the dial address, or "other"
	prompt, cached prometheus.Counter
}

// counterKey names the counters of an upstream (dial address) and decision.
type counterKey struct{ hostport, decision string }

// tokenCounterSet holds the counters in use, read without locks and
// written by copy (a new upstream or decision is rare). At most
// maxUpstreamLabels upstreams get labels of their own, so that dynamic
// upstreams cannot grow the metrics without bound; the rest count as
// "other".
var tokenCounterSet struct {
	mu        sync.Mutex // serialises writers
	m         atomic.Pointer[map[counterKey]*tokenCounters]
	upstreams map[string]bool // labelled upstreams; guarded by mu
}

const maxUpstreamLabels = 1024

// tokenCountersOf returns the counters of an upstream and decision.
func tokenCountersOf(hostport, decision string) *tokenCounters {
	k := counterKey{hostport, decision}
	if m := tokenCounterSet.m.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			return c
		}
	}
	set := &tokenCounterSet
	set.mu.Lock()
	defer set.mu.Unlock()
	old := map[counterKey]*tokenCounters{}
	if m := set.m.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			return c
		}
		old = *m
	}
	if set.upstreams == nil {
		set.upstreams = map[string]bool{}
	}
	label := hostport
	switch {
	case hostport == "":
		label = "none"
	case set.upstreams[hostport]:
	case len(set.upstreams) >= maxUpstreamLabels:
		label = activity.OtherUpstreams
	default:
		set.upstreams[hostport] = true
	}
	c := &tokenCounters{
		upstream: label,
		prompt:   promptTokens.WithLabelValues(label, decision),
		cached:   cachedTokens.WithLabelValues(label, decision),
	}
	m := maps.Clone(old)
	m[k] = c
	// The map is keyed by dial address, and dynamic upstreams can bring
	// new ones without end: past maxCachedCounters keys, new ones are not
	// kept, and their counters (labelled "other") are looked up each time.
	if len(m) <= maxCachedCounters {
		set.m.Store(&m)
	}
	return c
}

// maxCachedCounters bounds the lock-free map of counters: every labelled
// upstream with every decision, and as many again.
const maxCachedCounters = 2 * maxUpstreamLabels * 8
