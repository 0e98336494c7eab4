package main

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// reasons counts failures by their reason, for the report, with the
// span of the run in which they happened.
type reasons struct {
	mu   sync.Mutex
	seen map[string]*reasonSpan
}

// reasonSpan is how often a reason came, and when first and last, in
// percent of the run.
type reasonSpan struct {
	n           int
	first, last float64
}

// add records an error that happened at at into a run of length run.
func (r *reasons) add(err error, at, run time.Duration) {
	msg, when := reason(err), 100*at.Seconds()/run.Seconds()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]*reasonSpan{}
	}
	s, ok := r.seen[msg]
	if !ok {
		s = &reasonSpan{first: when, last: when}
		r.seen[msg] = s
	}
	s.n++
	s.first, s.last = min(s.first, when), max(s.last, when)
}

// String lists the reasons, most frequent first.
func (r *reasons) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.seen))
	for k := range r.seen {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := r.seen[b].n - r.seen[a].n; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		s := r.seen[k]
		when := fmt.Sprintf("%.0f%%", s.first)
		if last := fmt.Sprintf("%.0f%%", s.last); last != when {
			when = fmt.Sprintf("%.0f–%s", s.first, last)
		}
		parts[i] = fmt.Sprintf("%d× %s at %s", s.n, k, when)
	}
	return strings.Join(parts, "; ")
}

// addrPair matches the local and remote addresses in network errors.
var addrPair = regexp.MustCompile(`\S+:\d+->\S+:\d+`)

// reason describes an error without the URL and the ephemeral ports, so
// that alike errors count together.
func reason(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return addrPair.ReplaceAllString(err.Error(), "gateway")
}
