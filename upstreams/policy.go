package upstreams

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func init() {
	caddy.RegisterModule(StickySelection{})
}

// Defaults of the session_sticky policy.
const (
	DefaultTTL             = 6 * time.Hour
	DefaultMaxSessions     = 1_000_000
	DefaultBalanceFactor   = 1.25
	DefaultFailureCooldown = 30 * time.Second
)

// DefaultRepinOnStatus are the statuses that count as a failure of the
// upstream that answered them.
var DefaultRepinOnStatus = []int{502, 503, 504}

// tables holds the pin tables of all loaded configs. A config reload
// provisions the new policy before cleaning up the old one, so a table whose
// settings did not change is handed over with its pins.
var tables = caddy.NewUsagePool()

// StickySelection keeps each session (as resolved by the session_keeping
// handler) on one upstream. A session without a live pin is placed by
// rendezvous hashing with bounded load (or by the fallback policy, when one
// is configured) and pinned; later requests go to the pinned upstream while
// it is available. The pin moves when the upstream is unhealthy, leaves the
// pool, or fails the session; when it is merely full, one request spills to
// another upstream and the pin stays.
//
// Requests without a session go to the fallback policy as if stickiness
// were off.
type StickySelection struct {
	// How long a pin lives without use; every use starts it again.
	// Default: 6h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// The most pins kept; at the bound the least recently used pin goes.
	// Default: 1000000.
	MaxSessions int `json:"max_sessions,omitempty"`

	// The selection policy for requests without a session and, when set,
	// for placing new sessions instead of rendezvous hashing. Default for
	// sessionless requests: round_robin.
	FallbackRaw json.RawMessage `json:"fallback,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies inline_key=policy"`

	// Bounded-load placement: a new session skips upstreams whose
	// in-flight requests would exceed this factor times the mean. 0 turns
	// the bound off. Default: 1.25.
	BalanceFactor *float64 `json:"balance_factor,omitempty"`

	// How long a session avoids an upstream that failed it. Default: 30s.
	FailureCooldown caddy.Duration `json:"failure_cooldown,omitempty"`

	// Response statuses that count as a failure of the upstream for the
	// session. Default: [502, 503, 504].
	RepinOnStatus []int `json:"repin_on_status,omitempty"`

	// An explicit pin namespace. Without it, pins are kept per pool (a hash
	// of the sorted dial addresses); set it when upstreams are dynamic, so
	// that a change of the pool does not start every session afresh.
	Name string `json:"name,omitempty"`

	// Where pins are kept. Default: in this process, in a table that
	// survives config reloads. The redis store shares pins between the
	// Caddy instances of a fleet.
	StoreRaw json.RawMessage `json:"store,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies.session_sticky.stores inline_key=backend"`

	// Tiers of upstreams by cost, cheapest first: each a list of upstream
	// addresses (host:port as the upstream dials it, or a URL such as
	// https://api.example.com). Upstreams in no tier form a last, priciest
	// tier. Sessions are placed and pinned in the cheapest tier present in
	// the pool; a request that no upstream of that tier can take goes to
	// the next tier that can (decision spill_tier) without moving the pin.
	// Requests without a session follow the same tiers. Default: no tiers.
	Tiers [][]string `json:"tiers,omitempty"`

	fallback        reverseproxy.Selector
	placeByFallback bool
	balanceFactor   float64
	tiers           *tierSet  // nil without tiers
	table           *PinTable // this process's pins: the store, or the store's fallback
	store           PinStore
	first           *atomic.Pointer[firstAttempt] // the last pool seen; set in Provision
	pools           *cowMap[uint64, *poolRecord]  // every pool served, by namespace, for the admin API
	cleaned         *atomic.Bool
	tableKey        string
	now             func() time.Time
}

// CaddyModule returns the Caddy module information.
func (StickySelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.session_sticky",
		New: func() caddy.Module { return new(StickySelection) },
	}
}

