package session

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// onlyReader hides the length of a reader, as a chunked body does.
type onlyReader struct{ io.Reader }

func TestCaptureBody(t *testing.T) {
	json := []byte(`{"model":"m","session_id":"s"}`)
	big := bytes.Repeat([]byte("x"), 100)

	tests := []struct {
		name        string
		body        io.Reader
		length      int64 // -1 for unknown
		contentType string
		encoding    string
		max         int64
		wantCapture bool
		wantLength  int64 // ContentLength after capture
	}{
		{"known length", bytes.NewReader(json), int64(len(json)), "application/json", "", 1024, true, int64(len(json))},
		{"chunked", onlyReader{bytes.NewReader(json)}, -1, "application/json; charset=utf-8", "", 1024, true, int64(len(json))},
		{"vendor json", bytes.NewReader(json), int64(len(json)), "application/vnd.api+json", "", 1024, true, int64(len(json))},
		{"no content type", bytes.NewReader(json), int64(len(json)), "", "", 1024, true, int64(len(json))},
		{"exactly max", bytes.NewReader(big), 100, "application/json", "", 100, true, 100},
		{"over max, known length", bytes.NewReader(big), 100, "application/json", "", 99, false, 100},
		{"over max, chunked", onlyReader{bytes.NewReader(big)}, -1, "application/json", "", 99, false, -1},
		{"gzip", bytes.NewReader(big), 100, "application/json", "gzip", 1024, false, 100},
		{"identity encoding", bytes.NewReader(json), int64(len(json)), "application/json", "identity", 1024, true, int64(len(json))},
		{"form", bytes.NewReader(big), 100, "application/x-www-form-urlencoded", "", 1024, false, 100},
		{"multipart", bytes.NewReader(big), 100, "multipart/form-data; boundary=x", "", 1024, false, 100},
		{"empty chunked", onlyReader{bytes.NewReader(nil)}, -1, "application/json", "", 1024, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			src := io.TeeReader(tc.body, &want)
			req := httptest.NewRequest(http.MethodPost, "/", src)
			req.ContentLength = tc.length
			if tc.length < 0 {
				req.TransferEncoding = []string{"chunked"}
			}
			if tc.contentType != "" {
				req.Header.Set("Content-Type", tc.contentType)
			}
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			got, _, err := captureBody(req, captureRule{max: tc.max})
			if err != nil {
				t.Fatal(err)
			}
			if (got != nil) != tc.wantCapture {
				t.Fatalf("captured=%v, want %v", got != nil, tc.wantCapture)
			}
			if req.ContentLength != tc.wantLength {
				t.Fatalf("ContentLength=%d, want %d", req.ContentLength, tc.wantLength)
			}
			if tc.wantCapture && tc.length < 0 && req.TransferEncoding != nil {
				t.Fatalf("TransferEncoding %v left on a body of known length", req.TransferEncoding)
			}
			after, err := io.ReadAll(req.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, want.Bytes()) {
				t.Fatalf("the next reader got %d bytes, the client sent %d", len(after), want.Len())
			}
			if got != nil && !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("captured bytes differ from what was sent")
			}
		})
	}
}

func TestCaptureBodyErrors(t *testing.T) {
	// A client that goes away mid-body.
	req := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(`{"model":`), iotest.ErrReader(io.ErrUnexpectedEOF)))
	req.ContentLength = 100
	req.Header.Set("Content-Type", "application/json")
	_, _, err := captureBody(req, captureRule{max: 1024})
	var be *BodyError
	if !errors.As(err, &be) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want a BodyError wrapping the read error", err)
	}

	// request_body max_size: the MaxBytesError must reach the caller.
	rec := httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("a", 200)))
	req.Header.Set("Content-Type", "application/json")
	req.Body = http.MaxBytesReader(rec, req.Body, 50)
	_, _, err = captureBody(req, captureRule{max: 1024})
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		t.Fatalf("got %v, want an http.MaxBytesError", err)
	}

	// The same through Resolve.
	r := newResolver(t, defaultConfig)
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("a", 200)))
	req.Body = http.MaxBytesReader(rec, req.Body, 50)
	if _, err := r.Resolve(req, nil); !errors.As(err, &mbe) {
		t.Fatalf("Resolve: got %v, want an http.MaxBytesError", err)
	}
}

func TestCaptureLargeChunked(t *testing.T) {
	// A chunked body larger than the first buffer is read in growing
	// steps and still restored whole.
	body := bytes.Repeat([]byte("y"), 5*firstChunk+123)
	req := httptest.NewRequest(http.MethodPost, "/", onlyReader{iotest.HalfReader(bytes.NewReader(body))})
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	pool := NewBufferPool(1 << 20)
	got, refused, err := captureBody(req, captureRule{max: DefaultMaxBody, pool: pool})
	if err != nil || refused || !bytes.Equal(got, body) {
		t.Fatalf("captured %d bytes, refused %v, err %v", len(got), refused, err)
	}
	after, _ := io.ReadAll(req.Body)
	if !bytes.Equal(after, body) || req.ContentLength != int64(len(body)) {
		t.Fatalf("restored %d bytes, ContentLength %d", len(after), req.ContentLength)
	}
	// Only the last buffer is in use: the smaller ones went back.
	if _, inUse, _, _ := pool.Stats(); inUse != int64(cap(got)) {
		t.Fatalf("in use %d, want the final buffer's %d", inUse, cap(got))
	}
}

func TestNoBody(t *testing.T) {
	r := newResolver(t, defaultConfig)
	req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
	res, err := r.Resolve(req, nil)
	if err != nil || res.Found || res.BodyRead {
		t.Fatalf("GET without body: %+v %v", res, err)
	}
}

func TestCaptureBodyTwiceReadsOnce(t *testing.T) {
	body := []byte(`{"session_id":"s","model":"m"}`)
	src := &countingReader{r: bytes.NewReader(body)}
	req := httptest.NewRequest(http.MethodPost, "/", src)
	req.ContentLength = int64(len(body))
	first, _, err := captureBody(req, captureRule{max: 1024})
	if err != nil || !bytes.Equal(first, body) {
		t.Fatalf("first capture: %q, %v", first, err)
	}
	second, _, err := captureBody(req, captureRule{max: 1024})
	if err != nil || &second[0] != &first[0] || src.n != len(body) {
		t.Fatalf("second capture copied or read again (read %d bytes, same buffer %v)", src.n, err == nil && &second[0] == &first[0])
	}
	if after, _ := io.ReadAll(req.Body); !bytes.Equal(after, body) {
		t.Fatalf("restored body %q", after)
	}

	// A chunked body over max stays a passed-through prefix, also the
	// second time, and still arrives whole.
	big := bytes.Repeat([]byte("x"), 100)
	req = httptest.NewRequest(http.MethodPost, "/", onlyReader{bytes.NewReader(big)})
	req.ContentLength = -1
	for i := 0; i < 2; i++ {
		if got, _, err := captureBody(req, captureRule{max: 10}); got != nil || err != nil {
			t.Fatalf("capture %d of a body over max: %d bytes, %v", i, len(got), err)
		}
	}
	if after, _ := io.ReadAll(req.Body); !bytes.Equal(after, big) {
		t.Fatalf("restored %d bytes, sent %d", len(after), len(big))
	}
}
