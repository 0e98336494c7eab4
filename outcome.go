package sessionkeeping

import (
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// outcomeWriter records the final status of a response so the selection
// policy can learn how a request ended. It embeds Caddy's wrapper, whose
// Unwrap lets http.ResponseController reach Flush and Hijack on the real
// writer, so streamed (SSE) responses still flush event by event.
type outcomeWriter struct {
	caddyhttp.ResponseWriterWrapper
	status int // 0 until a final (non-1xx) status is written
}

func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *outcomeWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// Interface guards
var (
	_ http.ResponseWriter                       = (*outcomeWriter)(nil)
	_ io.ReaderFrom                             = (*outcomeWriter)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*outcomeWriter)(nil)
)
