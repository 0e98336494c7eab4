package sessionkeeping

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/internal/redistest"
)

// responsesEngine answers the OpenAI Responses API like one deployment
// that stores its responses: every answer has a new id, and a request that
// continues a response this deployment did not store gets 404, as another
// deployment's does.
type responsesEngine struct {
	name   string
	n      atomic.Int64
	mu     sync.Mutex
	stored map[string]bool
}

func (e *responsesEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Previous string `json:"previous_response_id"`
		Stream   bool   `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	json.Unmarshal(body, &req)
	e.mu.Lock()
	known := req.Previous == "" || e.stored[req.Previous]
	id := fmt.Sprintf("resp_%s_%d", e.name, e.n.Add(1))
	if known {
		e.stored[id] = true
	}
	e.mu.Unlock()
	w.Header().Set("X-Upstream", e.name)
	if !known {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"Previous response with id '%s' not found.","type":"invalid_request_error"}}`, req.Previous)
		return
	}
	u := `{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024},"output_tokens":5}`
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q,"object":"response","status":"completed","output":[],"usage":%s}`, id, u)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":%q,\"usage\":null}}\n\n", id)
	http.NewResponseController(w).Flush()
	fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":%q,\"usage\":%s}}\n\n", id, u)
}

// responsesFleet starts n engines and returns their dial addresses.
func responsesFleet(t *testing.T, n int) []string {
	var addrs []string
	for i := range n {
		e := &responsesEngine{name: fmt.Sprintf("u%d", i+1), stored: map[string]bool{}}
		s := httptest.NewServer(e)
		t.Cleanup(s.Close)
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	return addrs
}

// responsesTurn sends one turn of a Responses conversation to base: the
// first with its opening as input, each later one with only the previous
// response's id and the new message. It returns the new response's id
// and the upstream that answered.
func responsesTurn(client *http.Client, base string, conv, turn int, previous string, stream bool) (id, upstream string, err error) {
	body := fmt.Sprintf(`{"model":"gpt-5","input":[{"role":"user","content":"conversation %d, turn %d"}],"store":true,"stream":%v}`, conv, turn, stream)
	if previous != "" {
		body = fmt.Sprintf(`{"model":"gpt-5","previous_response_id":%q,"input":[{"role":"user","content":"turn %d"}],"store":true,"stream":%v}`, previous, turn, stream)
	}
	resp, err := client.Post(base+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", resp.Header.Get("X-Upstream"), fmt.Errorf("status %d: %s", resp.StatusCode, answer)
	}
	i := strings.Index(string(answer), `"id":"resp_`)
	if i < 0 {
		return "", "", fmt.Errorf("no response id in %s", answer)
	}
	id, _, _ = strings.Cut(string(answer[i+len(`"id":"`):]), `"`)
	return id, resp.Header.Get("X-Upstream"), nil
}

// runResponsesConversations runs conversations of turns each, turn k of
// every conversation through gateways[k%len(gateways)], and checks that
// every conversation stays on one upstream and that they spread.
func runResponsesConversations(t *testing.T, client *http.Client, gateways []string, conversations, turns int) {
	t.Helper()
	used := map[string]bool{}
	for c := range conversations {
		prev, first := "", ""
		for turn := range turns {
			id, up, err := responsesTurn(client, gateways[turn%len(gateways)], c, turn, prev, (c+turn)%2 == 0)
			if err != nil {
				t.Fatalf("conversation %d, turn %d (on %s): %v", c, turn, up, err)
			}
			if turn == 0 {
				first = up
			} else if up != first {
				t.Fatalf("conversation %d moved from %s to %s at turn %d", c, first, up, turn)
			}
			prev = id
		}
		used[first] = true
	}
	if len(used) < 2 {
		t.Errorf("%d conversations all on %v", conversations, used)
	}
}

// TestPreviousResponseIDThroughCaddy: Responses conversations that send
// only previous_response_id after their first turn stay on the upstream
// that stored their responses, one of four.
func TestPreviousResponseIDThroughCaddy(t *testing.T) {
	addrs := responsesFleet(t, 4)
	g := startGateway(t, fmt.Sprintf(`reverse_proxy %s {
		lb_policy session_sticky
	}`, strings.Join(addrs, " ")))
	runResponsesConversations(t, g.client, []string{g.base}, 12, 5)
}

// TestPreviousResponseIDAcrossInstances: the same through two Caddy
// processes that share store redis, every turn on the other instance than
// the turn before. Placement is random, so only the shared links and pins
// can keep a conversation on its upstream.
func TestPreviousResponseIDAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Caddy and runs two gateways")
	}
	srv := redistest.Start(t)
	addrs := responsesFleet(t, 4)
	caddyfile := fmt.Sprintf(`{
	admin 127.0.0.1:{admin}
	auto_https off
	persist_config off
}
http://127.0.0.1:{port} {
	session_keeping
	reverse_proxy %s {
		lb_policy session_sticky {
			fallback random
			store redis {
				address %s
				key_prefix links-test:
				timeout 200ms
			}
		}
	}
}`, strings.Join(addrs, " "), srv.Addr)
	bin := buildCaddy(t)
	a, b := startCaddyProcess(t, bin, caddyfile), startCaddyProcess(t, bin, caddyfile)
	client := &http.Client{Timeout: 10 * time.Second}
	runResponsesConversations(t, client, []string{a.base, b.base}, 12, 5)
	if keys := srv.Keys("links-test:resp:*"); len(keys) < 12*5 {
		t.Errorf("%d response links in Redis, want one per answer (%d)", len(keys), 12*5)
	}
}
