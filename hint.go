package sessionkeeping

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// hintDomain separates the session hint from every other hash of a key.
const hintDomain = "caddy-session-keeping/hint/v1\x00"

// hintHexLen is the length of {http.session.hash}: 128 bits in hex.
const hintHexLen = 32

// processHintSecret is the hint secret used when hint_secret is not set: 32
// random bytes, drawn once per process so reloads keep the hints stable.
var processHintSecret = sync.OnceValue(func() []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("session_keeping: reading random hint secret: " + err.Error())
	}
	return b
})

// sessionHint returns the opaque hint of a session key: the first 32 hex
// digits of HMAC-SHA256(secret, domain || key). It carries neither the id
// the client sent nor the scope values (tenant identity), only their keyed
// hash.
func sessionHint(secret []byte, k session.Key) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(hintDomain))
	m.Write(k[:])
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:hintHexLen/2])
}
