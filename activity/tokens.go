package activity

import (
	"slices"
	"strings"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// This file accounts the prompt tokens that answers reported, per session
// and per upstream, and finds sessions that are pinned but cold: their
// requests keep reaching their upstream and keep finding nothing of their
// prompt in its cache.

// Tokens are prompt tokens that answers reported.
type Tokens struct {
	// PromptTokens counts every prompt token; CachedTokens those the
	// upstream read from its prompt cache.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// CachedRatio is CachedTokens / PromptTokens (0 with no tokens), filled
	// in when the totals are handed out.
	CachedRatio float64 `json:"cached_ratio"`
	// Answers counts the answers whose usage was read.
	Answers int64 `json:"answers"`
}

func (t *Tokens) add(prompt, cached int64) {
	t.PromptTokens += prompt
	t.CachedTokens += cached
	t.Answers++
}

// exported returns the totals with their ratio.
func (t Tokens) exported() Tokens {
	if t.PromptTokens > 0 {
		t.CachedRatio = float64(t.CachedTokens) / float64(t.PromptTokens)
	}
	return t
}

// A session turns cold after coldAfter hit requests in a row, each with a
// prompt of at least coldMinPrompt tokens, reported no cached token. Below
// that prompt size no cache is expected to hold anything: OpenAI caches
// prompts from 1,024 tokens on, Anthropic from 1,024 or 2,048, engines in
// blocks. Any request that finds cached tokens warms the session again; a
// new placement or a re-pin (expected to start cold) starts the count
// again.
const (
	coldAfter     = 3
	coldMinPrompt = 1024
)

// watchCold updates the cold state of the session with its latest request.
// The caller holds l.mu.
func (r *record) watchCold(req *Request) {
	switch {
	case req.CachedTokens > 0:
		r.coldStreak = 0
		r.summary.Cold, r.summary.ColdUpstream = false, ""
	case req.Decision == session.DecisionHit && req.PromptTokens >= coldMinPrompt:
		r.coldStreak++
		if r.coldStreak >= coldAfter {
			r.summary.Cold, r.summary.ColdUpstream = true, req.Upstream
		}
	case req.Decision != session.DecisionHit:
		r.coldStreak = 0
	}
}

// maxUpstreams bounds the upstreams accounted one by one; the rest count
// under OtherUpstreams.
const maxUpstreams = 1024

// OtherUpstreams names the upstreams beyond maxUpstreams.
const OtherUpstreams = "other"

// UpstreamTokens is what one upstream's answers reported.
type UpstreamTokens struct {
	Upstream string `json:"upstream"`
	Tokens
	// ColdSessions counts the sessions of the history that are pinned
	// but cold at this upstream now.
	ColdSessions int `json:"cold_sessions"`
}

// Account adds the usage of an answer from upstream to its totals, for
// every request, with a session or not.
func (l *Log) Account(upstream string, prompt, cached int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.upstreams[upstream]
	if t == nil {
		if len(l.upstreams) >= maxUpstreams {
			upstream = OtherUpstreams
			t = l.upstreams[upstream]
		}
		if t == nil {
			t = &Tokens{}
			l.upstreams[strings.Clone(upstream)] = t
		}
	}
	t.add(prompt, cached)
}

// Upstreams returns the totals of every upstream that answered with usage
// or has cold sessions, by dial address.
func (l *Log) Upstreams() []UpstreamTokens {
	l.mu.Lock()
	defer l.mu.Unlock()
	cold := l.coldLocked()
	out := make([]UpstreamTokens, 0, len(l.upstreams))
	for u, t := range l.upstreams {
		out = append(out, UpstreamTokens{Upstream: u, Tokens: t.exported(), ColdSessions: cold[u]})
	}
	for u, n := range cold {
		if l.upstreams[u] == nil {
			out = append(out, UpstreamTokens{Upstream: u, ColdSessions: n})
		}
	}
	slices.SortFunc(out, func(a, b UpstreamTokens) int { return strings.Compare(a.Upstream, b.Upstream) })
	return out
}

// ColdSessions returns how many sessions of the history are pinned but
// cold, per upstream.
func (l *Log) ColdSessions() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.coldLocked()
}

func (l *Log) coldLocked() map[string]int {
	cold := map[string]int{}
	for _, r := range l.records {
		if r.summary.Cold {
			cold[r.summary.ColdUpstream]++
		}
	}
	return cold
}
