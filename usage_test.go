package sessionkeeping

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/activity"
)

// llmAPI answers like one LLM API, JSON or streamed, reporting the usage
// the request asks for in its X-Prompt and X-Cached headers. A streamed
// answer sends its events apart, gap apart, each flushed, and records when
// it flushed each.
type llmAPI struct {
	gap time.Duration

	mu      sync.Mutex
	flushed map[string][]time.Time // by X-Request-Id
}

func (a *llmAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	var prompt, cached int
	fmt.Sscan(r.Header.Get("X-Prompt"), &prompt)
	fmt.Sscan(r.Header.Get("X-Cached"), &cached)
	stream := r.Header.Get("X-Stream") == "1"
	var doc string
	var events []string
	switch {
	case strings.HasSuffix(r.URL.Path, "/chat/completions"):
		u := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":%d}}`, prompt, cached)
		doc = `{"id":"chatcmpl-1","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":` + u + `}`
		for i := range 5 {
			events = append(events, fmt.Sprintf(`data: {"choices":[{"delta":{"content":"t%d"}}],"usage":null}`, i))
		}
		events = append(events, `data: {"choices":[],"usage":`+u+`}`, "data: [DONE]")
	case strings.HasSuffix(r.URL.Path, "/responses"):
		u := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":3}`, prompt, cached)
		doc = `{"id":"resp_1","object":"response","output":[],"usage":` + u + `}`
		events = append(events, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}")
		for i := range 5 {
			events = append(events, fmt.Sprintf("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"t%d\"}", i))
		}
		events = append(events, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":"+u+"}}")
	case strings.HasSuffix(r.URL.Path, "/messages"):
		// Anthropic counts cache reads and writes besides input_tokens.
		read, created := cached, 10
		in := prompt - read - created
		doc = fmt.Sprintf(`{"id":"msg_1","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":3}}`, in, created, read)
		events = append(events, fmt.Sprintf("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":%d,\"cache_creation_input_tokens\":%d,\"cache_read_input_tokens\":%d,\"output_tokens\":1}}}", in, created, read))
		for i := range 5 {
			events = append(events, fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"t%d\"}}", i))
		}
		events = append(events, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":3}}", "event: message_stop\ndata: {\"type\":\"message_stop\"}")
	default: // Gemini
		u := fmt.Sprintf(`{"promptTokenCount":%d,"cachedContentTokenCount":%d,"candidatesTokenCount":3}`, prompt, cached)
		doc = `{"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]}}],"usageMetadata":` + u + `}`
		for i := range 5 {
			events = append(events, fmt.Sprintf(`data: {"candidates":[{"content":{"parts":[{"text":"t%d"}]}}],"usageMetadata":%s}`, i, u))
		}
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, doc)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	var times []time.Time
	for _, e := range events {
		io.WriteString(w, e+"\n\n")
		rc.Flush()
		times = append(times, time.Now())
		time.Sleep(a.gap)
	}
	a.mu.Lock()
	a.flushed[r.Header.Get("X-Request-Id")] = times
	a.mu.Unlock()
}

// apiPaths are the paths of the four APIs.
var apiPaths = []string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1beta/models/g:streamGenerateContent"}