// Provision applies defaults, loads the fallback policy and attaches the
// pin table.
func (p *StickySelection) Provision(ctx caddy.Context) error {
	if p.TTL == 0 {
		p.TTL = caddy.Duration(DefaultTTL)
	}
	if p.MaxSessions == 0 {
		p.MaxSessions = DefaultMaxSessions
	}
	if p.FailureCooldown == 0 {
		p.FailureCooldown = caddy.Duration(DefaultFailureCooldown)
	}
	if p.RepinOnStatus == nil {
		p.RepinOnStatus = DefaultRepinOnStatus
	}
	p.balanceFactor = DefaultBalanceFactor
	if p.BalanceFactor != nil {
		p.balanceFactor = *p.BalanceFactor
	}
	if err := p.Validate(); err != nil {
		return err
	}
	p.tiers, _ = newTierSet(p.Tiers) // checked by Validate

	p.placeByFallback = p.FallbackRaw != nil
	if p.FallbackRaw == nil {
		p.FallbackRaw = caddyconfig.JSONModuleObject(reverseproxy.RoundRobinSelection{}, "policy", "round_robin", nil)
	}
	mod, err := ctx.LoadModule(p, "FallbackRaw")
	if err != nil {
		return fmt.Errorf("fallback: loading selection policy: %v", err)
	}
	p.fallback = mod.(reverseproxy.Selector)
	if p.now == nil {
		p.now = time.Now
	}

	// The store is loaded before the table is taken, so that a store
	// that fails to load leaves nothing to release.
	var storeModule PinStoreModule
	if p.StoreRaw != nil {
		mod, err := ctx.LoadModule(p, "StoreRaw")
		if err != nil {
			return fmt.Errorf("store: loading pin store: %v", err)
		}
		storeModule = mod.(PinStoreModule)
	}

	p.tableKey = fmt.Sprintf("ttl=%d max=%d", p.TTL, p.MaxSessions)
	ttl, maxSessions, now := time.Duration(p.TTL), p.MaxSessions, p.now
	t, _, err := tables.LoadOrNew(p.tableKey, func() (caddy.Destructor, error) {
		t := NewPinTable(ttl, maxSessions, now)
		t.StartExpiry(expiryInterval(ttl))
		return t, nil
	})
	if err != nil {
		return err
	}
	p.table = t.(*PinTable)
	p.store = p.table
	if storeModule != nil {
		p.store = storeModule.PinStore(p.table, ttl)
	}
	p.first = new(atomic.Pointer[firstAttempt])
	p.pools = new(cowMap[uint64, *poolRecord])
	p.cleaned = new(atomic.Bool)
	register(p)
	return nil
}

// expiryInterval is how often expired pins are swept: often enough that
// memory follows the TTL, rarely enough to cost nothing.
func expiryInterval(ttl time.Duration) time.Duration {
	return min(max(ttl/4, time.Second), time.Minute)
}

// Validate checks the configuration.
func (p *StickySelection) Validate() error {
	switch {
	case p.TTL < 0:
		return fmt.Errorf("ttl: must be positive, got %s", time.Duration(p.TTL))
	case p.MaxSessions < 0:
		return fmt.Errorf("max_sessions: must be positive, got %d", p.MaxSessions)
	case p.FailureCooldown < 0:
		return fmt.Errorf("failure_cooldown: must not be negative, got %s", time.Duration(p.FailureCooldown))
	case p.BalanceFactor != nil && (*p.BalanceFactor < 0 || (*p.BalanceFactor > 0 && *p.BalanceFactor < 1)):
		return fmt.Errorf("balance_factor: must be 0 (off) or at least 1, got %g", *p.BalanceFactor)
	}
	for _, code := range p.RepinOnStatus {
		if code < 100 || code > 599 {
			return fmt.Errorf("repin_on_status: %d is not an HTTP status", code)
		}
	}
	_, err := newTierSet(p.Tiers)
	return err
}

// Cleanup releases this config's hold on the pin table; the table stops
// when no config holds it.
func (p *StickySelection) Cleanup() error {
	// A second Cleanup must not release another config's hold.
	if p.table == nil || p.cleaned == nil || p.cleaned.Swap(true) {
		return nil
	}
	unregister(p)
	_, err := tables.Delete(p.tableKey)
	return err
}

// pool adapts a Caddy upstream pool to placement, leaving out upstreams
// that are unavailable or excluded for this session.
type pool struct {
	upstreams reverseproxy.UpstreamPool
	exclude   []string
}

func (c pool) Len() int            { return len(c.upstreams) }
func (c pool) Dial(i int) string   { return c.upstreams[i].Dial }
func (c pool) InFlight(i int) int  { return c.upstreams[i].NumRequests() }
func (c pool) Eligible(i int) bool { return c.eligible(c.upstreams[i]) }

// healthyPool is a pool whose healthy members are eligible, full or not.
type healthyPool struct{ pool }

func (c healthyPool) Eligible(i int) bool {
	u := c.upstreams[i]
	return u.Healthy() && !slices.Contains(c.exclude, u.Dial)
}

func (c pool) eligible(u *reverseproxy.Upstream) bool {
	return u.Available() && !slices.Contains(c.exclude, u.Dial)
}

// find returns the pool member dialled at dial, or nil.
func (c pool) find(dial string) *reverseproxy.Upstream {
	for _, u := range c.upstreams {
		if u.Dial == dial {
			return u
		}
	}
	return nil
}

