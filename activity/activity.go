// Package activity keeps a bounded, in-memory history of recent sessions and
// their requests, for the admin API and the threaded sessions page. It holds
// at most a configured number of sessions and of requests in all, each
// session at most PerSession requests; the least recently active session is
// dropped first, so a flood of new sessions cannot grow memory.
package activity

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// PerSession is the most requests kept per session.
const PerSession = 32

// Defaults for the global bounds.
const (
	DefaultMaxSessions = 10_000
	DefaultMaxRequests = 100_000
)

// Bounds of the strings stored with a request. They come from the client,
// so the history keeps its own short copies of them, never a slice of a
// request line or body that would keep the whole of it in memory.
const (
	maxPathLen  = 256
	maxModelLen = 256
)

// maxShared bounds the table of strings that records share (see share).
const maxShared = 1024

// Request is one request of a session, as the admin API shows it.
type Request struct {
	Time     time.Time     `json:"time"`
	Method   string        `json:"method"`
	Path     string        `json:"path"`
	Model    string        `json:"model,omitempty"`
	Upstream string        `json:"upstream,omitempty"`
	Status   int           `json:"status"`
	Duration time.Duration `json:"duration_ns"`
	Decision string        `json:"decision"`
	Retries  int           `json:"retries"`
	// The usage the answer reported, when UsageRead: every prompt token,
	// and those the upstream read from its prompt cache.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	UsageRead    bool  `json:"usage_read"`
}

// Summary describes one session.
type Summary struct {
	Key          string    `json:"key"`
	ID           string    `json:"id,omitempty"` // only with record_ids raw
	Source       string    `json:"source"`
	FirstSeen    time.Time `json:"first_seen"`
	LastSeen     time.Time `json:"last_seen"`
	Requests     int       `json:"requests"`
	LastDecision string    `json:"last_decision"`
	LastUpstream string    `json:"last_upstream,omitempty"`
	Tokens
	// Cold reports a session pinned but cold: its last hit requests at
	// ColdUpstream reported no cached tokens (see coldAfter).
	Cold         bool   `json:"cold"`
	ColdUpstream string `json:"cold_upstream,omitempty"`
}

// Log is the history. Its mutex guards every field and every record; the
// only call out while holding it is Sessions' filter, which gets a copy.
type Log struct {
	mu          sync.Mutex
	maxSessions int
	maxRequests int
	records     map[session.Key]*record
	newest      *record // most recently active; list linked through prev/next
	oldest      *record
	requests    int    // requests held in all records
	dropped     uint64 // requests dropped to keep the bounds
	upstreams   map[string]*Tokens

	// The strings records share (see share): their own sync.Map, so that
	// sharing takes nothing from mu's hold time; read mostly, once full.
	shared  sync.Map // string → the same string
	nShared atomic.Int32
}

// record is one session's entry: a summary and a ring of its latest
// requests.
type record struct {
	key          session.Key
	summary      Summary
	ring         []Request // grows to PerSession, then wraps
	next         int       // ring position of the next write once full
	newer, older *record
	coldStreak   int // hit requests in a row that found the cache cold
}

// New returns a log with the given bounds (defaults where ≤ 0).
func New(maxSessions, maxRequests int) *Log {
	if maxSessions <= 0 {
		maxSessions = DefaultMaxSessions
	}
	if maxRequests <= 0 {
		maxRequests = DefaultMaxRequests
	}
	return &Log{maxSessions: maxSessions, maxRequests: maxRequests, records: make(map[session.Key]*record), upstreams: make(map[string]*Tokens)}
}

