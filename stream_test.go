package sessionkeeping

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// TestStickyStreamsEventByEvent checks that a streamed response passes
// through session_keeping's response writer and session_sticky one event
// at a time: the upstream writes an event, flushes, and writes the next
// only once the client has received the first.
func TestStickyStreamsEventByEvent(t *testing.T) {
	f := newFleet(t, 2)
	g := startGateway(t, proxyBlock(f, `
		lb_policy session_sticky
		flush_interval -1`))

	// Each stream gets a channel the client closes when it has seen the
	// first event; the upstream waits for it before the second.
	received := map[string]chan struct{}{}
	for _, name := range []string{"sse-1", "sse-2", "ndjson-1"} {
		received[name] = make(chan struct{})
	}
	stalled := make(chan string, 8)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		stream := r.URL.Query().Get("stream")
		if stream == "" {
			return false
		}
		ctype, line := "text/event-stream", "data: %s\n\n"
		if strings.HasPrefix(stream, "ndjson") {
			ctype, line = "application/x-ndjson", "{\"event\":%q}\n"
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, line, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-received[stream]:
		case <-time.After(5 * time.Second):
			stalled <- stream
		}
		fmt.Fprintf(w, line, "second")
		return true
	})

	const sid = "stream-session"
	var home string
	for turn, stream := range []string{"sse-1", "sse-2", "ndjson-1"} {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/messages?stream="+stream,
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", sid)
		resp, err := g.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		want := session.DecisionHit
		if turn == 0 {
			want = session.DecisionNew
			home = resp.Header.Get("X-Upstream")
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Upstream") != home || resp.Header.Get("X-Decision") != want {
			t.Fatalf("%s: %s from %s (%s), want 200 from %s (%s)", stream, resp.Status, resp.Header.Get("X-Upstream"), resp.Header.Get("X-Decision"), home, want)
		}
		var events []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "" {
				continue
			}
			events = append(events, sc.Text())
			if len(events) == 1 {
				close(received[stream])
			}
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: reading the stream: %v", stream, err)
		}
		select {
		case s := <-stalled:
			t.Fatalf("%s: the first event did not reach the client before the second was written", s)
		default:
		}
		if len(events) != 2 || !strings.Contains(events[0], "first") || !strings.Contains(events[1], "second") {
			t.Fatalf("%s: events %q", stream, events)
		}
	}
}

// TestStickyUpgradeThroughWrapper checks that a protocol upgrade (as for a
// WebSocket) still works through session_keeping's response writer, which
// reverse_proxy must hijack, and that the upgraded request pins its session.
func TestStickyUpgradeThroughWrapper(t *testing.T) {
	f := newFleet(t, 3)
	f.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Upgrade") != "echo" {
			return false
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("upstream hijack: %v", err)
			return false
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Upstream: %s\r\nX-Decision: %s\r\n\r\n",
			w.Header().Get("X-Upstream"), w.Header().Get("X-Decision"))
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
		return true
	})
	g := startGateway(t, proxyBlock(f, "\t\tlb_policy session_sticky"))

	const sid = "upgrade-1"
	addr := strings.TrimPrefix(g.base, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /v1/realtime HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Session-Id: %s\r\n\r\n", addr, sid)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	home := resp.Header.Get("X-Upstream")
	if resp.StatusCode != http.StatusSwitchingProtocols || home == "" || resp.Header.Get("X-Decision") != session.DecisionNew {
		t.Fatalf("upgrade: %s from %q (%s), want 101 (new)", resp.Status, home, resp.Header.Get("X-Decision"))
	}
	fmt.Fprint(conn, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
		t.Fatalf("over the upgraded connection: %q, %v", line, err)
	}
	conn.Close()

	if r := g.call(chatPath, sid, 2, false); !r.ok() || r.upstream != home || r.decision != session.DecisionHit {
		t.Fatalf("after the upgrade: %v, want a hit on %s", r, home)
	}
}