// attempt is the policy's state for one request, kept in the session while
// the request is proxied. Caddy calls Select again with the same request on
// a retry: an attempt that already chose an upstream knows it failed.
type attempt struct {
	policy *StickySelection
	key    PinKey
	failed []string // upstreams that failed earlier attempts of this request
}

// firstAttempt is the policy's state for a request on its first attempt.
// All it holds is the pin namespace of the pool, which every request to the
// pool shares, so a request that is not retried costs no allocation.
type firstAttempt struct {
	policy *StickySelection
	// upstreams is the pool namespace was computed for; a pool with the
	// same dial addresses in the same order is the same pool. (Dynamic
	// upstreams are new values on every request, with the same addresses.)
	upstreams reverseproxy.UpstreamPool
	namespace uint64
}

// firstAttempt returns the first-attempt state for a pool, computing its
// namespace only when the pool differs from the last one seen (static
// upstreams: once).
func (p *StickySelection) firstAttempt(upstreams reverseproxy.UpstreamPool) *firstAttempt {
	if fa := p.first.Load(); fa != nil && slices.EqualFunc(fa.upstreams, upstreams, sameDial) {
		return fa
	}
	fa := &firstAttempt{
		policy:    p,
		upstreams: slices.Clone(upstreams),
		namespace: Namespace(p.Name, pool{upstreams: upstreams}),
	}
	p.pools.loadOrStore(fa.namespace, func() *poolRecord { return new(poolRecord) }).observe(fa.upstreams)
	p.first.Store(fa)
	return fa
}

func sameDial(a, b *reverseproxy.Upstream) bool { return a.Dial == b.Dial }

// Done learns how the request ended.
func (fa *firstAttempt) Done(s *session.Session, status int) {
	fa.policy.done(PinKey{Namespace: fa.namespace, Session: s.Key}, s, status)
}

// Select chooses the upstream for a request.
func (p *StickySelection) Select(upstreams reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	s := session.FromContext(r.Context())
	// With tiers, the policy works on the home tier, and further tiers
	// take what it cannot.
	candidates, home := upstreams, 0
	var homeBuf [16]*reverseproxy.Upstream
	if p.tiers != nil {
		home, candidates = p.tiers.home(upstreams, homeBuf[:0])
	}
	if s == nil {
		p.firstAttempt(upstreams) // remembers the pool for the admin API
		up := p.fallback.Select(candidates, r, w)
		if up == nil && p.tiers != nil {
			up = p.tiers.spillSessionless(upstreams, home, func(c reverseproxy.UpstreamPool) *reverseproxy.Upstream {
				return p.fallback.Select(c, r, w)
			})
		}
		countDecision(dialOf(up), session.DecisionNone)
		return up
	}
	c := pool{upstreams: candidates}
	// Caddy calls Select again with the same request on a retry; the
	// session then holds this policy's state and the upstream that failed.
	var a *attempt
	switch b := s.Balancer.(type) {
	case *attempt:
		if b.policy == p && s.Upstream != "" {
			a = b
		}
	case *firstAttempt:
		if b.policy == p && s.Upstream != "" {
			// The first retry: only now does the request need state of
			// its own.
			a = &attempt{policy: p, key: PinKey{Namespace: b.namespace, Session: s.Key}}
			s.Balancer = a
		}
	}
	retry := a != nil
	var key PinKey
	if retry {
		key = a.key
	} else {
		fa := p.firstAttempt(upstreams)
		key = PinKey{Namespace: fa.namespace, Session: s.Key}
		s.Balancer, s.Upstream = fa, ""
	}
	now := p.now()

	var up *reverseproxy.Upstream
	decision := session.DecisionNew
	if retry {
		// The previous attempt of this request failed on s.Upstream. Move
		// the pin if it was there; a failed spill leaves the pin at home.
		failed := s.Upstream
		a.failed = append(a.failed, failed)
		pin, ok := p.store.Peek(key)
		c.exclude = withAvoided(a.failed, pin, now)
		if !ok || pin.Upstream == failed {
			up = p.place(s, c, r, w, p.tiers == nil)
			decision = session.DecisionRepinFailed
			if up != nil {
				p.store.Repin(key, up.Dial, failed, now.Add(time.Duration(p.FailureCooldown)))
			}
		} else if u := c.find(pin.Upstream); u != nil && c.eligible(u) {
			// The pin is elsewhere and can take the request: a concurrent
			// request of the session has moved it off the failed upstream
			// already, or home has room again after a spill.
			up, decision = u, session.DecisionHit
		} else {
			up, decision = p.place(s, c, r, w, p.tiers == nil), session.DecisionSpill
		}
	} else if pin, ok := p.store.Get(key); ok {
		pinned := c.find(pin.Upstream)
		switch {
		case pinned == nil:
			decision = session.DecisionRepinRemoved
		case pin.Avoids(pinned.Dial, now):
			decision = session.DecisionRepinFailed
		case !pinned.Healthy():
			decision = session.DecisionRepinUnhealthy
		case pinned.Full():
			decision = session.DecisionSpill
		default:
			up, decision = pinned, session.DecisionHit
		}
		if up == nil {
			if pinned != nil {
				c.exclude = []string{pinned.Dial}
			}
			c.exclude = withAvoided(c.exclude, pin, now)
			up = p.place(s, c, r, w, p.tiers == nil)
			if up != nil && decision != session.DecisionSpill {
				p.store.Repin(key, up.Dial, pin.Avoid, pin.AvoidUntil)
			}
		}
	} else {
		up = p.place(s, c, r, w, p.tiers == nil)
		if up != nil {
			// A concurrent first request of the session may have pinned it
			// already: follow that pin while it is available.
			if winner := p.store.PinIfAbsent(key, up.Dial); winner != up.Dial {
				if u := c.find(winner); u != nil && u.Available() {
					up = u
				}
			}
		} else if p.tiers != nil {
			// The home tier is full: the session is pinned there all the
			// same, on a healthy upstream, and this request goes to a
			// further tier below.
			if i := Place(s.Key, healthyPool{c}, 0); i >= 0 {
				p.store.PinIfAbsent(key, c.upstreams[i].Dial)
			}
		}
	}

	if up == nil && p.tiers != nil {
		// Nothing of the home tier can take the request: a further tier
		// does, and the pin stays home.
		var exclude []string
		if retry {
			exclude = a.failed
		}
		if up = p.tiers.spill(s.Key, upstreams, home, exclude, p.balanceFactor); up != nil {
			decision = session.DecisionSpillTier
		} else {
			// No tier can: an upstream the session avoids is better
			// than none.
			up = p.place(s, c, r, w, true)
		}
	}

	s.Decision = decision
	if up != nil {
		s.Upstream = up.Dial
	}
	countDecision(dialOf(up), decision)
	return up
}

