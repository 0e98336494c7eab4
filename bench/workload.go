package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// signal is how a client tells the gateway which conversation a request
// belongs to.
type signal int

const (
	signalHeader signal = iota // an X-Session-Id header
	signalBody                 // a prompt_cache_key body field
	signalNone                 // nothing: only the replayed history
)

func (s signal) String() string {
	return [...]string{"header", "body", "history"}[s]
}

// The share of clients by signal, in percent; the rest send nothing. Agent
// harnesses that set a session header are common, SDK users who set
// prompt_cache_key less so, and many clients just replay the history.
const (
	headerPercent = 40
	bodyPercent   = 20
)

// workloadConfig sets the shape of the agent workload.
type workloadConfig struct {
	Seed               uint64
	Clients            int
	MinTurns, MaxTurns int
	ThinkMin, ThinkMax time.Duration
}

// Text sizes in words (= tokens). System prompts are shared by many
// conversations, like the few agent harnesses in use; user turns are
// tasks and tool results; replies are short, as tool calls are.
const (
	systemPrompts                  = 8
	systemMinWords, systemMaxWords = 300, 1500
	firstUserMin, firstUserMax     = 30, 300
	userMinWords, userMaxWords     = 20, 400
	replyMinTokens, replyMaxTokens = 20, 150
)

// workload is a deterministic agent workload: the same seed gives the same
// clients, conversations and messages, whatever the timing.
type workload struct {
	cfg     workloadConfig
	systems []string
	clients []client
}

// client is one agent: it runs conversations one after another.
type client struct {
	index  int
	signal signal
	start  time.Duration // delay before its first request, to stagger starts
}

// conversation is one agent task: a system prompt, then turns.
type conversation struct {
	id     string // the explicit session id, for clients that send one
	system int
	turns  []turn
}

// turn is one request of a conversation: the user message (a task or a
// tool result), the reply length asked for, and the think time after it.
type turn struct {
	user      string
	maxTokens int
	think     time.Duration
}

// newWorkload builds the clients and the shared system prompts.
func newWorkload(cfg workloadConfig) *workload {
	w := &workload{cfg: cfg}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x737973))
	for range systemPrompts {
		w.systems = append(w.systems, text(rng, between(rng, systemMinWords, systemMaxWords)))
	}
	// A shuffled deck of signals, so the shares are exact.
	signals := make([]signal, cfg.Clients)
	for i := range signals {
		switch p := i * 100 / max(cfg.Clients, 1); {
		case p < headerPercent:
			signals[i] = signalHeader
		case p < headerPercent+bodyPercent:
			signals[i] = signalBody
		default:
			signals[i] = signalNone
		}
	}
	rng.Shuffle(len(signals), func(i, j int) { signals[i], signals[j] = signals[j], signals[i] })
	for i := range cfg.Clients {
		w.clients = append(w.clients, client{
			index:  i,
			signal: signals[i],
			start:  time.Duration(rng.Int64N(int64(time.Second))),
		})
	}
	return w
}

// conversation returns the n-th conversation of client c. It depends only
// on the seed, c and n.
func (w *workload) conversation(c, n int) conversation {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(c)<<32|uint64(n)))
	conv := conversation{
		id:     fmt.Sprintf("agent-%d-task-%d-%08x", c, n, rng.Uint32()),
		system: rng.IntN(len(w.systems)),
	}
	turns := between(rng, w.cfg.MinTurns, w.cfg.MaxTurns)
	for t := range turns {
		lo, hi := userMinWords, userMaxWords
		if t == 0 {
			lo, hi = firstUserMin, firstUserMax
		}
		conv.turns = append(conv.turns, turn{
			user:      text(rng, between(rng, lo, hi)),
			maxTokens: between(rng, replyMinTokens, replyMaxTokens),
			think:     w.cfg.ThinkMin + time.Duration(rng.Int64N(int64(w.cfg.ThinkMax-w.cfg.ThinkMin)+1)),
		})
	}
	return conv
}

// joinAt returns where a client joins the workload: which of its
// conversations, and at which turn. A run then starts as if it had been
// going for long: a client is in the middle of a conversation, longer ones
// being as much more likely as they last longer (a conversation is
// skipped unless a uniform draw falls below its share of the longest
// possible), at a uniform turn of it.
func (w *workload) joinAt(c int) (conv, turn int) {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, 0x6a6f696e<<32|uint64(c)))
	for n := 0; ; n++ {
		turns := len(w.conversation(c, n).turns)
		if rng.IntN(w.cfg.MaxTurns) < turns {
			return n, rng.IntN(turns)
		}
	}
}

// between returns a uniform integer in [lo, hi].
func between(rng *rand.Rand, lo, hi int) int {
	return lo + rng.IntN(hi-lo+1)
}

// meanPromptTokens estimates the prompt size of an average request from
// each client's first conversation: the system prompt, every earlier turn
// and reply, the new turn, and the markers around them. Times the number
// of clients it is the working set the engines' caches see at once.
func (w *workload) meanPromptTokens() float64 {
	var sum, n float64
	for c := range w.clients {
		conv := w.conversation(c, 0)
		ctx := 1 + wordCount(w.systems[conv.system])
		for _, t := range conv.turns {
			ctx += 1 + wordCount(t.user)
			sum += float64(ctx + 1) // the generation marker
			n++
			ctx += 1 + t.maxTokens
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

// wordCount counts the space-separated words of s.
func wordCount(s string) int {
	if s == "" {
		return 0
	}
	n := 1
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			n++
		}
	}
	return n
}
