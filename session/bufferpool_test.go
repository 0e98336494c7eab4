package session

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSizeClass(t *testing.T) {
	prevClass, prevSize := -1, int64(0)
	for _, n := range []int64{1, 100, 4096, 4097, 5120, 5121, 8192, 8193, 30 << 20, 32 << 20, 32<<20 + 1, 1 << 40} {
		class, size := sizeClass(n)
		if size < n || (n > 4096 && size > n+n/4) {
			t.Errorf("sizeClass(%d) = %d bytes: want n ≤ size ≤ 1.25n", n, size)
		}
		if c, s := sizeClass(size); c != class || s != size {
			t.Errorf("a buffer of %d bytes is class %d (%d), its body's class %d", size, c, s, class)
		}
		if class < prevClass || size < prevSize || class >= numClasses {
			t.Errorf("sizeClass(%d) = %d, %d after %d, %d", n, class, size, prevClass, prevSize)
		}
		prevClass, prevSize = class, size
	}
}

func TestBufferPoolBudget(t *testing.T) {
	p := NewBufferPool(100 << 10)
	a := p.Get(40 << 10)
	b := p.Get(40 << 10)
	if a == nil || b == nil || len(a) != 40<<10 {
		t.Fatalf("Get within the budget refused")
	}
	if c := p.Get(40 << 10); c != nil {
		t.Fatalf("Get over the budget handed out %d bytes", len(c))
	}
	a[0] = 'x'
	p.Put(a)
	// The returned buffer serves the next body of its class, uncleared.
	c := p.Get(39 << 10)
	if c == nil || &c[:1][0] != &a[:1][0] {
		t.Fatalf("a returned buffer was not reused")
	}
	p.Put(b)
	p.Put(c)
	budget, inUse, idle, refused := p.Stats()
	if budget != 100<<10 || inUse != 0 || idle != 80<<10 || refused != 1 {
		t.Fatalf("stats %d %d %d %d", budget, inUse, idle, refused)
	}
	// A larger class makes room by dropping idle buffers.
	d := p.Get(90 << 10)
	if d == nil {
		t.Fatalf("idle buffers kept a new one out of the budget")
	}
	if _, inUse, idle, _ := p.Stats(); inUse+idle > 100<<10 {
		t.Fatalf("in use %d + idle %d exceed the budget", inUse, idle)
	}
	// A smaller budget turns Get away while the buffers in use exceed it.
	p.SetBudget(50 << 10)
	if e := p.Get(1); e != nil {
		t.Fatalf("Get under a budget already exceeded")
	}
	p.Put(d)
	if e := p.Get(1); e == nil {
		t.Fatalf("Get refused once the buffers in use went back")
	}
}

func TestBufferPoolDropsIdle(t *testing.T) {
	p := NewBufferPool(1 << 20)
	p.Put(p.Get(10 << 10))
	p.mu.Lock()
	class, _ := sizeClass(10 << 10)
	p.free[class][0].since = time.Now().Add(-2 * idleTTL)
	p.lastSweep = time.Time{}
	p.mu.Unlock()
	p.Put(p.Get(100 << 10)) // any call sweeps
	_, fresh := sizeClass(100 << 10)
	if _, _, idle, _ := p.Stats(); idle != fresh {
		t.Fatalf("idle %d after the sweep, want only the fresh buffer", idle)
	}
}

// heldRequest captures body into a buffer of a pool of 1 MiB.
func heldRequest(t *testing.T, body []byte) (*http.Request, *BufferPool) {
	t.Helper()
	pool := NewBufferPool(1 << 20)
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	if got, _, err := captureBody(req, captureRule{max: 1 << 20, pool: pool}); err != nil || got == nil {
		t.Fatalf("capture: %v", err)
	}
	return req, pool
}

func inUse(p *BufferPool) int64 { _, n, _, _ := p.Stats(); return n }

