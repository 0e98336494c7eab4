package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	cuts      reasons // of answers cut off after they started, resent
	drops     reasons // of connections lost before an answer, resent

	dropsAtReload atomic.Int64 // lost just after a config reload

	// Each client's conversation so far in tokens (its last prompt and
	// reply), for the working set.
	context []atomic.Int64
}

// workingSet returns the tokens of every client's conversation so far:
// what the engines' caches would hold to miss nothing.
func (a *agents) workingSet() int64 {
	var n int64
	for i := range a.context {
		n += a.context[i].Load()
	}
	return n
}

// run is one client's life, from the point where it joins the workload
// (see joinAt) on.
func (a *agents) run(c client) {
	sleepUntil(a.start.Add(c.start))
	n, from := a.w.joinAt(c.index)
	for a.converse(c, a.w.conversation(c.index, n), from) {
		n, from = n+1, 0
	}
	a.context[c.index].Store(0)
}

// converse plays one conversation from turn from on; the earlier turns
// are history, with the replies any engine would have given. It returns
// false when the run ended first.
func (a *agents) converse(c client, conv conversation, from int) bool {
	system := a.w.systems[conv.system]
	msgs := appendMessage(nil, "system", system)
	var hist *blockHasher // the prompt's blocks, for the router and the history
	if a.router != nil || from > 0 {
		hist = newBlockHasher(a.blockSize)
		hist.message("system", system)
	}
	for i, t := range conv.turns {
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "user", t.user)
		if hist != nil {
			hist.message("user", t.user)
		}
		var reply string
		if i < from {
			prompt := hist.clone()
			prompt.token(genMarker)
			reply = generate(prompt, t.maxTokens)
		} else {
			body := a.body(c, conv, msgs, t.maxTokens)
			for {
				if time.Now().After(a.end) {
					return false
				}
				var ok bool
				if reply, ok = a.send(c, conv, body, hist, i == from); ok {
					break
				}
				// An agent retries a failed call after a pause.
				time.Sleep(t.think)
			}
		}
		msgs = append(msgs, ',')
		msgs = appendMessage(msgs, "assistant", reply)
		if hist != nil {
			hist.message("assistant", reply)
			if a.router == nil && i+1 >= from {
				hist = nil // caught up; only a router needs it now
			}
		}
		if i >= from {
			time.Sleep(t.think)
		}
	}
	return true
}

// body returns the request body of a turn: the model, the reply length,
// the whole history, and for clients that use the body signal the
// session id as prompt_cache_key after the messages.
func (a *agents) body(c client, conv conversation, msgs []byte, maxTokens int) []byte {
	b := make([]byte, 0, len(msgs)+128)
	b = append(b, `{"model":"bench-agent","stream":true,"stream_options":{"include_usage":true},"max_tokens":`...)
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
	if a.router != nil {
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
	var sent time.Time
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
		sent = time.Now()
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
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		a.fail(errors.New(resp.Status))
		return "", false
	}
	ans, err := readStream(resp.Body, sent)
	switch {
	case errors.Is(err, errBadEvent):
		a.fail(err)
		return "", false
	case err != nil:
		// The answer had started, so no proxy could retry it; an agent
		// sends the request again.
		a.cut(err)
		return "", false
	}
	computed, _ := strconv.Atoi(resp.Header.Get(headerComputed))
	a.context[c.index].Store(int64(ans.usage.PromptTokens + ans.usage.CompletionTokens))
	a.tally.answer(time.Since(a.t0), answer{
		prompt: ans.usage.PromptTokens, cached: ans.usage.PromptTokensDetails.CachedTokens,
		computed: computed, ttft: ans.ttft,
	})
	return ans.reply, true
}

// streamedAnswer is what a client read from a streamed answer.
type streamedAnswer struct {
	reply string
	usage chatUsage
	ttft  time.Duration // from sending the request to its first token
}

// errBadEvent is an event of a streamed answer that is not what the
// engines send: a fault, not an answer cut off.
var errBadEvent = errors.New("bad event")

// readStream reads a streamed chat completion to its end. sent is when
// the request went out.
func readStream(body io.Reader, sent time.Time) (streamedAnswer, error) {
	var ans streamedAnswer
	var reply strings.Builder
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	usage, done := false, false
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if string(data) == "[DONE]" {
			done = true
			break
		}
		var c chatChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return ans, fmt.Errorf("%w: %v", errBadEvent, err)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			if reply.Len() == 0 {
				ans.ttft = time.Since(sent)
			}
			reply.WriteString(c.Choices[0].Delta.Content)
		}
		if c.Usage != nil {
			ans.usage, usage = *c.Usage, true
		}
	}
	if err := sc.Err(); err != nil {
		return ans, err
	}
	if !done || !usage || reply.Len() == 0 {
		return ans, errors.New("answer cut short")
	}
	ans.reply = reply.String()
	return ans, nil
}

// fail records a failed request and why it failed.
func (a *agents) fail(err error) {
	at := time.Since(a.t0)
	a.tally.fail(at)
	if a.tally.bucket(at) >= 0 {
		a.failures.add(err, at, a.tally.run)
	}
}

// cut records an answer cut off after it started; the client resends the
// request.
func (a *agents) cut(err error) {
	at := time.Since(a.t0)
	if a.tally.bucket(at) >= 0 {
		a.tally.cut(at)
		a.cuts.add(err, at, a.tally.run)
	}
}

// drop records a connection to the gateway that failed before an answer
// came, when the request is resent.
func (a *agents) drop(err error) {
	at := time.Since(a.t0)
	if a.tally.bucket(at) >= 0 {
		a.tally.drop(at)
		a.drops.add(err, at, a.tally.run)
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
