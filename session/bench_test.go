package session

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// claudeSizedBody returns a Claude Code-shaped request body of about size
// bytes: model, a growing messages array, system blocks, tools, and (when
// withMetadata) metadata.user_id after all of them.
func claudeSizedBody(size int, withMetadata bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","messages":[`)
	turn := 0
	for b.Len() < size-2048 {
		if turn > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":"Turn %d: %s"}]}`, role, turn,
			strings.Repeat(`func main() {\n\tfmt.Println(\"hello, world\")\n}\n`, 40))
		turn++
	}
	b.WriteString(`],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.593; cc_entrypoint=sdk-cli; cch=9f3a;"},` +
		`{"type":"text","text":"You are Claude Code, an interactive CLI tool.","cache_control":{"type":"ephemeral"}}],` +
		`"tools":[{"name":"Bash","description":"Run a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]`)
	if withMetadata {
		b.WriteString(`,"metadata":{"user_id":"{\"device_id\":\"` + strings.Repeat("ab", 32) + `\",\"account_uuid\":\"\",\"session_id\":\"` + ccUUID + `\"}"}`)
	}
	b.WriteString(`,"max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":31999},"stream":true}`)
	return b.Bytes()
}

// benchRequest is a reusable POST whose body is reset before each use, so
// the benchmark measures resolution and not request construction.
type benchRequest struct {
	req  *http.Request
	body []byte
	rd   bytes.Reader
	rc   io.ReadCloser
}

func newBenchRequest(path string, body []byte, headers ...string) *benchRequest {
	br := &benchRequest{body: body}
	br.req = &http.Request{Method: http.MethodPost, URL: &url.URL{Path: path}, Header: http.Header{}}
	br.req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		br.req.Header.Set(headers[i], headers[i+1])
	}
	br.rc = io.NopCloser(&br.rd)
	return br
}

func (br *benchRequest) reset() *http.Request {
	br.rd.Reset(br.body)
	br.req.Body = br.rc
	br.req.ContentLength = int64(len(br.body))
	return br.req
}