// Record adds a request to the session s; id is stored only when not empty.
func (l *Log) Record(s *session.Session, id string, req Request) {
	req.Method = ownMethod(req.Method)
	req.Path = l.share(req.Path[:min(len(req.Path), maxPathLen)])
	req.Model = l.share(req.Model[:min(len(req.Model), maxModelLen)])
	req.Upstream = l.share(req.Upstream)
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[s.Key]
	if r == nil {
		r = &record{key: s.Key, summary: Summary{Source: s.Source, FirstSeen: req.Time}}
		l.records[s.Key] = r
	} else {
		l.unlink(r)
	}
	l.pushNewest(r)
	if id != "" {
		r.summary.ID = id
	}
	r.summary.LastSeen = req.Time
	r.summary.Requests++
	r.summary.LastDecision = req.Decision
	r.summary.LastUpstream = req.Upstream
	if req.UsageRead {
		r.summary.Tokens.add(req.PromptTokens, req.CachedTokens)
		r.watchCold(&req)
	}
	if len(r.ring) < PerSession {
		r.ring = append(r.ring, req)
		l.requests++
	} else {
		r.ring[r.next] = req
		r.next = (r.next + 1) % PerSession
		l.dropped++
	}
	for len(l.records) > l.maxSessions || l.requests > l.maxRequests {
		if l.oldest == r {
			break // never drop the session just recorded
		}
		l.drop(l.oldest)
	}
}

// share returns the history's own copy of s, one for all the records
// that hold the same path, model or upstream. A full history holds a
// hundred thousand requests of a few paths and models; as one string
// each, the garbage collector marks a few objects on every cycle instead
// of one or two per request, which shortens its cycles and the latency
// they add. The table is bounded: once full, strings are copied one by
// one (racing callers may overshoot the bound by a few).
func (l *Log) share(s string) string {
	if s == "" {
		return ""
	}
	if own, ok := l.shared.Load(s); ok {
		return own.(string)
	}
	own := strings.Clone(s)
	if l.nShared.Load() < maxShared {
		if prev, loaded := l.shared.LoadOrStore(own, own); loaded {
			return prev.(string)
		}
		l.nShared.Add(1)
	}
	return own
}

// drop removes a record to keep the bounds. The caller holds l.mu.
func (l *Log) drop(r *record) {
	l.remove(r)
	l.dropped += uint64(len(r.ring))
}

// remove takes a record out of the log. The caller holds l.mu.
func (l *Log) remove(r *record) {
	l.unlink(r)
	delete(l.records, r.key)
	l.requests -= len(r.ring)
}

// ownMethod returns the method as a constant when it is a standard one, else
// a short copy.
func ownMethod(m string) string {
	for _, std := range [...]string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace} {
		if m == std {
			return std
		}
	}
	return strings.Clone(m[:min(len(m), 16)])
}

func (l *Log) pushNewest(r *record) {
	r.older, r.newer = l.newest, nil
	if l.newest != nil {
		l.newest.newer = r
	}
	l.newest = r
	if l.oldest == nil {
		l.oldest = r
	}
}

func (l *Log) unlink(r *record) {
	if r.newer != nil {
		r.newer.older = r.older
	} else {
		l.newest = r.older
	}
	if r.older != nil {
		r.older.newer = r.newer
	} else {
		l.oldest = r.newer
	}
	r.newer, r.older = nil, nil
}

// Sessions returns up to limit summaries, newest activity first, that
// match keep (nil keeps all).
func (l *Log) Sessions(limit int, keep func(*Summary) bool) []Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Summary, 0, max(min(limit, len(l.records)), 0))
	for r := l.newest; r != nil && len(out) < limit; r = r.older {
		if s := r.export(); keep == nil || keep(&s) {
			out = append(out, s)
		}
	}
	return out
}

// Session returns one session's summary and its requests, newest first.
func (l *Log) Session(key session.Key) (Summary, []Request, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[key]
	if r == nil {
		return Summary{}, nil, false
	}
	reqs := make([]Request, 0, len(r.ring))
	// Oldest first in the ring from r.next (once full), then reverse.
	reqs = append(reqs, r.ring[r.next:]...)
	reqs = append(reqs, r.ring[:r.next]...)
	slices.Reverse(reqs)
	return r.export(), reqs, true
}

// export returns a copy of the record's summary with its key filled in.
func (r *record) export() Summary {
	s := r.summary
	s.Key = r.key.String()
	s.Tokens = s.Tokens.exported()
	return s
}

// Forget removes a session's history, reporting whether it had one.
func (l *Log) Forget(key session.Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.records[key]
	if r == nil {
		return false
	}
	l.remove(r)
	return true
}

// Stats reports the log's size and how many requests it has dropped.
func (l *Log) Stats() (sessions, requests int, dropped uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records), l.requests, l.dropped
}
