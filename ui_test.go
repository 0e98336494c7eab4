package sessionkeeping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

// uiChromium is Debian's Chromium (package chromium), which .ci/run
// installs.
const uiChromium = "/usr/bin/chromium"

// uiSummary is the part of a session summary the page test checks.
type uiSummary struct {
	Key          string `json:"key"`
	Requests     int    `json:"requests"`
	LastDecision string `json:"last_decision"`
	LastUpstream string `json:"last_upstream"`
}

// TestUIThreads drives the threaded sessions page (GET /session_keeping/ui
// on the admin endpoint) in a real headless Chromium: three sessions with
// 1, 3 and 5 requests through a real in-process Caddy appear as three
// threads with those counts; expanding the 5-request thread unfolds its 4
// older requests, which stay unfolded across an auto-refresh; the decision
// and upstream filters narrow the list. It writes a full-page screenshot
// to the test's artifact directory (a temporary directory unless go test
// runs with -artifacts).
func TestUIThreads(t *testing.T) {
	if _, err := os.Stat(uiChromium); err != nil {
		t.Skipf("skipping the browser test: no Chromium at %s (install Debian's chromium package; .ci/run does): %v", uiChromium, err)
	}

	// Upstreams that answer as Anthropic does, with 3,000 of 4,000 prompt
	// tokens read from the cache: the page shows 75 %.
	var dials []string
	for range 3 {
		u := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_1","type":"message","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":800,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":2}}`)
		}))
		t.Cleanup(u.Close)
		dials = append(dials, strings.TrimPrefix(u.URL, "http://"))
	}
	adminPort, sitePort, uiPort := freePort(t), freePort(t), freePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	site := fmt.Sprintf("http://127.0.0.1:%d", sitePort)
	startCaddy(t, fmt.Sprintf(`{
	admin 127.0.0.1:%d
	auto_https off
	persist_config off
	log default {
		output discard
	}
}

http://127.0.0.1:%d {
	session_keeping
	reverse_proxy %s {
		lb_policy session_sticky
	}
}

