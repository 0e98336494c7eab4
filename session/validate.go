package session

import (
	"strings"

	"github.com/tidwall/gjson"
)

// MaxIDLen is the longest session id accepted, in bytes.
const MaxIDLen = 256

// Valid returns v trimmed of surrounding white space, and whether the result
// is a usable session id: 1 to MaxIDLen bytes with no control characters.
// An invalid value is skipped and the next signal is tried.
func Valid(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if len(v) == 0 || len(v) > MaxIDLen {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			return "", false
		}
	}
	return v, true
}

// apply runs the transform t on a raw signal value and validates the result.
func apply(t Transform, v string) (string, bool) {
	if t == TransformSessionUUID {
		v = sessionPart(v)
	}
	return Valid(v)
}

// sessionPart extracts the session id from a Claude Code user id, in either
// of its forms:
//
//	user_<hex>_account_<uuid or empty>_session_<uuid>           (legacy)
//	{"device_id":"…","account_uuid":"…","session_id":"<uuid>"}  (current, a JSON string)
//
// It returns "" when the value has no session part.
func sessionPart(v string) string {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		r := gjson.Get(v, "session_id")
		if r.Type != gjson.String {
			return ""
		}
		return r.Str
	}
	const marker = "_session_"
	if !strings.HasPrefix(v, "user_") {
		return ""
	}
	i := strings.LastIndex(v, marker)
	if i < 0 {
		return ""
	}
	return v[i+len(marker):]
}
