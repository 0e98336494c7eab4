package upstreams

import (
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// Candidates is a pool of upstreams as placement sees it.
type Candidates interface {
	Len() int
	// Dial is the upstream's dial address, its identity for hashing.
	Dial(i int) string
	// InFlight is the number of requests the upstream is serving now.
	InFlight(i int) int
	// Eligible reports whether the upstream may take the session.
	Eligible(i int) bool
}

// Place chooses the upstream for a session that has none: rendezvous (HRW)
// hashing of the session key over the eligible upstreams, so every Caddy
// instance with the same upstreams, and every restart, makes the same first
// pick, and adding an upstream moves only the sessions it now wins.
//
// With balanceFactor > 0 the load is bounded: an upstream already serving
// at least ceil(balanceFactor × (in-flight + 1) / eligible) requests is
// passed over for the next in the session's rendezvous order, so a burst
// of new sessions that hash alike cannot pile onto one upstream. (Some
// eligible upstream is always under that bound; should the counts move
// while they are read so that none is, the bound is ignored.) A factor of
// 0 or less turns the bound off.
//
// It returns the index of the chosen candidate, or -1 if none is eligible.
func Place[C Candidates](key session.Key, c C, balanceFactor float64) int {
	n := c.Len()
	limit := math.Inf(1)
	if balanceFactor > 0 {
		eligible, total := 0, 0
		for i := 0; i < n; i++ {
			if c.Eligible(i) {
				eligible++
				total += c.InFlight(i)
			}
		}
		if eligible == 0 {
			return -1
		}
		// In floating point, so that a huge factor means no bound
		// rather than an integer overflow.
		limit = math.Ceil(balanceFactor * float64(total+1) / float64(eligible))
	}
	k := keyHash(key)
	best, bestScore := -1, uint64(0)       // the winner under the bound
	anyBest, anyBestScore := -1, uint64(0) // the winner ignoring the bound
	for i := 0; i < n; i++ {
		if !c.Eligible(i) {
			continue
		}
		s := score(k, c.Dial(i))
		if anyBest < 0 || s > anyBestScore {
			anyBest, anyBestScore = i, s
		}
		if float64(c.InFlight(i)) >= limit {
			continue
		}
		if best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return anyBest
	}
	return best
}

// keyHash folds a session key to 64 bits; the key is a uniform hash already.
func keyHash(key session.Key) uint64 {
	return binary.LittleEndian.Uint64(key[:8]) ^ binary.LittleEndian.Uint64(key[8:])
}

// score is the rendezvous weight of an upstream for a session: a strong mix
// of the two hashes, so that each upstream's weights are independent.
func score(keyHash uint64, dial string) uint64 {
	return Mix64(keyHash ^ xxhash.Sum64String(dial))
}

// Mix64 is the SplitMix64 finaliser: a bijection with full avalanche.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Namespace returns the pin namespace of a policy: its name when set, else
// an order-independent hash of the pool's dial addresses, so that two pools
// never share pins and a reordered upstream list keeps them.
func Namespace[C Candidates](name string, c C) uint64 {
	if name != "" {
		return Mix64(xxhash.Sum64String(name))
	}
	var sum uint64
	for i := 0; i < c.Len(); i++ {
		sum += Mix64(xxhash.Sum64String(c.Dial(i)))
	}
	return Mix64(sum ^ 0x9e3779b97f4a7c15)
}
