package session

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// DefaultMaxBody is the default bound on the body read for resolution:
// 32 MiB, the largest request body LLM providers accept.
const DefaultMaxBody = 32 << 20

// exactAllocLimit is the largest declared Content-Length read into one
// buffer allocated up front. Beyond it the buffer grows as bytes arrive, so
// a client cannot make the gateway reserve memory it never sends.
const exactAllocLimit = 4 << 20

// BodyError reports that the request body could not be read (the client
// went away, or request_body max_size was exceeded). The request must not be
// proxied: its body is incomplete.
type BodyError struct{ Err error }

func (e *BodyError) Error() string { return "reading request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// captureBody reads the body of r when it may be JSON and is at most max
// bytes, and replaces r.Body so that whoever reads it next gets exactly the
// bytes the client sent. It returns nil when it leaves the body unread (no
// body, not JSON, Content-Encoding set) or when the body is larger than max;
// in that case the body still streams through untouched.
//
// A body whose length was not declared (chunked) gets ContentLength set once
// it has been read whole, so it is sent upstream with a Content-Length.
//
// A body this function has replaced already, and nobody has read from since,
// is not read again: its bytes are returned as they are (nil for a body that
// was too large).
func captureBody(r *http.Request, max int64) ([]byte, error) {
	if rb, ok := r.Body.(*replayBody); ok && rb.read.Len() == int(rb.read.Size()) {
		return rb.whole, nil
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || !mayBeJSON(r.Header) {
		return nil, nil
	}
	if r.ContentLength > max {
		return nil, nil
	}
	var buf []byte
	if n := r.ContentLength; n > 0 && n <= exactAllocLimit {
		buf = make([]byte, n)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			return nil, &BodyError{err}
		}
	} else {
		var err error
		buf, err = readAtMost(r.Body, max)
		if err != nil {
			return nil, &BodyError{err}
		}
		if int64(len(buf)) > max {
			// Too large: send what was read, then the rest, untouched.
			r.Body = newReplayBody(buf, nil, r.Body)
			return nil, nil
		}
	}
	r.Body = newReplayBody(buf, buf, r.Body)
	if r.ContentLength < 0 {
		r.ContentLength = int64(len(buf))
		r.TransferEncoding = nil
	}
	return buf, nil
}

// readAtMost reads src until EOF or until more than max bytes were read.
func readAtMost(src io.Reader, max int64) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(io.LimitReader(src, max+1))
	return b.Bytes(), err
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

// replayBody serves the bytes already read, then whatever the original body
// still holds, and closes the original body.
type replayBody struct {
	read  bytes.Reader
	whole []byte // the entire body when read holds all of it; nil for a prefix
	rest  io.ReadCloser
}

// newReplayBody serves read, then rest; whole is read when it is the entire
// body, else nil.
func newReplayBody(read, whole []byte, rest io.ReadCloser) *replayBody {
	return &replayBody{read: *bytes.NewReader(read), whole: whole, rest: rest}
}

func (b *replayBody) Read(p []byte) (int, error) {
	if b.read.Len() > 0 {
		return b.read.Read(p)
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error { return b.rest.Close() }