func TestHeldBodyRetry(t *testing.T) {
	body := bytes.Repeat([]byte(`{"a":1}`), 1000)
	req, pool := heldRequest(t, body)
	// A first attempt reads part of the body; its transport closes it.
	part := make([]byte, 100)
	if _, err := io.ReadFull(req.Body, part); err != nil {
		t.Fatal(err)
	}
	req.Body.Close()
	// The retry reads the whole body again.
	for attempt := 2; attempt <= 3; attempt++ {
		got, err := io.ReadAll(req.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("attempt %d: %d bytes, %v", attempt, len(got), err)
		}
		req.Body.Close()
	}
	Release(req.Body)
	if n := inUse(pool); n != 0 {
		t.Fatalf("%d bytes in use after release", n)
	}
	// A reader that starts after the release gets an error, never bytes
	// of a buffer that may serve another request now.
	if n, err := req.Body.Read(part); n != 0 || !errors.Is(err, errReleased) {
		t.Fatalf("read after release: %d, %v", n, err)
	}
}

func TestHeldBodyReleaseWaitsForReader(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 10000)
	req, pool := heldRequest(t, body)
	part := make([]byte, 4000)
	io.ReadFull(req.Body, part)
	// The response started while the transport was still sending the
	// body: the buffer stays until that reader finishes.
	Release(req.Body)
	if inUse(pool) == 0 {
		t.Fatalf("buffer released under a reader")
	}
	rest, err := io.ReadAll(req.Body)
	if err != nil || !bytes.Equal(append(part, rest...), body) {
		t.Fatalf("the reader got %d bytes, %v", len(part)+len(rest), err)
	}
	if n := inUse(pool); n != 0 {
		t.Fatalf("%d bytes in use after the reader reached the end", n)
	}
}

func TestHeldPrefixReleasedOnceServed(t *testing.T) {
	pool := NewBufferPool(1 << 20)
	body := bytes.Repeat([]byte("p"), 3000)
	req := httptest.NewRequest(http.MethodPost, "/", onlyReader{bytes.NewReader(body)})
	req.ContentLength = -1
	if got, _, err := captureBody(req, captureRule{max: 1000, pool: pool}); got != nil || err != nil {
		t.Fatalf("a body over max was captured: %d bytes, %v", len(got), err)
	}
	if inUse(pool) == 0 {
		t.Fatalf("the prefix is not held")
	}
	got, err := io.ReadAll(req.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if n := inUse(pool); n != 0 {
		t.Fatalf("%d bytes in use after the prefix was served", n)
	}
}

func TestHeldBodyAbandoned(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 5000)
	req, pool := heldRequest(t, body)
	held := req.Body.(*heldBody).buf
	part := make([]byte, 10)
	io.ReadFull(req.Body, part) // a reader left in the middle
	Abandon(req.Body)
	if n := inUse(pool); n != 0 {
		t.Fatalf("%d bytes still on the budget after the handler returned", n)
	}
	// The buffer is not handed out again while the reader may read it.
	if again := pool.Get(5000); &again[:1][0] == &held[:1][0] {
		t.Fatalf("the abandoned buffer was reused")
	}
	rest, err := io.ReadAll(req.Body)
	if err != nil || !bytes.Equal(append(part, rest...), body) {
		t.Fatalf("the reader got %d bytes, %v", len(part)+len(rest), err)
	}
}

func TestBudgetRefusalStreamsUntouched(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	pool := NewBufferPool(1) // nothing fits
	r := newResolver(t, Config{BuiltinRules: true, AutoDetect: true, Buffers: pool})
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	res, err := r.Resolve(req, nil)
	if err != nil || res.Found || res.BodyRead || !res.Unbuffered {
		t.Fatalf("over budget: %+v, %v", res, err)
	}
	if got, _ := io.ReadAll(req.Body); !bytes.Equal(got, body) {
		t.Fatalf("the body changed: %q", got)
	}
}

func TestHeldBodyEndAfterRelease(t *testing.T) {
	// The transport read every byte, and the answer came before its read
	// of the end: that read still gets io.EOF, not an error that would
	// make the transport drop the upstream connection mid-answer.
	body := []byte(`{"model":"m"}`)
	req, pool := heldRequest(t, body)
	got := make([]byte, 64)
	if n, err := req.Body.Read(got); n != len(body) || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	Release(req.Body)
	if n := inUse(pool); n != 0 {
		t.Fatalf("%d bytes held after the release", n)
	}
	if n, err := req.Body.Read(got); n != 0 || err != io.EOF {
		t.Fatalf("the read of the end after the release: %d, %v", n, err)
	}
}
