package upstreams

import (
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// This file links stored responses to the sessions that produced them. An
// OpenAI Responses request may carry nothing of its conversation but
// previous_response_id, and only the deployment that stored that response
// can continue it: the request must join the session of the response, and
// so its pin. Links are keyed by a hash of the scope and the response id,
// never the id itself; they expire after linkTTL and the local table holds
// at most maxLinks. With store redis, links are shared by every instance
// through Redis as well.

const (
	// linkTTL is how long a link lives: as long as a pin by default.
	linkTTL = DefaultTTL
	// maxLinks bounds the local table.
	maxLinks = 1 << 20
	// linkShards splits the local table so that writers rarely meet.
	linkShards = 64
)

// LinkStore is a pin store that can also hold response links.
type LinkStore interface {
	// Link links a response to a session for ttl.
	Link(response, sess session.Key, ttl time.Duration)
	// Linked returns the session a response is linked to.
	Linked(response session.Key) (session.Key, bool)
}

// links is the process's own table of response links.
var links = newLinkTable(maxLinks)

// LinkResponse links a response (the hash of its scope and id) to the
// session that produced it, in this process's table and in the Redis
// stores of the loaded policies. The Redis write is done before the answer
// goes on (one round trip, bounded by the store's timeout, once per
// answer), so that the client cannot continue the response through
// another instance before the link is there.
func LinkResponse(response, sess session.Key) {
	links.link(response, sess, time.Now())
	for _, s := range linkStores() {
		s.Link(response, sess, linkTTL)
	}
}

// LinkedSession returns the session a response is linked to: from this
// process's table, or else from the Redis stores of the loaded policies.
func LinkedSession(response session.Key) (session.Key, bool) {
	if sess, ok := links.linked(response, time.Now()); ok {
		return sess, true
	}
	for _, s := range linkStores() {
		if sess, ok := s.Linked(response); ok {
			return sess, true
		}
	}
	return session.Key{}, false
}

// linkStores returns the distinct link-capable stores of the loaded
// policies.
func linkStores() []LinkStore {
	var out []LinkStore
	for _, p := range Policies() {
		if ls, ok := p.store.(LinkStore); ok && !slices.Contains(out, ls) {
			out = append(out, ls)
		}
	}
	return out
}

// linkTable is a bounded map of response links with expiry. Each shard
// evicts its oldest link when full: a response is usually continued by the
// next turn, soon after it was made.
type linkTable struct {
	shards [linkShards]linkShard
}

// linkShard is one part of a linkTable. Its mutex guards both fields.
type linkShard struct {
	mu    sync.Mutex
	m     map[session.Key]linkEntry
	order []session.Key // insertion order, for eviction; a ring once full
	next  int           // the ring's oldest entry once full
	max   int
}

type linkEntry struct {
	sess    session.Key
	expires int64 // Unix nanoseconds
}

func newLinkTable(size int) *linkTable {
	t := &linkTable{}
	for i := range t.shards {
		t.shards[i] = linkShard{m: map[session.Key]linkEntry{}, max: max(size/linkShards, 1)}
	}
	return t
}

func (t *linkTable) shard(k session.Key) *linkShard { return &t.shards[k[0]%linkShards] }

func (t *linkTable) link(response, sess session.Key, now time.Time) {
	s := t.shard(response)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[response]; !ok {
		if len(s.order) < s.max {
			s.order = append(s.order, response)
		} else {
			delete(s.m, s.order[s.next])
			s.order[s.next] = response
			s.next = (s.next + 1) % s.max
		}
	}
	s.m[response] = linkEntry{sess: sess, expires: now.Add(linkTTL).UnixNano()}
}

func (t *linkTable) linked(response session.Key, now time.Time) (session.Key, bool) {
	s := t.shard(response)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[response]
	if !ok || now.UnixNano() > e.expires {
		return session.Key{}, false
	}
	return e.sess, true
}

// Link writes a response link to Redis, best effort: a failure is counted
// and the local table still has the link.
func (s *RedisStore) Link(response, sess session.Key, ttl time.Duration) {
	if !s.reachable() {
		return
	}
	ctx, cancel := s.context()
	err := s.client.Set(ctx, s.linkKey(response), sess.String(), ttl).Err()
	cancel()
	s.answered(err)
}

// Linked reads a response link from Redis.
func (s *RedisStore) Linked(response session.Key) (session.Key, bool) {
	if !s.reachable() {
		return session.Key{}, false
	}
	ctx, cancel := s.context()
	v, err := s.client.Get(ctx, s.linkKey(response)).Result()
	cancel()
	if !s.answered(err) || err != nil {
		return session.Key{}, false
	}
	sess, err := session.ParseKey(v)
	return sess, err == nil
}

// linkKey is the Redis key of a response link: the prefix, "resp:" and the
// response's key in hex.
func (s *RedisStore) linkKey(response session.Key) string {
	var b [96]byte
	out := append(append(b[:0], s.KeyPrefix...), "resp:"...)
	return string(hex.AppendEncode(out, response[:]))
}

// Interface guard
var _ LinkStore = (*RedisStore)(nil)
