package sessionkeeping

import (
	"io"
	"net/http"
	"sync"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sessionkeeping/caddy-session-keeping/session"
	"github.com/sessionkeeping/caddy-session-keeping/upstreams"
	"github.com/sessionkeeping/caddy-session-keeping/usage"
)

// outcomeWriter records the final status of a response so the selection
// policy can learn how a request ended, and lets go of a held request body
// as the response starts: no retry can follow then. It embeds Caddy's
// wrapper, whose Unwrap lets http.ResponseController reach Flush and Hijack
// on the real writer, so streamed (SSE) responses still flush event by
// event.
type outcomeWriter struct {
	caddyhttp.ResponseWriterWrapper
	status    int           // 0 until a final (non-1xx) status is written
	body      io.ReadCloser // a held request body, released at the first final status
	readUsage bool          // read the answer's usage
	usage     *usage.Reader // reads it, from the first final status on; from readers

	// The request's session and scope, to link a Responses answer to the
	// session as soon as its id goes past; linked once that is done.
	session *session.Session
	scope   []string
	linked  bool
}

// readers recycles usage readers, which keep up to 17 KiB of an answer.
var readers = sync.Pool{New: func() any { return new(usage.Reader) }}

// started records the final status of the response.
func (w *outcomeWriter) started(code int) {
	w.status = code
	if w.body != nil {
		session.Release(w.body)
		w.body = nil
	}
	if w.readUsage {
		h := w.Header()
		w.usage = readers.Get().(*usage.Reader)
		w.usage.Reset(h.Get("Content-Type"), h.Get("Content-Encoding"))
	}
}

// finish returns what the answer reported, and gives the reader back.
func (w *outcomeWriter) finish() (usage.Usage, usage.Outcome, bool) {
	if w.usage == nil {
		return usage.Usage{}, 0, false
	}
	u, outcome := w.usage.Result()
	readers.Put(w.usage)
	w.usage = nil
	return u, outcome, true
}

func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.started(code)
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

// Write reads the usage from b, then passes b on. Reading takes well under
// a microsecond per event; it comes first so that a Responses answer is
// linked to its session before the client has all of it and can send the
// request that continues it.
func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.started(http.StatusOK)
	}
	if w.usage != nil {
		w.read(b)
	}
	return w.ResponseWriterWrapper.Write(b)
}

// ReadFrom keeps the underlying writer's ReadFrom; with usage reading,
// each piece is read as it is taken from r, before it is written.
func (w *outcomeWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.started(http.StatusOK)
	}
	if w.usage != nil {
		r = io.TeeReader(r, usageTee{w})
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// read reads the usage from a piece of the answer, and links a Responses
// answer to its session as soon as its id has gone past.
func (w *outcomeWriter) read(b []byte) {
	w.usage.Write(b)
	if !w.linked && w.session != nil {
		if id := w.usage.ResponseID(); id != "" {
			w.linked = true
			upstreams.LinkResponse(session.NewKey(w.scope, id), w.session.Key)
		}
	}
}

// usageTee is the writer an io.TeeReader gives what ReadFrom takes.
type usageTee struct{ w *outcomeWriter }

func (t usageTee) Write(b []byte) (int, error) {
	t.w.read(b)
	return len(b), nil
}

// Interface guards
var (
	_ http.ResponseWriter                       = (*outcomeWriter)(nil)
	_ io.ReaderFrom                             = (*outcomeWriter)(nil)
	_ interface{ Unwrap() http.ResponseWriter } = (*outcomeWriter)(nil)
)
