package sessionkeeping

import (
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// outcomeWriter records the final status of a response so the selection
// policy can learn how a request ended, and lets go of a held request body
// as the response starts: no retry can follow then. It embeds Caddy's
// wrapper, whose Unwrap lets http.ResponseController reach Flush and Hijack
// on the real writer, so streamed (SSE) responses still flush event by
// event.
type outcomeWriter struct {
	caddyhttp.ResponseWriterWrapper
	status int           // 0 until a final (non-1xx) status is written
	body   io.ReadCloser // a held request body, released at the first final status
}

// started records the final status of the response.
func (w *outcomeWriter) started(code int) {
	w.status = code
	if w.body != nil {
		session.Release(w.body)
		w.body = nil
	}
}

func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.started(code)
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.started(http.StatusOK)
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *outcomeWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.started(http.StatusOK)
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// Interface guards
var (
	_ http.ResponseWriter                       = (*outcomeWriter)(nil)
	_ io.ReaderFrom                             = (*outcomeWriter)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*outcomeWriter)(nil)
)
