package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// agents runs the clients of a workload against a gateway for one
// policy: each client works through its conversations, sending the whole
// history every turn and thinking between turns, until the run ends.
type agents struct {
	w         *workload
	client    *http.Client
	url       string   // the gateway's chat completions endpoint
	router    router   // routes requests when the load generator does (oracle, peers)
	cookies   []string // the cookie value that selects each engine, for router
	blockSize int
	start     time.Time // when the clients start (the warm-up begins)
	t0        time.Time // when the measured run begins
	end       time.Time // no request starts after this
	tally     *tally
	failures  reasons // of failed requests
	drops     reasons // of connections lost before an answer, resent

	dropsAtReload atomic.Int64 // lost just after a config reload
}

// run is one client's life.
func (a *agents) run(c client) {
	sleepUntil(a.start.Add(c.start))
	for n := 0; a.converse(c, a.w.conversation(c.index, n)); n++ {
	}
}

// converse plays one conversation; it returns false when the run ended
// first.
func (a *agents) converse(c client, conv conversation) bool {
	system := a.w.systems[conv.system]
	msgs := appendMessage(nil, "system", system)
	var hist *blockHasher // the prompt's blocks, for the router
	if a.router != nil {
		hist = newBlockHasher(a.blockSize)
		hist.message("system", system)
	}
	for i, t := range conv.turns {
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "user", t.user)
		if hist != nil {
			hist.message("user", t.user)
		}
		body := a.body(c, conv, msgs, t.maxTokens)
		var reply string
		for {
			if time.Now().After(a.end) {
				return false
			}
			var ok bool
			if reply, ok = a.send(c, conv, body, hist, i == 0); ok {
				break
			}
			// An agent retries a failed call after a pause.
			time.Sleep(t.think)
		}
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "assistant", reply)
		if hist != nil {
			hist.message("assistant", reply)
		}
		time.Sleep(t.think)
	}
	return true
}

// body returns the request body of a turn: the model, the reply length,
// the whole history, and for clients that use the body signal the
// session id as prompt_cache_key after the messages.
func (a *agents) body(c client, conv conversation, msgs []byte, maxTokens int) []byte {
	b := make([]byte, 0, len(msgs)+128)
	b = append(b, `{"model":"bench-agent","max_tokens":`...)
	b = strconv.AppendInt(b, int64(maxTokens), 10)
	b = append(b, `,"messages":[`...)
	b = append(b, msgs...)
	b = append(b, ']')
	if c.signal == signalBody {
		b = append(b, `,"prompt_cache_key":`...)
		b = appendJSONString(b, conv.id)
	}
	return append(b, '}')
}

// clientBackoff are the pauses before resending a request whose
// connection to the gateway failed before any answer came: OpenAI's and
// Anthropic's SDKs retry such errors twice, after growing pauses (here
// scaled down like the think times). A gateway closes its idle keep-alive
// connections when it reloads its config, and a request written onto one
// of them at that moment is lost in transit; the pause lets the client
// notice the other closed connections before it picks one again. An
// answer with an error status is never resent.
var clientBackoff = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond}

// send makes one request and records it. It returns the reply and whether
// the request succeeded.
func (a *agents) send(c client, conv conversation, body []byte, hist *blockHasher, first bool) (string, bool) {
	var cookie string
	if hist != nil {
		prompt := hist.clone()
		prompt.token(genMarker)
		r := routeRequest{blocks: prompt.blocks, first: first}
		if c.signal == signalHeader {
			r.session = conv.id
		}
		if i := a.router.route(r); i >= 0 {
			cookie = a.cookies[i]
		}
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, a.url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if c.signal == signalHeader {
			req.Header.Set("X-Session-Id", conv.id)
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: oracleCookie, Value: cookie})
		}
		var err error
		if resp, err = a.client.Do(req); err == nil {
			break
		}
		if attempt == len(clientBackoff) {
			a.fail(err)
			return "", false
		}
		a.drop(err)
		time.Sleep(clientBackoff[attempt])
	}
	defer resp.Body.Close()
	var out chatResponse
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		a.fail(errors.New(resp.Status))
		return "", false
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
		a.fail(fmt.Errorf("bad response: %v", err))
		return "", false
	}
	a.tally.add(time.Since(a.t0), out.Usage.PromptTokens, out.Usage.PromptTokensDetails.CachedTokens, false)
	return out.Choices[0].Message.Content, true
}

// fail records a failed request and why it failed.
func (a *agents) fail(err error) {
	at := time.Since(a.t0)
	a.tally.add(at, 0, 0, true)
	if a.tally.bucket(at) >= 0 {
		a.failures.add(reason(err, at, a.tally.run))
	}
}

// drop records a connection to the gateway that failed before an answer
// came, when the request is resent.
func (a *agents) drop(err error) {
	at := time.Since(a.t0)
	if a.tally.bucket(at) >= 0 {
		a.tally.drop(at)
		a.drops.add(reason(err, at, a.tally.run))
		if nearReload(at.Seconds() / a.tally.run.Seconds()) {
			a.dropsAtReload.Add(1)
		}
	}
}

// sleepUntil sleeps until t.
func sleepUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}
