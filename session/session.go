// Package session identifies the conversation (session) an LLM API request
// belongs to: from client headers, from JSON body fields, or from a
// fingerprint of the conversation's opening. It is plain Go with no Caddy
// imports so that it can be tested and benchmarked on its own.
package session

import (
	"context"
	"encoding/hex"
	"fmt"
)

// Key is the scoped identity of a session: a hash of the scope values and the
// session id. It is what pins, logs and metrics use in place of the raw id,
// which may be a credential-like value chosen by the client.
type Key [16]byte

// String returns the key as 32 lowercase hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey parses the 32 hex digits of Key.String.
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*len(k) {
		return k, fmt.Errorf("session key %q: want %d hex digits", s, 2*len(k))
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("session key %q: %v", s, err)
	}
	return k, nil
}

// IsZero reports whether k is the zero key (no session).
func (k Key) IsZero() bool { return k == Key{} }

// Session is the result of resolving one request.
type Session struct {
	// ID is the session id as the client sent it (after validation and
	// transform), or "auto-" followed by 32 hex digits for a fingerprint.
	ID string
	// Key is the hash of (scope, ID).
	Key Key
	// Source names the signal that matched: "header:<Name>", "body:<path>"
	// or "auto".
	Source string
	// Model is the top-level "model" field of a JSON body (or, for Gemini,
	// the model in the request path); empty when the body was not read.
	Model string

	// Decision and Upstream describe the last upstream selection for this
	// request: set by the selection policy, read by placeholders and logs.
	Decision string
	Upstream string
	// Balancer is the selection policy that placed this request, holding
	// its per-request state; it is told how the request ended.
	Balancer Balancer
}

// Balancer is a selection policy's view of one request: the handler calls
// Done once, after the request has been proxied, with the final status the
// client got (0 if none).
type Balancer interface {
	Done(s *Session, status int)
}

// The decisions a selection policy reports in Session.Decision.
const (
	DecisionNew            = "new"             // no live pin: placed and pinned
	DecisionHit            = "hit"             // pinned upstream used
	DecisionSpill          = "spill"           // pinned upstream full: sent elsewhere, pin kept
	DecisionSpillTier      = "spill_tier"      // no upstream of the cheapest tier could take it: a pricier tier did, pin kept
	DecisionRepinUnhealthy = "repin_unhealthy" // pinned upstream unhealthy: re-pinned
	DecisionRepinFailed    = "repin_failed"    // pinned upstream failed the session: re-pinned
	DecisionRepinRemoved   = "repin_removed"   // pinned upstream left the pool: re-pinned
	DecisionNone           = "none"            // no session
)

type ctxKey struct{}

// NewContext returns a copy of ctx carrying s.
func NewContext(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// FromContext returns the session stored by NewContext, or nil.
func FromContext(ctx context.Context) *Session {
	s, _ := ctx.Value(ctxKey{}).(*Session)
	return s
}