// TestUsageThroughCaddy sends requests of every API, streamed and not,
// with and without a session, and checks that the tokens counted in the
// metrics and the admin API are exactly those the upstream reported, and
// that streamed events reach the client as they are flushed.
func TestUsageThroughCaddy(t *testing.T) {
	api := &llmAPI{gap: 40 * time.Millisecond, flushed: map[string][]time.Time{}}
	up := httptest.NewServer(api)
	t.Cleanup(up.Close)
	addr := strings.TrimPrefix(up.URL, "http://")
	g := startGatewayWith(t, gwOptions{admin: true, errorLog: true}, fmt.Sprintf(`reverse_proxy %s {
		lb_policy session_sticky
		flush_interval -1
	}`, addr))

	before := scrape(t, g.admin+"/metrics")
	beforeUp := upstreamTokens(addr)
	var wantPrompt, wantCached int64
	wantByDecision := map[string][2]int64{}
	var gaps []time.Duration
	n := 0
	for _, path := range apiPaths {
		for _, stream := range []bool{false, true} {
			sid := fmt.Sprintf("s-%s-%v", path, stream)
			for turn, sid := range []string{sid, sid, ""} {
				n++
				prompt, cached := 2000+37*n, 1000+turn*11*n
				req, _ := http.NewRequest(http.MethodPost, g.base+path, strings.NewReader(`{"model":"m"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Prompt", fmt.Sprint(prompt))
				req.Header.Set("X-Cached", fmt.Sprint(cached))
				req.Header.Set("X-Request-Id", fmt.Sprint(n))
				if stream {
					req.Header.Set("X-Stream", "1")
				}
				if sid != "" {
					req.Header.Set("X-Session-Id", sid)
				}
				resp, err := g.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var reads []time.Time
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "data: ") {
						reads = append(reads, time.Now())
					}
				}
				if err := sc.Err(); err != nil {
					g.checkErrorLog()
					t.Fatalf("%s: reading the answer after %d events: %v", path, len(reads), err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s: status %d", path, resp.StatusCode)
				}
				if stream {
					api.mu.Lock()
					flushed := api.flushed[fmt.Sprint(n)]
					api.mu.Unlock()
					if len(flushed) != len(reads) {
						t.Fatalf("%s: %d events flushed, %d read", path, len(flushed), len(reads))
					}
					for i := range reads {
						gaps = append(gaps, reads[i].Sub(flushed[i]))
						// Each event reached the client before the upstream
						// sent the next: nothing was held back.
						if i+1 < len(flushed) && !reads[i].Before(flushed[i+1]) {
							t.Errorf("%s: event %d reached the client %v after its flush, after the next event's flush", path, i, reads[i].Sub(flushed[i]))
						}
					}
				}
				decision := "none"
				if sid != "" {
					decision = map[int]string{0: "new", 1: "hit"}[turn]
				}
				wantPrompt += int64(prompt)
				wantCached += int64(cached)
				d := wantByDecision[decision]
				wantByDecision[decision] = [2]int64{d[0] + int64(prompt), d[1] + int64(cached)}
			}
		}
	}

	after := scrape(t, g.admin+"/metrics")
	for decision, want := range wantByDecision {
		labels := fmt.Sprintf(`{decision="%s",upstream="%s"}`, decision, addr)
		gotPrompt := after["caddy_session_keeping_prompt_tokens_total"+labels] - before["caddy_session_keeping_prompt_tokens_total"+labels]
		gotCached := after["caddy_session_keeping_cached_prompt_tokens_total"+labels] - before["caddy_session_keeping_cached_prompt_tokens_total"+labels]
		if int64(gotPrompt) != want[0] || int64(gotCached) != want[1] {
			t.Errorf("decision %s: metrics count %v prompt and %v cached tokens, the upstream reported %d and %d", decision, gotPrompt, gotCached, want[0], want[1])
		}
	}
	read := after[`caddy_session_keeping_usage_answers_total{result="read"}`] - before[`caddy_session_keeping_usage_answers_total{result="read"}`]
	if int(read) != n {
		t.Errorf("usage read from %v answers, want %d", read, n)
	}
	got := upstreamTokens(addr)
	if got.PromptTokens-beforeUp.PromptTokens != wantPrompt || got.CachedTokens-beforeUp.CachedTokens != wantCached {
		t.Errorf("history: %d prompt, %d cached tokens; the upstream reported %d, %d",
			got.PromptTokens-beforeUp.PromptTokens, got.CachedTokens-beforeUp.CachedTokens, wantPrompt, wantCached)
	}

	slices.Sort(gaps)
	t.Logf("flush-to-read gap over %d events: median %v, max %v", len(gaps), gaps[len(gaps)/2], gaps[len(gaps)-1])
}

// upstreamTokens returns the history's totals of an upstream.
func upstreamTokens(addr string) activity.Tokens {
	for _, u := range history.Upstreams() {
		if u.Upstream == addr {
			return u.Tokens
		}
	}
	return activity.Tokens{}
}