// dialOf returns the dial address of up, or "" for none.
func dialOf(up *reverseproxy.Upstream) string {
	if up == nil {
		return ""
	}
	return up.Dial
}

// withAvoided returns exclude plus the upstream the pin still avoids, if
// any, leaving exclude itself unchanged.
func withAvoided(exclude []string, pin Pin, now time.Time) []string {
	if pin.Avoids(pin.Avoid, now) {
		return append(slices.Clip(exclude), pin.Avoid)
	}
	return exclude
}

// place chooses an upstream for the session, away from c.exclude when it
// can: with nothing else available and orExcluded set, an excluded upstream
// is better than none. (With tiers, a further tier comes first.)
func (p *StickySelection) place(s *session.Session, c pool, r *http.Request, w http.ResponseWriter, orExcluded bool) *reverseproxy.Upstream {
	for {
		if p.placeByFallback {
			candidates := c.upstreams
			if len(c.exclude) > 0 {
				candidates = make(reverseproxy.UpstreamPool, 0, len(c.upstreams))
				for _, u := range c.upstreams {
					if !slices.Contains(c.exclude, u.Dial) {
						candidates = append(candidates, u)
					}
				}
			}
			if up := p.fallback.Select(candidates, r, w); up != nil {
				return up
			}
		} else if i := Place(s.Key, c, p.balanceFactor); i >= 0 {
			return c.upstreams[i]
		}
		if len(c.exclude) == 0 || !orExcluded {
			return nil
		}
		c.exclude = nil
	}
}

// Done learns how the request ended.
func (a *attempt) Done(s *session.Session, status int) {
	a.policy.done(a.key, s, status)
}

// done records how a request of the session pinned under key ended. A
// status the policy counts as a failure (also Caddy's own 502/503/504 when
// every attempt failed) makes the session avoid the upstream that answered
// it, so the next request is re-pinned elsewhere.
func (p *StickySelection) done(key PinKey, s *session.Session, status int) {
	if s.Upstream == "" {
		return
	}
	if slices.Contains(p.RepinOnStatus, status) {
		p.store.MarkFailed(key, s.Upstream, p.now().Add(time.Duration(p.FailureCooldown)))
	}
}

// Interface guards
var (
	_ caddy.Provisioner     = (*StickySelection)(nil)
	_ caddy.Validator       = (*StickySelection)(nil)
	_ caddy.CleanerUpper    = (*StickySelection)(nil)
	_ reverseproxy.Selector = (*StickySelection)(nil)
	_ session.Balancer      = (*attempt)(nil)
	_ session.Balancer      = (*firstAttempt)(nil)
)
