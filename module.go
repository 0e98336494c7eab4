// Package sessionkeeping is a Caddy plugin for LLM gateways: it recognises
// which requests belong to one conversation or agent task (a session) and
// keeps that session on the upstream that served it.
//
// This file holds the session_keeping HTTP handler, which resolves the
// session of each request and hands it to the rest of the route.
package sessionkeeping

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/sessionkeeping/caddy-session-keeping/activity"
	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
	"github.com/sessionkeeping/caddy-session-keeping/usage"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// history is the request history shown by the admin API, shared by every
// session_keeping handler of the process.
var history = activity.New(activity.DefaultMaxSessions, activity.DefaultMaxRequests)

// DefaultScope is the scope used when none is configured: the authenticated
// user, so that one tenant cannot steer or collide with another by reusing a
// session id. It is empty when the site has no authentication.
var DefaultScope = []string{"{http.auth.user.id}"}

// Handler identifies the session of a request from client headers, JSON
// body fields or a fingerprint of the conversation's opening, and stores it
// in the request context for `lb_policy session_sticky`. It sets the
// `{http.session.*}` placeholders and the access-log fields `session` and
// `session_source`.
//
// The handler never rejects a request because of its session signals, and
// the next handler always receives exactly the bytes the client sent (with
// StripClientSignals, exactly those minus the stripped body fields). Only a
// body that cannot be read (the client went away, or `request_body
// max_size` was exceeded) ends the request, with that error.
type Handler struct {
	// Whether requests without an explicit session id get one from a
	// fingerprint of the conversation opening (model, system prompt, tools,
	// messages through the first user turn). Default: true.
	AutoDetect *bool `json:"auto_detect,omitempty"`

	// Whether the built-in registry of client headers and body fields is
	// used. Default: true.
	BuiltinRules *bool `json:"builtin_rules,omitempty"`

	// Extra request headers that carry a session id, tried in this order
	// before the built-in headers. Credential-bearing headers (such as
	// Authorization or X-Api-Key) are refused.
	Headers []SignalConfig `json:"headers,omitempty"`

	// Extra JSON body fields (gjson paths; only string values count) that
	// carry a session id, tried in this order before the built-in fields.
	BodyFields []SignalConfig `json:"body_fields,omitempty"`

	// The signal kinds to try, in order: any of "headers", "body", "auto".
	// A kind left out is not used. Default: ["headers", "body", "auto"].
	Order []string `json:"order,omitempty"`

	// The scope of session ids: placeholders or literals whose values are
	// hashed together with the id into the session key, so the same id
	// under two scopes is two sessions. Default: ["{http.auth.user.id}"].
	Scope []string `json:"scope,omitempty"`

	// The largest request body read to find a session, in bytes. A larger
	// body streams through untouched and only headers are used.
	// Default: 33554432 (32 MiB).
	MaxBody int64 `json:"max_body,omitempty"`

	// The bytes that the request bodies held by all session_keeping
	// handlers of the process may take together. A body that would exceed
	// it streams through untouched and its session is resolved from
	// headers only. The process uses the largest value of its handlers.
	// Default: 268435456 (256 MiB).
	MaxBuffered int64 `json:"max_buffered,omitempty"`

	// Whether every request body of at most max_body bytes is held (within
	// max_buffered) until the response starts, not only those read to find
	// the session, so that a reverse_proxy retry can send it again. In
	// place of reverse_proxy's request_buffers. Default: false.
	BufferBodies bool `json:"buffer_bodies,omitempty"`

	// How session ids appear in logs: "hashed" (only the session key) or
	// "raw" (also the id as the client sent it, as `session_id`).
	// Default: "hashed".
	RecordIDs string `json:"record_ids,omitempty"`

	// Named pools of upstream API keys for the placeholder
	// `{http.session.api_key.<name>}`: a session keeps one key of the pool
	// (rendezvous hashing), requests without a session take the keys in
	// round robin. Keys may be global placeholders such as `{env.KEY_1}`,
	// replaced once when the config is loaded.
	KeyPools []KeyPool `json:"key_pools,omitempty"`

	// Whether the session signals that are gateway conventions are removed
	// before the request goes on (after the session was resolved): the
	// built-in session headers, the headers of `headers`, and the top-level
	// body fields `session_id` and `litellm_session_id`. Every other byte of
	// the body is kept. Default: false.
	StripClientSignals bool `json:"strip_client_signals,omitempty"`

	// Whether the token usage of answers is read as they stream past
	// (prompt tokens and cached prompt tokens of OpenAI, Anthropic and
	// Gemini answers), for the metrics, the admin API, the access log and
	// the sessions page, and whether Responses ids are learned for
	// previous_response_id. The answer is never changed or delayed.
	// Default: true.
	ReadUsage *bool `json:"read_usage,omitempty"`

	// The secret of `{http.session.hash}`, an HMAC of the session key. May
	// be a global placeholder such as `{env.HINT_SECRET}`, replaced once
	// when the config is loaded. Default: a random secret per process, not
	// shared by replicas; set it when several Caddy instances serve one
	// fleet.
	HintSecret string `json:"hint_secret,omitempty"`

	resolver     *session.Resolver
	logger       *zap.Logger
	logRaw       bool
	readUsage    bool
	pools        map[string]*keyPool
	hintSecret   []byte
	stripHeaders []string
}