func benchResolve(b *testing.B, br *benchRequest, wantSource string) {
	r := newResolver(b, defaultConfig)
	scope := []string{"user-1"}
	res, err := r.Resolve(br.reset(), scope)
	if err != nil || res.Source != wantSource {
		b.Fatalf("resolved %+v, %v; want source %s", res, err, wantSource)
	}
	b.SetBytes(int64(len(br.body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.Resolve(br.reset(), scope)
	}
}

func BenchmarkResolveHeader(b *testing.B) {
	br := newBenchRequest("/v1/messages", claudeSizedBody(50<<10, true), "X-Claude-Code-Session-Id", ccUUID)
	benchResolve(b, br, "header:X-Claude-Code-Session-Id")
}

func BenchmarkResolveMetadataUserID50KiB(b *testing.B) {
	benchResolve(b, newBenchRequest("/v1/messages", claudeSizedBody(50<<10, true)), "body:metadata.user_id")
}

func BenchmarkResolveAuto16KiB(b *testing.B) {
	benchResolve(b, newBenchRequest("/v1/messages", claudeSizedBody(16<<10, false)), "auto")
}

func BenchmarkResolveAuto1MiB(b *testing.B) {
	benchResolve(b, newBenchRequest("/v1/messages", claudeSizedBody(1<<20, false)), "auto")
}

// benchCopy is the baseline: reading the same body into a new buffer of its
// size, the read that any body-based resolution cannot avoid.
func benchCopy(b *testing.B, body []byte) {
	br := newBenchRequest("/v1/messages", body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := br.reset()
		buf := make([]byte, req.ContentLength)
		io.ReadFull(req.Body, buf)
	}
}

func BenchmarkCopyBody50KiB(b *testing.B) { benchCopy(b, claudeSizedBody(50<<10, true)) }
func BenchmarkCopyBody16KiB(b *testing.B) { benchCopy(b, claudeSizedBody(16<<10, false)) }
func BenchmarkCopyBody1MiB(b *testing.B)  { benchCopy(b, claudeSizedBody(1<<20, false)) }

// The benchmarks below take a body resolution apart, to show where its time
// goes beyond the copy: the skim alone, and the fingerprint alone.

// proseBody returns a body of about size bytes whose strings are long and
// have no escapes, the best case for a vectorised quote search.
func proseBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","messages":[`)
	for turn := 0; b.Len() < size-1024; turn++ {
		if turn > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"%s"}`, strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// benchSkim measures one skim of body for the members the default resolver
// wants, which reads the whole body: some of them are never present.
func benchSkim(b *testing.B, body []byte) {
	r := newResolver(b, defaultConfig)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f := fields{names: r.skimNames}
		if !f.skim(body) {
			b.Fatal("skim failed")
		}
	}
}

func BenchmarkSkimCode16KiB(b *testing.B) { benchSkim(b, claudeSizedBody(16<<10, false)) }
func BenchmarkSkimCode1MiB(b *testing.B)  { benchSkim(b, claudeSizedBody(1<<20, false)) }
func BenchmarkSkimProse1MiB(b *testing.B) { benchSkim(b, proseBody(1<<20)) }

// BenchmarkFingerprintCode16KiB measures the fingerprint of an already
// skimmed body whose opening turn is escape-dense code, so that decoding its
// strings is most of the work.
func BenchmarkFingerprintCode16KiB(b *testing.B) {
	r := newResolver(b, defaultConfig)
	body := claudeSizedBody(16<<10, false)
	f := fields{names: r.skimNames}
	f.skim(body)
	scope := []string{"user-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := fingerprint(&f, "/v1/messages", modelOf(&f, "/v1/messages"), scope); !ok {
			b.Fatal("no fingerprint")
		}
	}
}

// benchOverhead alternates the baseline copy of the body with a resolution of
// it, timing each, and reports medians over the pairs: the copy (ns/copy),
// the resolution (ns/resolve), and the resolution as a multiple of the copy
// (x-copy). Taken pair by pair, the ratio holds still on a busy machine, where
// the separate Resolve and Copy benchmarks catch different bursts of load.
// Medians also leave out the garbage collection and page faults that the
// per-op means of those benchmarks share, so x-copy is the stricter ratio:
// the resolution against the bare copy.
func benchOverhead(b *testing.B, br *benchRequest, wantSource string) {
	r := newResolver(b, defaultConfig)
	scope := []string{"user-1"}
	if res, err := r.Resolve(br.reset(), scope); err != nil || res.Source != wantSource {
		b.Fatalf("resolved %+v, %v; want source %s", res, err, wantSource)
	}
	var ratios, copies, resolves []float64
	for b.Loop() {
		t0 := time.Now()
		req := br.reset()
		buf := make([]byte, req.ContentLength)
		io.ReadFull(req.Body, buf)
		t1 := time.Now()
		r.Resolve(br.reset(), scope)
		t2 := time.Now()
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
		copies = append(copies, float64(t1.Sub(t0)))
		resolves = append(resolves, float64(t2.Sub(t1)))
	}
	slices.Sort(ratios)
	slices.Sort(copies)
	slices.Sort(resolves)
	b.ReportMetric(ratios[len(ratios)/2], "x-copy")
	b.ReportMetric(copies[len(copies)/2], "ns/copy")
	b.ReportMetric(resolves[len(resolves)/2], "ns/resolve")
}

func BenchmarkOverheadMetadataUserID50KiB(b *testing.B) {
	benchOverhead(b, newBenchRequest("/v1/messages", claudeSizedBody(50<<10, true)), "body:metadata.user_id")
}

func BenchmarkOverheadAuto16KiB(b *testing.B) {
	benchOverhead(b, newBenchRequest("/v1/messages", claudeSizedBody(16<<10, false)), "auto")
}

func BenchmarkOverheadAuto1MiB(b *testing.B) {
	benchOverhead(b, newBenchRequest("/v1/messages", claudeSizedBody(1<<20, false)), "auto")
}
