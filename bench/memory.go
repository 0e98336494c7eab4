package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memorySetup is one gateway configuration of the memory measurement.
type memorySetup struct {
	name string
	site func(upstreams string) string
}

// memorySetups are stock Caddy, stock Caddy buffering request bodies for
// retries, and the plugin with its defaults and with every body held for
// retries (its replacement for request_buffers).
var memorySetups = []memorySetup{
	{"stock `reverse_proxy`", func(up string) string {
		return "reverse_proxy " + up
	}},
	{"stock + `request_buffers 32MiB`", func(up string) string {
		return "reverse_proxy " + up + " {\n\trequest_buffers 32MiB\n}"
	}},
	{"`session_keeping` + `session_sticky`", func(up string) string {
		return "session_keeping\nreverse_proxy " + up + " {\n\tlb_policy session_sticky\n}"
	}},
	{"`session_keeping { buffer_bodies on }` + `session_sticky`", func(up string) string {
		return "session_keeping {\n\tbuffer_bodies on\n}\nreverse_proxy " + up + " {\n\tlb_policy session_sticky\n}"
	}},
}

// memoryConfig sets the memory measurement's size.
type memoryConfig struct {
	Clients  int           // concurrent requests
	BodySize int           // bytes of each request body
	Hold     time.Duration // how long an upstream waits after reading a body before it answers
}

// memoryResult is Caddy's peak resident memory of one setup.
type memoryResult struct {
	Setup    string
	PeakRSS  int64 // bytes (VmHWM)
	Failures int   // requests not answered 200 with the body intact
}

// runMemory sends cfg.Clients concurrent requests with cfg.BodySize-byte
// chat bodies and no session header to a fresh Caddy process per setup,
// whose upstreams hold each answer for cfg.Hold after reading the body (as
// an engine does before its first token), and reads the process's peak
// resident memory.
func runMemory(env *benchEnv, cfg memoryConfig) ([]memoryResult, error) {
	addrs, stop, err := startSinks(2, holdingSink(cfg.Hold))
	if err != nil {
		return nil, err
	}
	defer stop()
	body := chatBodyOfSize(cfg.BodySize)
	var out []memoryResult
	for i, s := range memorySetups {
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("memory-%d", i)
		p, err := startCaddy(env.caddy, env.dir, name, caddyfile(ports[0], ports[1], s.site(strings.Join(addrs, " "))), ports[0], ports[1])
		if err != nil {
			return nil, err
		}
		failures := sendConcurrently(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", ports[1]), body, cfg.Clients)
		peak, err := peakRSS(p.cmd.Process.Pid)
		p.stop()
		if err != nil {
			return nil, err
		}
		env.logf("memory %-55s peak RSS %4.0f MB, %d of %d requests failed", s.name, float64(peak)/1e6, failures, cfg.Clients)
		out = append(out, memoryResult{Setup: s.name, PeakRSS: peak, Failures: failures})
	}
	return out, nil
}

// chatBodyOfSize returns an OpenAI chat body of exactly size bytes.
func chatBodyOfSize(size int) []byte {
	head := `{"model":"m","messages":[{"role":"user","content":"`
	tail := `"}]}`
	b := make([]byte, 0, size)
	b = append(b, head...)
	for len(b) < size-len(tail) {
		b = append(b, 'a'+byte(len(b)%26))
	}
	return append(b, tail...)
}

// sendConcurrently posts body to url from n clients at once and returns
// how many did not get a 200 with the body's length echoed back.
func sendConcurrently(url string, body []byte, n int) int {
	client := newLoadClient(n)
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failures := 0
	for range n {
		wg.Go(func() {
			resp, err := client.Post(url, "application/json", bytes.NewReader(body))
			ok := err == nil && resp.StatusCode == http.StatusOK && resp.Header.Get("X-Body-Len") == strconv.Itoa(len(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if !ok {
				mu.Lock()
				failures++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failures
}

// holdingSink reads the whole body, waits hold, and answers 200 with the
// body's length in X-Body-Len.
func holdingSink(hold time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		time.Sleep(hold)
		w.Header().Set("X-Body-Len", strconv.FormatInt(n, 10))
	}
}

// peakRSS returns the peak resident set size of process pid (VmHWM).
func peakRSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
