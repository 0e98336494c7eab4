package session

import (
	"crypto/sha256"
	"encoding/binary"
)

// keyDomain separates session keys from every other hash the plugin makes.
const keyDomain = "caddy-session-keeping/key/v1\x00"

// NewKey derives the scoped key of a session id. Each scope value and the id
// are length-prefixed, so ("ab","c") and ("a","bc") never collide, and the
// same id under two scopes gives two unrelated keys. SHA-256 is used because
// keys separate tenants: a client must not be able to craft an id whose key
// equals another tenant's.
func NewKey(scope []string, id string) Key {
	// Hash from a stack buffer when everything fits, so the common case
	// allocates nothing.
	var stack [512]byte
	buf := append(stack[:0], keyDomain...)
	for _, s := range scope {
		buf = appendLenPrefixed(buf, s)
	}
	buf = appendLenPrefixed(buf, id)
	sum := sha256.Sum256(buf)
	var k Key
	copy(k[:], sum[:])
	return k
}

func appendLenPrefixed(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
