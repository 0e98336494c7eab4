package activity

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkFullHistoryGC fills a history to its default bound with
// requests whose path and model are fresh strings, as requests give, and
// reports the heap objects it keeps per request and how long a garbage
// collection takes with it in memory: what the history costs every
// collection cycle of the process.
func BenchmarkFullHistoryGC(b *testing.B) {
	t0 := time.Unix(1_800_000_000, 0)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := New(0, 0)
	for i := range DefaultMaxRequests {
		r := req(t0, i)
		r.Path = string([]byte("/v1/chat/completions"))
		r.Model = fmt.Sprint("model-", i%4)
		l.Record(sess(i%(DefaultMaxRequests/PerSession)), "", r)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	objects := float64(after.HeapObjects-before.HeapObjects) / float64(DefaultMaxRequests)
	for b.Loop() {
		runtime.GC()
	}
	runtime.KeepAlive(l)
	b.ReportMetric(objects, "objects/request")
}
