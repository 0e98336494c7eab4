package main

import (
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// newLoadClient returns an HTTP client that keeps one connection per
// worker alive, as a gateway's clients and SDKs do.
func newLoadClient(conns int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
		Timeout: time.Minute,
	}
}

// window is what a load run measured between its warm-up and its end.
type window struct {
	Requests  int             // completed inside the window
	Sent      int             // every request sent, warm-up and stragglers included
	Errors    int             // failed or non-2xx, inside the window
	Elapsed   time.Duration   // length of the window
	CPU       time.Duration   // the server's CPU time used inside the window
	Other     time.Duration   // CPU time of processes not part of the benchmark
	Latencies []time.Duration // of the requests completed inside the window, sorted
}

// OtherLoad is the CPU used by other processes during the window, in
// cores: what disturbed the measurement.
func (w window) OtherLoad() float64 { return w.Other.Seconds() / w.Elapsed.Seconds() }

// RPS is the completion rate.
func (w window) RPS() float64 { return float64(w.Requests) / w.Elapsed.Seconds() }

// CPUPerRequest is the server's CPU time per completed request.
func (w window) CPUPerRequest() time.Duration {
	if w.Requests == 0 {
		return 0
	}
	return w.CPU / time.Duration(w.Requests)
}

// Percentile returns the latency at q (0..1).
func (w window) Percentile(q float64) time.Duration { return percentile(w.Latencies, q) }

// completion is one finished request: when it ended (since the run
// started) and how long it took.
type completion struct {
	end, took time.Duration
	failed    bool
}

// runLoad keeps concurrency workers sending requests back to back for
// warmup+length, and measures the window after the warm-up: requests that
// complete in it, their latencies, and the CPU time meter reads over it.
func runLoad(client *http.Client, newRequest func(i uint64) *http.Request, concurrency int,
	warmup, length time.Duration, meter cpuMeter) (window, error) {
	var next atomic.Uint64
	var stop atomic.Bool
	start := time.Now()
	logs := make([][]completion, concurrency)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			log := make([]completion, 0, 4096)
			for !stop.Load() {
				req := newRequest(next.Add(1) - 1)
				t := time.Now()
				failed := !send(client, req)
				end := time.Now()
				log = append(log, completion{end: end.Sub(start), took: end.Sub(t), failed: failed})
			}
			logs[w] = log
		})
	}

	time.Sleep(warmup)
	cpu0, err0 := meter.read()
	t0 := time.Since(start)
	time.Sleep(length)
	cpu1, err1 := meter.read()
	t1 := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err := firstErr(err0, err1); err != nil {
		return window{}, err
	}

	res := window{
		Elapsed: t1 - t0,
		CPU:     cpu1.target - cpu0.target,
		Other:   max(0, (cpu1.machine-cpu0.machine)-(cpu1.ours-cpu0.ours)),
	}
	for _, log := range logs {
		res.Sent += len(log)
		for _, c := range log {
			if c.end < t0 || c.end > t1 {
				continue
			}
			if c.failed {
				res.Errors++
				continue
			}
			res.Requests++
			res.Latencies = append(res.Latencies, c.took)
		}
	}
	slices.Sort(res.Latencies)
	return res, nil
}

// send does one request and reads the whole response; it reports whether
// the request succeeded with a 2xx status.
func send(client *http.Client, req *http.Request) bool {
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