// SignalConfig names one user-added session signal.
type SignalConfig struct {
	// The header name, or the gjson path of the body field.
	Name string `json:"name"`

	// An optional transform of the value: "session-uuid" extracts the
	// session part of a Claude Code user id (legacy
	// `user_…_account_…_session_<uuid>` or the JSON-string form); a value
	// with no session part does not match.
	Transform string `json:"transform,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.session_keeping",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision builds the resolver from the configuration, claims the
// handler's share of the body budget and registers the plugin's metrics.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.readUsage = h.ReadUsage == nil || *h.ReadUsage
	cfg, err := h.resolverConfig()
	if err != nil {
		return err
	}
	cfg.Buffers = bodyBuffers
	if h.readUsage {
		// Links are learned from the answers' ids, which need reading.
		cfg.Linked = upstreams.LinkedSession
	}
	h.resolver, err = session.NewResolver(cfg)
	if err != nil {
		return err
	}
	if h.Scope == nil {
		h.Scope = DefaultScope
	}
	h.logRaw = h.RecordIDs == "raw"
	if h.pools, err = provisionKeyPools(h.KeyPools); err != nil {
		return err
	}
	h.hintSecret = processHintSecret()
	if h.HintSecret != "" {
		secret := caddy.NewReplacer().ReplaceAll(h.HintSecret, "")
		if secret == "" {
			return fmt.Errorf("hint_secret: empty after placeholder replacement (unset environment variable?)")
		}
		h.hintSecret = []byte(secret)
	}
	if h.StripClientSignals {
		for _, sc := range h.Headers {
			s, err := session.HeaderSignal(sc.Name, 0)
			if err != nil {
				return fmt.Errorf("header: %v", err)
			}
			h.stripHeaders = append(h.stripHeaders, s.Name)
		}
		for _, s := range session.BuiltinHeaders {
			h.stripHeaders = append(h.stripHeaders, s.Name)
		}
	}
	if reg := ctx.GetMetricsRegistry(); reg != nil {
		if err := registerMetrics(reg); err != nil {
			return fmt.Errorf("registering metrics: %v", err)
		}
	}
	claimBudget(h)
	return nil
}

// Cleanup gives back the handler's claim on the body budget.
func (h *Handler) Cleanup() error {
	releaseBudget(h)
	return nil
}

// resolverConfig translates the JSON configuration; its errors name the
// option at fault.
func (h *Handler) resolverConfig() (session.Config, error) {
	cfg := session.Config{
		BuiltinRules: h.BuiltinRules == nil || *h.BuiltinRules,
		AutoDetect:   h.AutoDetect == nil || *h.AutoDetect,
		MaxBody:      h.MaxBody,
	}
	for _, sc := range h.Headers {
		t, err := session.ParseTransform(sc.Transform)
		if err != nil {
			return cfg, fmt.Errorf("header %s: %v", sc.Name, err)
		}
		s, err := session.HeaderSignal(sc.Name, t)
		if err != nil {
			return cfg, fmt.Errorf("header: %v", err)
		}
		cfg.Headers = append(cfg.Headers, s)
	}
	for _, sc := range h.BodyFields {
		t, err := session.ParseTransform(sc.Transform)
		if err != nil {
			return cfg, fmt.Errorf("body_field %s: %v", sc.Name, err)
		}
		s, err := session.BodySignal(sc.Name, t)
		if err != nil {
			return cfg, fmt.Errorf("body_field: %v", err)
		}
		cfg.BodyFields = append(cfg.BodyFields, s)
	}
	for _, name := range h.Order {
		k, err := session.ParseKind(name)
		if err != nil {
			return cfg, fmt.Errorf("order: %v", err)
		}
		cfg.Order = append(cfg.Order, k)
	}
	if h.MaxBody < 0 {
		return cfg, fmt.Errorf("max_body: must not be negative, got %d", h.MaxBody)
	}
	if h.MaxBuffered < 0 {
		return cfg, fmt.Errorf("max_buffered: must not be negative, got %d", h.MaxBuffered)
	}
	return cfg, nil
}

// Validate checks the options that Provision does not need to build the
// resolver.
func (h *Handler) Validate() error {
	switch h.RecordIDs {
	case "", "hashed", "raw":
	default:
		return fmt.Errorf("record_ids: want hashed or raw, got %q", h.RecordIDs)
	}
	return checkKeyPools(h.KeyPools)
}

// ServeHTTP resolves the session, publishes it and calls the next handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)

	var scopeBuf [4]string
	scope := scopeBuf[:0]
	for _, s := range h.Scope {
		scope = append(scope, scopeValue(repl, s))
	}

	start := time.Now()
	x := &exchange{h: h}
	var err error
	if x.res, err = h.resolver.Resolve(r, scope); err != nil {
		return caddyhttp.Error(bodyErrorStatus(err), err)
	}
	if x.res.Skipped > 0 {
		invalidIDs.Add(float64(x.res.Skipped))
	}
	overBudget := x.res.Unbuffered
	if h.BufferBodies && !overBudget {
		held, err := h.resolver.Hold(r)
		if err != nil {
			return caddyhttp.Error(bodyErrorStatus(err), err)
		}
		overBudget = !held
	}
	if overBudget {
		h.noteUnbuffered()
	}
	if h.StripClientSignals {
		if r, err = h.strip(r, !overBudget); err != nil {
			return caddyhttp.Error(bodyErrorStatus(err), err)
		}
	}
	// A body read into a pooled buffer goes back once the response has
	// started (the writer sees it) or at the latest when this returns.
	if body := r.Body; session.Held(body) {
		defer session.Abandon(body)
		x.writer.body = body
	}
	x.writer.ResponseWriter = w
	x.writer.readUsage = h.readUsage

	repl.Map(x.placeholder)
	if !x.res.Found {
		resolvedNone.Inc()
		if x.writer.body == nil && !h.readUsage {
			return next.ServeHTTP(w, r)
		}
		err = next.ServeHTTP(&x.writer, r)
		x.account(repl, nil, scope)
		return err
	}
	countResolution(x.res.Source)

	s := &x.res.Session
	x.writer.session, x.writer.scope = s, scope
	r = r.WithContext(session.NewContext(r.Context(), s))
	extra := accessLogFields(r)
	if extra != nil {
		extra.Add(zap.Stringer("session", &s.Key)) // a pointer: no copy to box
		extra.Add(zap.String("session_source", s.Source))
		if h.logRaw {
			extra.Add(zap.String("session_id", s.ID))
		}
	}

	err = next.ServeHTTP(&x.writer, r)

	// When every attempt failed, Caddy writes the error status after the
	// chain returns: the status is then only in the error.
	status := x.writer.status
	if err != nil {
		if he := (caddyhttp.HandlerError{}); errors.As(err, &he) && he.StatusCode != 0 {
			status = he.StatusCode
		}
	}
	if s.Balancer != nil {
		s.Balancer.Done(s, status)
	}
	tokens := x.account(repl, s, scope)
	if extra != nil {
		if s.Decision != "" {
			extra.Add(zap.String("session_decision", s.Decision))
			extra.Add(zap.String("session_upstream", s.Upstream))
		}
		if tokens.Found {
			extra.Add(zap.Int64("session_prompt_tokens", tokens.Prompt))
			extra.Add(zap.Int64("session_cached_tokens", tokens.Cached))
		}
	}
	h.record(r, repl, s, status, start, tokens)
	return err
}

// accessLogFields returns the request's extra access-log fields, or nil
// when the server writes no access log: every Add to them allocates (it
// resets a cache of loggers), which is waste when nothing logs them.
func accessLogFields(r *http.Request) *caddyhttp.ExtraLogFields {
	if srv, ok := r.Context().Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server); ok && srv.Logs == nil {
		return nil
	}
	extra, _ := r.Context().Value(caddyhttp.ExtraLogFieldsCtxKey).(*caddyhttp.ExtraLogFields)
	return extra
}

// exchange is the handler's state for one request, in one allocation: the
// resolution (whose Session the request context points to), the response
// writer wrapper, and the keys the placeholders picked.
type exchange struct {
	h      *Handler
	res    session.Result
	writer outcomeWriter
	picked map[string]int // key index per pool, chosen once per request
}

// scopeValue replaces the placeholders of one scope value. A value that is
// a single placeholder (as the default is) is looked up directly, which
// costs no allocation when it is unset or a string.
func scopeValue(repl *caddy.Replacer, s string) string {
	if len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' && !strings.ContainsAny(s[1:len(s)-1], "{}") {
		v, ok := repl.Get(s[1 : len(s)-1])
		if !ok || v == nil {
			return ""
		}
		if str, isString := v.(string); isString {
			return str
		}
	}
	return repl.ReplaceAll(s, "")
}

// countResolution counts a resolved session by the kind of its source.
func countResolution(source string) {
	switch {
	case strings.HasPrefix(source, "header:"):
		resolvedHeader.Inc()
	case strings.HasPrefix(source, "body:"):
		resolvedBody.Inc()
	default:
		resolvedAuto.Inc()
	}
}

// record adds the finished request to the admin API's history.
func (h *Handler) record(r *http.Request, repl *caddy.Replacer, s *session.Session, status int, start time.Time, tokens usage.Usage) {
	retries, _ := repl.Get("http.reverse_proxy.retries")
	n, _ := retries.(int)
	decision := s.Decision
	if decision == "" {
		decision = session.DecisionNone
	}
	id := ""
	if h.logRaw {
		id = s.ID
	}
	history.Record(s, id, activity.Request{
		Time: start, Method: r.Method, Path: r.URL.Path, Model: s.Model,
		Upstream: s.Upstream, Status: status, Duration: time.Since(start),
		Decision: decision, Retries: n,
		PromptTokens: tokens.Prompt, CachedTokens: tokens.Cached, UsageRead: tokens.Found,
	})
}

// bodyErrorStatus maps a failed body read to the status the client gets:
// 413 when request_body max_size was exceeded, else 400.
func bodyErrorStatus(err error) int {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// placeholderPrefix is the namespace of the handler's placeholders.
const placeholderPrefix = "http.session."

// strip removes the client signals from r (see StripClientSignals), the
// body fields only when body is set. The headers are removed from a copy of
// the header map, so the access log still shows the request as the client
// sent it.
func (h *Handler) strip(r *http.Request, body bool) (*http.Request, error) {
	var cloned bool
	for _, name := range h.stripHeaders {
		if _, ok := r.Header[name]; !ok {
			continue
		}
		if !cloned {
			r2 := new(http.Request)
			*r2 = *r
			r2.Header = r.Header.Clone()
			r, cloned = r2, true
		}
		delete(r.Header, name)
	}
	if !body {
		return r, nil
	}
	_, err := h.resolver.StripBody(r)
	return r, err
}

// placeholder resolves the handler's {http.session.*} placeholders for the
// request. Values are computed when a placeholder is used, not for every
// request; upstream and decision read the session as the policy left it.
// Without a session every placeholder is known and empty, except the model,
// which is known whenever the body was read, and the API keys of key pools.
func (x *exchange) placeholder(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, placeholderPrefix)
	if !ok {
		return nil, false
	}
	var s *session.Session
	if x.res.Found {
		s = &x.res.Session
	}
	switch name {
	case "model":
		return x.res.Model, true
	case "id", "key", "source", "upstream", "decision", "hash":
	default:
		pool, ok := strings.CutPrefix(name, "api_key.")
		if !ok {
			return nil, false
		}
		p := x.h.pools[pool]
		if p == nil {
			return nil, false
		}
		i, ok := x.picked[pool]
		if !ok {
			var k *session.Key
			if s != nil {
				k = &s.Key
			}
			i = p.pick(k)
			if x.picked == nil {
				x.picked = make(map[string]int, len(x.h.pools))
			}
			x.picked[pool] = i
		}
		return p.keys[i], true
	}
	if s == nil {
		if name == "decision" {
			return session.DecisionNone, true
		}
		return "", true
	}
	switch name {
	case "id":
		return s.ID, true
	case "key":
		return s.Key.String(), true
	case "source":
		return s.Source, true
	case "upstream":
		return s.Upstream, true
	case "hash":
		return sessionHint(x.h.hintSecret, s.Key), true
	default:
		if s.Decision == "" {
			return session.DecisionNone, true
		}
		return s.Decision, true
	}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
