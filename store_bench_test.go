package sessionkeeping

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/internal/redistest"
)

// BenchmarkEndToEndStore sends requests of 1,000 pinned sessions through a
// real Caddy (session_keeping and lb_policy session_sticky) to three
// loopback upstreams, with the pins in memory and in a redis-server on
// loopback, in the same run. Besides ns/op it reports the median and 99th
// percentile latency of a request as seen by the client.
func BenchmarkEndToEndStore(b *testing.B) {
	srv := redistest.Start(b)
	var dials []string
	for range 3 {
		u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, `{"ok":true}`)
		}))
		b.Cleanup(u.Close)
		dials = append(dials, strings.TrimPrefix(u.URL, "http://"))
	}
	const sessions = 1000
	for _, tc := range []struct{ name, store string }{
		{"memory", ""},
		{"redis", "store redis {\n\t\t\t\taddress " + srv.Addr + "\n\t\t\t}"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			port := freePort(b)
			startCaddy(b, fmt.Sprintf(`http://127.0.0.1:%d {
	session_keeping
	reverse_proxy %s {
		lb_policy session_sticky {
			%s
		}
	}
}`, port, strings.Join(dials, " "), tc.store))
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
			defer client.CloseIdleConnections()
			send := func(i int) {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m","messages":[]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-Id", fmt.Sprintf("bench-session-%d", i%sessions))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			for i := range sessions { // pin every session
				send(i)
			}
			var took []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				began := time.Now()
				send(i)
				took = append(took, time.Since(began))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}
