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

// reasons counts failures by their reason, for the report.
type reasons struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *reasons) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int{}
	}
	r.counts[reason]++
}

// String lists the reasons, most frequent first.
func (r *reasons) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := r.counts[b] - r.counts[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d× %s", r.counts[k], k)
	}
	return strings.Join(parts, "; ")
}

// addrPair matches the local and remote addresses in network errors.
var addrPair = regexp.MustCompile(`\S+:\d+->\S+:\d+`)

// reason describes an error that happened at at into a run of length
// run: the error without the URL and the ephemeral ports (so that alike
// errors count together) and when, in percent of the run.
func reason(err error, at, run time.Duration) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	msg := addrPair.ReplaceAllString(err.Error(), "gateway")
	return fmt.Sprintf("%s at %.0f%%", msg, 100*at.Seconds()/run.Seconds())
}
