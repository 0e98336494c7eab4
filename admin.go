package sessionkeeping

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/sessionkeeping/caddy-session-keeping/activity"
	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
)

func init() {
	caddy.RegisterModule(Admin{})
}

//go:embed admin_ui.html
var adminUI []byte

// Admin serves the session_keeping admin API under /session_keeping/ on
// Caddy's admin endpoint: the sessions seen recently, their requests and
// pins, the upstreams of every sticky pool, and a threaded sessions page.
type Admin struct{}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.session_keeping",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Routes returns the admin routes.
func (a Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: adminPrefix, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

const adminPrefix = "/session_keeping/"

// Limits of GET /session_keeping/sessions.
const (
	defaultListLimit = 100
	maxListLimit     = 10_000
)

func (a Admin) serve(w http.ResponseWriter, r *http.Request) error {
	path := strings.TrimPrefix(r.URL.Path, adminPrefix)
	switch {
	case path == "sessions":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.listSessions(w, r)
	case strings.HasPrefix(path, "sessions/"):
		key, err := session.ParseKey(strings.TrimPrefix(path, "sessions/"))
		if err != nil {
			return apiError(http.StatusNotFound, err)
		}
		switch r.Method {
		case http.MethodGet:
			return a.getSession(w, key)
		case http.MethodDelete:
			return a.deleteSession(w, key)
		}
		return allow(r, http.MethodGet, http.MethodDelete)
	case path == "upstreams":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return a.listUpstreams(w)
	case path == "ui" || path == "":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, err := w.Write(adminUI)
		return err
	}
	return apiError(http.StatusNotFound, fmt.Errorf("no such resource: %s", r.URL.Path))
}

// upstreamView is an upstream of a sticky pool with what its answers
// reported.
type upstreamView struct {
	upstreams.MemberView
	activity.Tokens
	ColdSessions int `json:"cold_sessions"`
}

// listUpstreams answers with every member of every sticky pool and its
// token totals, and the totals of every upstream that reported usage
// (with a session_sticky pool or not).
func (a Admin) listUpstreams(w http.ResponseWriter) error {
	usage := history.Upstreams()
	members := upstreams.Members()
	out := make([]upstreamView, 0, len(members))
	for _, m := range members {
		v := upstreamView{MemberView: m}
		for _, u := range usage {
			if u.Upstream == m.Dial {
				v.Tokens, v.ColdSessions = u.Tokens, u.ColdSessions
			}
		}
		out = append(out, v)
	}
	return writeJSON(w, map[string]any{"upstreams": out, "usage": usage})
}

// sessionView is a session as the API shows it.
type sessionView struct {
	activity.Summary
	Pins []upstreams.PinView `json:"pins"`
}

func (a Admin) listSessions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return apiError(http.StatusBadRequest, fmt.Errorf("limit: want a positive integer, got %q", v))
		}
		limit = min(n, maxListLimit)
	}
	upstream, source := q.Get("upstream"), q.Get("source")
	var keep func(*activity.Summary) bool
	if source != "" {
		keep = func(s *activity.Summary) bool { return sourceKind(s.Source) == source || s.Source == source }
	}
	// Filtering by upstream needs the pins, so it looks further than limit.
	fetch := limit
	if upstream != "" {
		fetch = maxListLimit
	}
	summaries := history.Sessions(fetch, keep)
	out := make([]sessionView, 0, min(limit, len(summaries)))
	for _, s := range summaries {
		if len(out) == limit {
			break
		}
		key, _ := session.ParseKey(s.Key)
		v := sessionView{Summary: s, Pins: upstreams.PinsOf(key)}
		if upstream != "" && !pinnedTo(v, upstream) {
			continue
		}
		out = append(out, v)
	}
	return writeJSON(w, map[string]any{"sessions": out})
}

// pinnedTo reports whether the session is pinned to, or was last served by,
// the upstream.
func pinnedTo(v sessionView, upstream string) bool {
	if v.LastUpstream == upstream {
		return true
	}
	for _, p := range v.Pins {
		if p.Upstream == upstream {
			return true
		}
	}
	return false
}

// sourceKind returns the kind of a source: header, body or auto.
func sourceKind(source string) string {
	kind, _, _ := strings.Cut(source, ":")
	return kind
}

func (a Admin) getSession(w http.ResponseWriter, key session.Key) error {
	s, reqs, ok := history.Session(key)
	pins := upstreams.PinsOf(key)
	if !ok && len(pins) == 0 {
		return apiError(http.StatusNotFound, fmt.Errorf("unknown session %s", key))
	}
	if !ok {
		s = activity.Summary{Key: key.String()}
	}
	return writeJSON(w, map[string]any{"session": sessionView{Summary: s, Pins: pins}, "requests": reqs})
}

func (a Admin) deleteSession(w http.ResponseWriter, key session.Key) error {
	_, _, known := history.Session(key)
	dropped := upstreams.Unpin(key)
	if !known && dropped == 0 {
		return apiError(http.StatusNotFound, fmt.Errorf("unknown session %s", key))
	}
	return writeJSON(w, map[string]any{"key": key.String(), "pins_deleted": dropped})
}

// allow returns a 405 error unless the request's method is one of methods.
func allow(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return caddy.APIError{
		HTTPStatus: http.StatusMethodNotAllowed,
		Err:        fmt.Errorf("method %s not allowed; use %s", r.Method, strings.Join(methods, " or ")),
	}
}

func apiError(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Interface guard
var _ caddy.AdminRouter = (*Admin)(nil)
