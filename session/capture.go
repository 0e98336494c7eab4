package session

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// DefaultMaxBody is the default bound on the body read for resolution:
// 32 MiB, the largest request body LLM providers accept.
const DefaultMaxBody = 32 << 20

// firstChunk is the buffer a body of unknown length (chunked) is first read
// into; it doubles as the body turns out larger.
const firstChunk = 32 << 10

// BodyError reports that the request body could not be read (the client
// went away, or request_body max_size was exceeded). The request must not be
// proxied: its body is incomplete.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "reading request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// errReleased is what a read of a held body gets after its buffer went back
// to the pool: only a reader that started after the response had begun can
// see it, and it must not get another request's bytes.
var errReleased = errors.New("request body released: the response has started")

// captureRule says which bodies captureBody reads.
type captureRule struct {
	max     int64       // the largest body read
	pool    *BufferPool // where the buffer comes from; nil allocates
	anyType bool        // read bodies of any type, not only JSON
}

// captureBody reads the body of r into a buffer from the pool when it is at
// most max bytes (and, unless anyType, may be JSON), and replaces r.Body by
// a heldBody that gives whoever reads it next exactly the bytes the client
// sent. It returns nil when it leaves the body unread (no body, not JSON,
// Content-Encoding set), when the body is larger than max, or when the
// pool's budget refuses the buffer (refused is then true); the body still
// streams through untouched.
//
// A body whose length was not declared (chunked) gets ContentLength set once
// it has been read whole, so it is sent upstream with a Content-Length.
//
// A body this function has replaced already, and nobody has read from since,
// is not read again: its bytes are returned as they are (nil for a body that
// was too large).
func captureBody(r *http.Request, rule captureRule) (body []byte, refused bool, err error) {
	if hb, ok := r.Body.(*heldBody); ok {
		return hb.unread(), false, nil
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ContentLength > rule.max {
		return nil, false, nil
	}
	if !rule.anyType && !mayBeJSON(r.Header) {
		return nil, false, nil
	}
	if n := r.ContentLength; n > 0 {
		buf := rule.pool.Get(n)
		if buf == nil {
			return nil, true, nil
		}
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			rule.pool.Put(buf)
			return nil, false, &BodyError{err}
		}
		r.Body = holdBody(buf, true, r.Body, rule.pool)
		return buf, false, nil
	}
	buf, whole, refused, err := readChunked(r.Body, rule)
	if err != nil {
		return nil, false, &BodyError{err}
	}
	if buf == nil {
		return nil, refused, nil
	}
	// A prefix (too large, or the budget refused to grow it) is sent
	// first, then the rest, untouched.
	r.Body = holdBody(buf, whole, r.Body, rule.pool)
	if !whole {
		return nil, refused, nil
	}
	r.ContentLength = int64(len(buf))
	r.TransferEncoding = nil
	return buf, false, nil
}

// readChunked reads a body of unknown length into buffers from the pool,
// each step twice the last, until EOF or until more than max bytes were
// read. It returns what it read (nil when the pool refused the first
// buffer) and whether that is the whole body; refused reports that the
// budget stopped it.
func readChunked(src io.Reader, rule captureRule) (buf []byte, whole, refused bool, err error) {
	limit := rule.max + 1 // one byte past max tells a body over max
	buf = rule.pool.Get(min(firstChunk, limit))
	if buf == nil {
		return nil, false, true, nil
	}
	n := 0
	for {
		k, err := src.Read(buf[n:])
		n += k
		switch {
		case int64(n) == limit:
			return buf[:n], false, false, nil
		case err == io.EOF:
			return buf[:n], true, false, nil
		case err != nil:
			rule.pool.Put(buf)
			return nil, false, false, err
		case n < len(buf):
			continue
		}
		bigger := rule.pool.Get(min(2*int64(len(buf)), limit))
		if bigger == nil {
			return buf[:n], false, true, nil
		}
		copy(bigger, buf[:n])
		rule.pool.Put(buf)
		buf = bigger
	}
}

// mayBeJSON reports whether a body with these headers may be read: a JSON
// media type (application/json or any +json) or none at all, and no
// Content-Encoding (a compressed body is never decoded here).
func mayBeJSON(h http.Header) bool {
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return true
	}
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	return strings.EqualFold(ct, "application/json") ||
		(len(ct) >= 5 && strings.EqualFold(ct[len(ct)-5:], "+json"))
}

