package upstreams

import "time"

// PinStore keeps the pins of a policy. The in-process PinTable is the
// default store; a store module (store redis) keeps them where every Caddy
// instance of a fleet reads them, falling back to the PinTable when it
// cannot be reached.
//
// The methods mirror PinTable's, and a store must be safe for concurrent
// use. A store never fails a request: when it cannot answer, it answers from
// the in-process table instead.
type PinStore interface {
	// Get returns the live pin of k and starts its TTL again.
	Get(k PinKey) (Pin, bool)
	// Peek returns the live pin of k without refreshing it.
	Peek(k PinKey) (Pin, bool)
	// PinIfAbsent pins k to upstream unless it has a live pin, and
	// returns the upstream of the pin in force.
	PinIfAbsent(k PinKey, upstream string) string
	// Repin moves k to upstream; a non-empty avoid keeps the session away
	// from that upstream until avoidUntil.
	Repin(k PinKey, upstream, avoid string, avoidUntil time.Time)
	// MarkFailed makes the session avoid upstream until until.
	MarkFailed(k PinKey, upstream string, until time.Time)
	// Delete drops the pin of k, reporting whether there was one.
	Delete(k PinKey) bool
}

// PinStoreModule is implemented by the modules of the
// http.reverse_proxy.selection_policies.session_sticky.stores namespace.
type PinStoreModule interface {
	// PinStore returns the store for one policy's pins. local is the
	// policy's in-process table, which the store falls back to; ttl is how
	// long a pin lives without use.
	PinStore(local *PinTable, ttl time.Duration) PinStore
}

// Interface guard
var _ PinStore = (*PinTable)(nil)
