package sessionkeeping

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/sessionkeeping/caddy-session-keeping/usage"
)

// TestOutcomeWriterReadsUsage: the answer reaches the client whole, and
// its usage is read, whether it is written or read from.
func TestOutcomeWriterReadsUsage(t *testing.T) {
	answer := `{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1500,"prompt_tokens_details":{"cached_tokens":1024}}}`
	for _, way := range []string{"Write", "ReadFrom"} {
		rec := httptest.NewRecorder()
		w := &outcomeWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: rec}, readUsage: true}
		w.Header().Set("Content-Type", "application/json")
		if way == "Write" {
			w.Write([]byte(answer[:40]))
			w.Write([]byte(answer[40:]))
		} else {
			w.ReadFrom(strings.NewReader(answer))
		}
		u, outcome, read := w.finish()
		if !read || outcome != usage.Read || u.Prompt != 1500 || u.Cached != 1024 {
			t.Errorf("%s: usage %+v, %s, read %v", way, u, outcome, read)
		}
		if rec.Body.String() != answer || w.status != 200 {
			t.Errorf("%s: the client got %q (status %d)", way, rec.Body.String(), w.status)
		}
	}
}