// heldBody is a request body read into a pooled buffer: it serves the bytes
// read, then whatever the original body still holds.
//
// A whole body is served again from its start to each new reader: a
// reverse_proxy retry reads the same request body again after the
// transport closed it for the failed attempt (Go's transports close the
// body before a failed round trip returns). So a retry resends the body
// without a second copy.
//
// The buffer goes back to the pool as soon as nobody needs it: a prefix once
// it has been served; a whole body once the handler let go of it (the
// response has started, so no retry can follow) and no reader is in the
// middle of it. A transport may still be sending the body after the
// response has begun; then the buffer waits for that reader to reach the
// end or close. Should a reader still be in the middle of it when the
// handler returns, the buffer leaves the budget but is not reused: the
// garbage collector takes it once that reader is done with it.
type heldBody struct {
	pool *BufferPool
	rest io.ReadCloser // the original body, drained when whole

	mu     sync.Mutex // guards everything below, and buf's bytes while held
	buf    []byte     // the bytes read; nil once back in the pool
	size   int        // how many bytes were read: len(buf) while held
	whole  bool       // those bytes are the entire body
	off    int        // bytes of buf served to the current reader
	closed bool       // Close came after the last read: the next read is a new reader
	letGo  bool       // the handler needs the bytes no more
}

// holdBody returns the heldBody of buf, which came from pool; rest is the
// original body.
func holdBody(buf []byte, whole bool, rest io.ReadCloser, pool *BufferPool) *heldBody {
	return &heldBody{pool: pool, rest: rest, buf: buf, size: len(buf), whole: whole}
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.closed = false
		if b.whole {
			b.off = 0 // a new reader: a retry gets the body from the start
		}
	}
	if b.off < b.size {
		if b.buf == nil {
			// Released while this reader had bytes to come: it must not
			// read a buffer that may hold another request's body now.
			b.mu.Unlock()
			return 0, errReleased
		}
		n := copy(p, b.buf[b.off:b.size])
		b.off += n
		if b.off == b.size && (!b.whole || b.letGo) {
			b.releaseLocked() // a prefix is served once
		}
		b.mu.Unlock()
		return n, nil
	}
	// Past the held bytes: the end of a whole body (also after its buffer
	// went back), or the rest of a prefix.
	whole := b.whole
	if whole && b.letGo {
		b.releaseLocked()
	}
	b.mu.Unlock()
	if whole {
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

// Close ends the current reader. A whole body can be read again from the
// start; a prefix cannot (the rest is gone).
func (b *heldBody) Close() error {
	b.mu.Lock()
	b.closed = true
	if b.letGo || !b.whole {
		b.releaseLocked()
	}
	b.mu.Unlock()
	return b.rest.Close()
}

// letGoOf tells the body that the handler needs its bytes no more. The
// buffer goes back to the pool now, unless a reader is in the middle of it:
// then it goes back when that reader finishes, or, when the handler is
// returning (final), it leaves the budget at once and is never reused.
func (b *heldBody) letGoOf(final bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.letGo = true
	switch {
	case b.off == 0 || b.off == b.size || b.closed:
		b.releaseLocked()
	case final && b.buf != nil:
		b.pool.Forget(b.buf)
		b.pool = nil // the reader keeps the bytes; nobody returns them
	}
}

// releaseLocked returns the buffer to the pool. b.mu is held.
func (b *heldBody) releaseLocked() {
	if b.buf == nil {
		return
	}
	b.pool.Put(b.buf)
	b.buf = nil
}

// unread returns the whole body when no reader has taken any of it yet, and
// nil otherwise.
func (b *heldBody) unread() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.whole || b.off != 0 || b.closed {
		return nil
	}
	return b.buf
}

// resize makes the held body its first n bytes, after its bytes were
// edited in place (stripping).
func (b *heldBody) resize(n int) {
	b.mu.Lock()
	b.buf, b.size = b.buf[:n], n
	b.mu.Unlock()
}

// Release lets go of a request body that session resolution (or Hold) read
// into a pooled buffer, once the response has started. Bodies of any other
// kind are left alone.
func Release(body io.ReadCloser) {
	if b, ok := body.(*heldBody); ok {
		b.letGoOf(false)
	}
}

// Abandon lets go of such a body when the handler returns, whether or not
// the response started: afterwards its buffer is either back in the pool or
// off the budget for good.
func Abandon(body io.ReadCloser) {
	if b, ok := body.(*heldBody); ok {
		b.letGoOf(true)
	}
}

// Held reports whether body is a request body read into a pooled buffer.
func Held(body io.ReadCloser) bool {
	_, ok := body.(*heldBody)
	return ok
}
