package session

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
)

// StripFields are the top-level body members that strip_client_signals
// removes: gateway conventions that provider APIs do not know (OpenAI's API
// rejects unknown body parameters). Provider-native fields such as
// prompt_cache_key, metadata.user_id and conversation are never removed.
var StripFields = []string{"session_id", "litellm_session_id"}

// StripBody removes the top-level StripFields members from the JSON body of
// req, which is read under the same rules as for resolution (JSON without
// Content-Encoding, at most the max body, within the buffer budget), and
// edited in place. Every other byte of the body is kept:
// a removed member goes with exactly one comma next to it, and whitespace
// stays where it was. r.Body, r.ContentLength and any Content-Length header
// are set to match the new body. A body that is not read (not JSON,
// encoded, larger than the max body, over the budget) or is not a
// well-formed object passes untouched.
//
// It reports whether the body changed. A *BodyError means the body could not
// be read; the request must then be answered with an error.
func (r *Resolver) StripBody(req *http.Request) (bool, error) {
	body, _, err := captureBody(req, captureRule{max: r.maxBody, pool: r.buffers})
	if err != nil || body == nil {
		return false, err
	}
	n, ok := stripMembers(body, StripFields)
	if !ok {
		return false, nil
	}
	req.Body.(*heldBody).resize(n)
	req.ContentLength = int64(n)
	if req.Header.Get("Content-Length") != "" {
		req.Header.Set("Content-Length", strconv.Itoa(n))
	}
	return true, nil
}

// stripMembers removes the top-level members named in names from body, in
// place, and returns the new length. It reports false (and leaves body
// alone) when there is nothing to remove or body is not a well-formed JSON
// object.
func stripMembers(body []byte, names []string) (int, bool) {
	type member struct {
		start, end int // the member: from its key's opening quote to the end of its value
		remove     bool
	}
	var stack [16]member // most request bodies have fewer top-level members
	members := stack[:0]
	found := false
	complete := eachMember(body, func(key, value []byte) bool {
		// key and value are sub-slices of body; their capacities give
		// their offsets.
		start := cap(body) - cap(key) - 1
		end := cap(body) - cap(value) + len(value)
		m := member{start: start, end: end, remove: matchName(key, names)}
		found = found || m.remove
		members = append(members, m)
		return true
	})
	if !complete || !found {
		return 0, false
	}
	// comma[i] is the offset of the comma between members i and i+1.
	comma := make([]int, len(members)-1)
	for i := range comma {
		j := skipSpace(body, members[i].end)
		if j >= len(body) || body[j] != ',' {
			return 0, false
		}
		comma[i] = j
	}
	// Cut each run a..b of removed members with as many commas.
	var cuts [][2]int // byte ranges to drop, in any order
	n := len(members)
	for a := 0; a < n; a++ {
		if !members[a].remove {
			continue
		}
		b := a
		for b+1 < n && members[b+1].remove {
			b++
		}
		for i := a; i <= b; i++ {
			cuts = append(cuts, [2]int{members[i].start, members[i].end})
		}
		// The commas to drop: those after the run, or, when the run ends
		// the object, those before it (or between its members, when it is
		// the whole object).
		first, last := a, b
		if b == n-1 {
			first, last = max(a-1, 0), b-1
		}
		for i := first; i <= last; i++ {
			cuts = append(cuts, [2]int{comma[i], comma[i] + 1})
		}
		a = b
	}
	slices.SortFunc(cuts, func(x, y [2]int) int { return x[0] - y[0] })
	// Move each kept run left over the cuts: the destination never passes
	// the source, so the bytes not yet moved are intact.
	n, at := 0, 0
	for _, c := range cuts {
		n += copy(body[n:], body[at:c[0]])
		at = c[1]
	}
	n += copy(body[n:], body[at:])
	return n, true
}

// matchName reports whether the raw JSON key (escapes left as sent) names
// one of names.
func matchName(raw []byte, names []string) bool {
	key := string(raw)
	if bytes.IndexByte(raw, '\\') >= 0 {
		s, err := strconv.Unquote(`"` + key + `"`)
		if err != nil {
			return false
		}
		key = s
	}
	return slices.Contains(names, key)
}