# The page for a browser, as the README shows it: the plugin's admin routes
# without the browser's fetch headers, which the admin endpoint refuses on a
# typed-in navigation.
http://127.0.0.1:%d {
	bind 127.0.0.1
	handle /session_keeping/* {
		reverse_proxy 127.0.0.1:%d {
			header_up Host 127.0.0.1:%d
			header_up -Origin
			header_up -Referer
			header_up -Sec-Fetch-Mode
		}
	}
	respond 404
}
`, adminPort, sitePort, strings.Join(dials, " "), uiPort, adminPort, adminPort))
	uiSite := fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	// Runs before startCaddy's caddy.Stop, which leaves the admin endpoint
	// running: a config with the endpoint disabled stops it.
	t.Cleanup(func() {
		off := `{"admin":{"disabled":true,"config":{"persist":false}},"logging":{"logs":{"default":{"writer":{"output":"discard"}}}}}`
		if err := caddy.Load([]byte(off), true); err != nil {
			t.Errorf("stopping the admin endpoint: %v", err)
		}
	})

	// The request history is shared by every Caddy this test process has
	// run: start from an empty one, so that the page lists this test's
	// sessions only.
	for _, s := range history.Sessions(math.MaxInt, nil) {
		if k, err := session.ParseKey(s.Key); err == nil {
			history.Forget(k)
		}
	}

	// Three sessions; the one sent last is the newest.
	sessions := []struct {
		id string
		n  int
	}{{"ui-one", 1}, {"ui-three", 3}, {"ui-five", 5}}
	want := map[string]int{} // session key -> requests
	keyOf := map[string]string{}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, s := range sessions {
		key := session.NewKey([]string{""}, s.id).String()
		want[key] = s.n
		keyOf[s.id] = key
		for turn := 1; turn <= s.n; turn++ {
			body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"turn %d"}]}`, turn)
			req, err := http.NewRequest(http.MethodPost, site+"/v1/messages", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Session-Id", s.id)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("session %s turn %d: %v", s.id, turn, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("session %s turn %d: status %d", s.id, turn, resp.StatusCode)
			}
		}
	}
	five, one := keyOf["ui-five"], keyOf["ui-one"]

	// The history is written when a request ends, which can be just after
	// the client has its response: wait until the API shows all of it, so
	// that a failure below is the page's.
	var summaries []uiSummary
	waitFor(t, "the admin API to list the three sessions with their request counts", func() bool {
		var err error
		summaries, err = uiSessions(client, admin, "")
		if err != nil {
			t.Logf("listing sessions: %v", err)
			return false
		}
		got := map[string]int{}
		for _, s := range summaries {
			got[s.Key] = s.Requests
		}
		for k, n := range want {
			if got[k] != n {
				return false
			}
		}
		return true
	})
	var fiveUpstream string
	for _, s := range summaries {
		if s.Key == five {
			fiveUpstream = s.LastUpstream
		}
	}

	// The browser: headless, and quiet, since this machine may have no
	// network at all.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(uiChromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc() // waits for the browser to exit, before the temp dirs go
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", uiChromium, err)
	}

	// Script errors on the page fail the test.
	var (
		exMu       sync.Mutex
		exceptions []string
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok && ev.ExceptionDetails != nil {
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				text += " " + d.Exception.Description
			}
			exMu.Lock()
			exceptions = append(exceptions, fmt.Sprintf("line %d: %s", d.LineNumber+1, text))
			exMu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		exMu.Lock()
		defer exMu.Unlock()
		for _, e := range exceptions {
			t.Errorf("script error on the page: %s", e)
		}
	}()

	// step runs browser actions; on failure it reports what the page shows.
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\npage: %s", what, err, uiPageState(ctx))
		}
	}
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))
	}
	thread := func(key string) string { return fmt.Sprintf(`tr.thread[data-key="%s"]`, key) }
	olderOf := func(key string) string {
		return fmt.Sprintf(`document.querySelector('%s').closest('tbody').querySelectorAll('.older').length`, thread(key))
	}

	// A plain navigation, as a person typing the address makes it.
	step("loading the page and waiting for three threads, each with its latest request",
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			res, err := cdp.Call(ctx, t, page.Navigate, page.NavigateParams{URL: uiSite + "/session_keeping/ui"})
			if err == nil && res.ErrorText != "" {
				err = errors.New(res.ErrorText)
			}
			return err
		}),
		poll(`document.querySelectorAll('.thread').length === 3 && document.querySelectorAll('.thread .method').length === 3`),
	)

	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]uiRow](`[...document.querySelectorAll('.thread')].map(r => ({
		key: r.dataset.key,
		count: r.querySelector('.count').textContent,
		cells: [...r.cells].map(c => c.textContent.trim()),
	}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("got %d thread rows, want 3: %+v", len(rows), rows)
	}
	for i, r := range rows {
		n, ok := want[r.Key]
		if !ok {
			t.Errorf("row %d: data-key %q is none of the sessions sent", i, r.Key)
			continue
		}
		if r.Count != fmt.Sprint(n) {
			t.Errorf("thread %s: count badge %q, want %d", r.Key, r.Count, n)
		}
		t.Logf("thread row: %q", r.Cells)
		row := strings.Join(r.Cells, " | ")
		for _, s := range []string{"POST", "/v1/messages", "200", "75 %"} {
			if !strings.Contains(row, s) {
				t.Errorf("thread %s: latest request row %q lacks %q", r.Key, row, s)
			}
		}
		if !slices.ContainsFunc(dials, func(d string) bool { return strings.Contains(row, d) }) {
			t.Errorf("thread %s: latest request row %q names none of the upstreams %q", r.Key, row, dials)
		}
	}
	if rows[0].Key != five {
		t.Errorf("first thread is %s, want the newest session %s", rows[0].Key, five)
	}

	// Every upstream that answered shows its cache line.
	step("waiting for the upstream cards' cache lines",
		poll(`[...document.querySelectorAll('#upstreams .cache')].some(m => m.textContent.startsWith('cache 75 %'))`),
	)

	// Expand the 5-request thread: its 4 older requests unfold beneath it,
	// and only there.
	step("expanding the 5-request thread",
		chromedp.Click(chromedp.CSS(thread(five)+" .expand")),
		poll(olderOf(five)+` === 4`),
	)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.older').length`)); err != nil || n != 4 {
		t.Errorf("older rows on the page: %d (%v), want 4", n, err)
	}

	// An auto-refresh (every 2 s) keeps the thread expanded.
	status, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	step("waiting for an auto-refresh with the thread expanded",
		poll(fmt.Sprintf(`document.getElementById('status').textContent !== %q`, status)),
		poll(olderOf(five)+` === 4 && document.querySelector('`+thread(five)+` .expand').getAttribute('aria-expanded') === 'true'`),
	)

	// Collapse and expand again.
	step("collapsing the thread",
		chromedp.Click(chromedp.CSS(thread(five)+" .expand")),
		poll(olderOf(five)+` === 0`),
	)
	step("expanding the thread again",
		chromedp.Click(chromedp.CSS(thread(five)+" .expand")),
		poll(olderOf(five)+` === 4`),
	)

	// The decision filter: only the 1-request session's latest request was
	// placed afresh (new); the others were hits on their pins.
	step("filtering by decision new",
		chromedp.Evaluate[chromedp.Void](`(s => { s.value = 'new'; s.dispatchEvent(new Event('change')); })(document.getElementById('filter-decision'))`),
		poll(fmt.Sprintf(`(t => t.length === 1 && t[0].dataset.key === %q)(document.querySelectorAll('.thread'))`, one)),
	)
	step("clearing the decision filter",
		chromedp.Evaluate[chromedp.Void](`(s => { s.value = ''; s.dispatchEvent(new Event('change')); })(document.getElementById('filter-decision'))`),
		poll(`document.querySelectorAll('.thread').length === 3`),
	)

	// The upstream filter lists every upstream and shows what the API
	// returns for the chosen one.
	step("waiting for the upstream filter to list the upstreams",
		poll(fmt.Sprintf(`(o => %s.every(d => o.includes(d)))([...document.getElementById('filter-upstream').options].map(o => o.value))`, uiJSON(dials))),
	)
	if fiveUpstream == "" {
		t.Fatalf("the API gives no last_upstream for session %s: %+v", five, summaries)
	}
	onUpstream, err := uiSessions(client, admin, fiveUpstream)
	if err != nil {
		t.Fatal(err)
	}
	var wantKeys []string
	for _, s := range onUpstream {
		wantKeys = append(wantKeys, s.Key)
	}
	if !slices.Contains(wantKeys, five) {
		t.Errorf("GET /session_keeping/sessions?upstream=%s lacks session %s, whose last upstream it is: %+v", fiveUpstream, five, onUpstream)
	}
	step("filtering by upstream "+fiveUpstream,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(s => { s.value = %q; s.dispatchEvent(new Event('change')); })(document.getElementById('filter-upstream'))`, fiveUpstream)),
		poll(fmt.Sprintf(`JSON.stringify([...document.querySelectorAll('.thread')].map(r => r.dataset.key)) === %q`, uiJSON(wantKeys))),
		poll(olderOf(five)+` === 4`),
	)
	step("clearing the upstream filter",
		chromedp.Evaluate[chromedp.Void](`(s => { s.value = ''; s.dispatchEvent(new Event('change')); })(document.getElementById('filter-upstream'))`),
		poll(`document.querySelectorAll('.thread').length === 3`),
		poll(olderOf(five)+` === 4`),
	)

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.ArtifactDir(), "sessions.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// uiRow is what the test reads of one thread row.
type uiRow struct {
	Key   string   `json:"key"`
	Count string   `json:"count"`
	Cells []string `json:"cells"`
}

// uiSessions lists sessions through the admin API, optionally of one
// upstream.
func uiSessions(client *http.Client, admin, upstream string) ([]uiSummary, error) {
	u := admin + "/session_keeping/sessions"
	if upstream != "" {
		u += "?upstream=" + url.QueryEscape(upstream)
	}
	resp, err := client.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	var list struct {
		Sessions []uiSummary `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET %s: %v", u, err)
	}
	return list.Sessions, nil
}

// uiPageState describes what the page shows, for failure messages.
func uiPageState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		url: location.href,
		status: (document.getElementById('status') || {}).textContent,
		error: (document.getElementById('error') || {}).textContent,
		threads: [...document.querySelectorAll('.thread')].map(r => r.dataset.key + ' ' + ((r.querySelector('.count') || {}).textContent)),
		older: document.querySelectorAll('.older').length,
		body: document.body ? document.body.innerText.slice(0, 2000) : '',
	})`))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "(the page did not answer in time)"
		}
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	return s
}

// uiJSON is v as JSON, for embedding in page scripts.
func uiJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
