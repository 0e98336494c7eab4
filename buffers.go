package sessionkeeping

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// bodyBuffers holds the request bodies read by every session_keeping
// handler of the process, within one budget: the largest max_buffered of
// the handlers currently provisioned (session.DefaultMaxBuffered when none
// sets it). The budget is the process's, not a handler's, because memory
// is.
var bodyBuffers = session.NewBufferPool(session.DefaultMaxBuffered)

// budgets records the max_buffered of every provisioned handler, so that
// the budget follows the config: during a reload both configs are
// provisioned, and the old one's value goes with its Cleanup.
var budgets struct {
	mu  sync.Mutex
	set map[*Handler]int64
}

// claimBudget registers h's budget and applies the largest one.
func claimBudget(h *Handler) {
	budgets.mu.Lock()
	defer budgets.mu.Unlock()
	if budgets.set == nil {
		budgets.set = make(map[*Handler]int64)
	}
	budgets.set[h] = h.MaxBuffered
	applyBudgetLocked()
}

// releaseBudget forgets h's budget.
func releaseBudget(h *Handler) {
	budgets.mu.Lock()
	defer budgets.mu.Unlock()
	delete(budgets.set, h)
	applyBudgetLocked()
}

func applyBudgetLocked() {
	var largest int64
	for _, b := range budgets.set {
		largest = max(largest, b)
	}
	if largest == 0 {
		largest = session.DefaultMaxBuffered
	}
	bodyBuffers.SetBudget(largest)
}

// unbufferedLogInterval is the least time between two log lines about
// bodies turned away by the budget.
const unbufferedLogInterval = time.Minute

// unbuffered counts bodies turned away by the budget since the last log
// line, and lastLog is when that line was written (Unix nanoseconds).
var (
	unbuffered atomic.Int64
	lastLog    atomic.Int64
)

// noteUnbuffered counts a body that the budget turned away, and logs it at
// most once per unbufferedLogInterval.
func (h *Handler) noteUnbuffered() {
	unbufferedBodies.Inc()
	n := unbuffered.Add(1)
	now := time.Now().UnixNano()
	last := lastLog.Load()
	if now-last < int64(unbufferedLogInterval) || !lastLog.CompareAndSwap(last, now) {
		return
	}
	unbuffered.Add(-n)
	budget, inUse, _, _ := bodyBuffers.Stats()
	h.logger.Warn("request bodies over the max_buffered budget streamed through unread; their sessions were resolved from headers only",
		zap.Int64("bodies", n), zap.Int64("max_buffered", budget), zap.Int64("buffered_bytes", inUse))
}
