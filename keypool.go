package sessionkeeping

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"

	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
)

// KeyPool is a named pool of upstream API keys. The placeholder
// `{http.session.api_key.<name>}` gives each request one key of the pool:
// a request with a session gets the key chosen by rendezvous hashing of the
// session key over the pool, so a session keeps its key across requests,
// restarts and replicas, and removing a key moves only the sessions that
// were on it; a request without a session (or every request, with sticky
// off) gets the next key in round robin.
//
// Key values may be placeholders of the global replacer, such as
// `{env.OPENAI_KEY_1}`; they are replaced once, when the config is loaded.
// Keys are never logged, shown by the admin API or put in error messages.
type KeyPool struct {
	// The pool's name, as used in the placeholder: letters, digits, `-`
	// and `_`.
	Name string `json:"name"`

	// The keys, in order. Duplicates (after placeholder replacement) are
	// dropped; a key that is empty after replacement (an unset
	// environment variable) fails the config load.
	Keys []string `json:"keys"`

	// Whether requests with a session keep one key. Default: true.
	Sticky *bool `json:"sticky,omitempty"`
}

// keyPool is a provisioned KeyPool.
type keyPool struct {
	keys   []string
	ids    []uint64 // per key: a hash of its value, the rendezvous identity
	sticky bool
	next   atomic.Uint64 // round-robin counter
}

// keyIDDomain separates the rendezvous identities of keys from every other
// hash the plugin makes.
const keyIDDomain = "caddy-session-keeping/api-key/v1\x00"

// validPoolName reports whether name can appear in a placeholder.
func validPoolName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkKeyPools checks the pool definitions without replacing placeholders;
// its errors name the option and the pool, never a key.
func checkKeyPools(pools []KeyPool) error {
	seen := map[string]bool{}
	for _, p := range pools {
		if !validPoolName(p.Name) {
			return fmt.Errorf("key_pool: bad pool name %q: want letters, digits, - and _", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("key_pool: pool %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		if len(p.Keys) == 0 {
			return fmt.Errorf("key_pool %s: the pool has no keys", p.Name)
		}
	}
	return nil
}

// provisionKeyPools replaces the global placeholders in the keys and builds
// the pools.
func provisionKeyPools(pools []KeyPool) (map[string]*keyPool, error) {
	if err := checkKeyPools(pools); err != nil {
		return nil, err
	}
	if len(pools) == 0 {
		return nil, nil
	}
	repl := caddy.NewReplacer()
	out := make(map[string]*keyPool, len(pools))
	for _, p := range pools {
		kp := &keyPool{sticky: p.Sticky == nil || *p.Sticky}
		seen := map[string]bool{}
		for i, k := range p.Keys {
			v := repl.ReplaceAll(k, "")
			if v == "" {
				return nil, fmt.Errorf("key_pool %s: key %d is empty after placeholder replacement (unset environment variable?)", p.Name, i+1)
			}
			if seen[v] {
				continue
			}
			seen[v] = true
			kp.keys = append(kp.keys, v)
			sum := sha256.Sum256([]byte(keyIDDomain + v))
			kp.ids = append(kp.ids, binary.LittleEndian.Uint64(sum[:8]))
		}
		out[p.Name] = kp
	}
	return out, nil
}

// pick returns the index of the key for a request with session key k, or
// for a request without a session when k is nil.
func (p *keyPool) pick(k *session.Key) int {
	if k == nil || !p.sticky || len(p.keys) == 1 {
		return int((p.next.Add(1) - 1) % uint64(len(p.keys)))
	}
	return rendezvous(*k, p.ids)
}

// rendezvous returns the index of the identity with the highest score for
// session key k (highest random weight hashing). The score depends only on
// the session key and the identity, so adding or removing an identity moves
// only the sessions whose highest score it had or gets.
func rendezvous(k session.Key, ids []uint64) int {
	lo := binary.LittleEndian.Uint64(k[:8])
	hi := binary.LittleEndian.Uint64(k[8:])
	best, bestScore := 0, uint64(0)
	for i, id := range ids {
		s := upstreams.Mix64(upstreams.Mix64(lo^id) ^ hi)
		if i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}
