package sessionkeeping

import (
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/sessionkeeping/caddy-session-keeping/activity"
	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
	"github.com/sessionkeeping/caddy-session-keeping/usage"
)

// account reads what the answer reported and counts it: in the metrics by
// upstream and decision, and in the history's totals per upstream; and it
// links a stored response (OpenAI Responses) to the session that made it.
// s is the request's session, nil without one. It returns the usage read.
func (x *exchange) account(repl *caddy.Replacer, s *session.Session, scope []string) usage.Usage {
	u, outcome, read := x.writer.finish()
	if !read {
		return usage.Usage{}
	}
	if u.ResponseID != "" && s != nil && !x.writer.linked {
		// A later request may continue this response with only its id.
		upstreams.LinkResponse(session.NewKey(scope, u.ResponseID), s.Key)
	}
	usageAnswers.WithLabelValues(outcome.String()).Inc()
	if outcome != usage.Read {
		return u
	}
	decision := session.DecisionNone
	if s != nil && s.Decision != "" {
		decision = s.Decision
	}
	hostport, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	upstream := upstreamLabel(hostport)
	promptTokens.WithLabelValues(upstream, decision).Add(float64(u.Prompt))
	cachedTokens.WithLabelValues(upstream, decision).Add(float64(u.Cached))
	history.Account(upstream, u.Prompt, u.Cached)
	return u
}

// upstreamLabels holds the upstream label values in use, at most
// maxUpstreamLabels of them, so that dynamic upstreams cannot grow the
// metrics without bound; further upstreams count as "other".
var upstreamLabels struct {
	mu  sync.Mutex
	set map[string]string
}

const maxUpstreamLabels = 1024

// upstreamLabel returns the label of an upstream's dial address.
func upstreamLabel(hostport string) string {
	if hostport == "" {
		return "none"
	}
	upstreamLabels.mu.Lock()
	defer upstreamLabels.mu.Unlock()
	if l, ok := upstreamLabels.set[hostport]; ok {
		return l
	}
	if upstreamLabels.set == nil {
		upstreamLabels.set = map[string]string{}
	}
	if len(upstreamLabels.set) >= maxUpstreamLabels {
		return activity.OtherUpstreams
	}
	upstreamLabels.set[hostport] = hostport
	return hostport
}
