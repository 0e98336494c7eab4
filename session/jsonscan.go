package session

import (
	"slices"

	"github.com/sessionkeeping/caddy-session-keeping/internal/jsonscan"
)

// This file skims JSON bodies for the top-level members that resolution and
// the fingerprint need. The scanning itself is internal/jsonscan's; gjson
// decodes the small values once they are found. The short names below keep
// the session code and its tests as they read.

func skipSpace(b []byte, i int) int                             { return jsonscan.SkipSpace(b, i) }
func skipString(b []byte, i int) int                            { return jsonscan.SkipString(b, i) }
func skipValue(b []byte, i int) int                             { return jsonscan.SkipValue(b, i) }
func byteMask(w uint64, c byte) uint64                          { return jsonscan.ByteMask(w, c) }
func eachMember(b []byte, fn func(key, value []byte) bool) bool { return jsonscan.EachMember(b, fn) }

// swarSpan is jsonscan.SWARSpan, for unescapeInto's word-at-a-time copy.
const swarSpan = jsonscan.SWARSpan

// maxFields bounds how many top-level members one skim collects.
const maxFields = 32

// fields holds the raw values of selected top-level members of a JSON object,
// found in one skim. The first occurrence of a duplicated key wins, as in
// gjson.
type fields struct {
	names []string // wanted names, at most maxFields; shared, read-only
	vals  [maxFields][]byte
	body  []byte // the whole body skimmed
}

// skim fills f from body. It stops as soon as every wanted member is found.
// It reports false when body is not a JSON object.
func (f *fields) skim(body []byte) bool {
	f.body = body
	missing := len(f.names)
	return eachMember(body, func(key, value []byte) bool {
		for i, name := range f.names {
			if f.vals[i] == nil && len(name) == len(key) && string(key) == name {
				f.vals[i] = value
				missing--
				break
			}
		}
		return missing > 0
	})
}

// get returns the raw value of the wanted member name, or nil if the body has
// none (or name was not wanted).
func (f *fields) get(name string) []byte {
	if i := slices.Index(f.names, name); i >= 0 {
		return f.vals[i]
	}
	return nil
}
