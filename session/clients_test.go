package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sessionkeeping/caddy-session-keeping/internal/capture"
)

// capturedClients names the clients whose requests are kept in
// testdata/clients, with the source every request of theirs must resolve
// through under the default configuration.
var capturedClients = map[string]string{
	"qwen-code":  "auto",
	"opencode":   "header:X-Session-Id",
	"kilo":       "header:X-Session-Id",
	"gemini-cli": "auto",
	"cline":      "auto",
	"continue":   "auto",
	"pi":         "auto",
}

// TestCapturedClients resolves the requests that real clients sent: a
// first run of each session and a resume of it (some resumed a day later,
// with the dates in their prompts moved on). Every request of a session
// must resolve to a key its first run had, and no two sessions may share a
// key.
func TestCapturedClients(t *testing.T) {
	dirs, _ := filepath.Glob("testdata/clients/*")
	found := map[string]bool{}
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		client := filepath.Base(dir)
		found[client] = true
		t.Run(client, func(t *testing.T) {
			wantSource, ok := capturedClients[client]
			if !ok {
				t.Fatalf("no expectation for captured client %s", client)
			}
			reqs, err := capture.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			r := newResolver(t, defaultConfig)
			firstKeys := map[int]map[Key]bool{}
			owner := map[Key]int{} // session of each key
			for _, c := range reqs {
				req, err := c.NewHTTP("")
				if err != nil {
					t.Fatal(err)
				}
				res, err := r.Resolve(req, []string{""})
				if err != nil || !res.Found {
					t.Errorf("%s: no session (%v)", c.Name, err)
					continue
				}
				if res.Source != wantSource {
					t.Errorf("%s: source %s, want %s", c.Name, res.Source, wantSource)
				}
				if s, dup := owner[res.Key]; dup && s != c.Session {
					t.Errorf("%s: the key of session %d", c.Name, s)
				}
				owner[res.Key] = c.Session
				if c.Run == "first" {
					if firstKeys[c.Session] == nil {
						firstKeys[c.Session] = map[Key]bool{}
					}
					firstKeys[c.Session][res.Key] = true
				} else if !firstKeys[c.Session][res.Key] {
					t.Errorf("%s: key %s, not one of the first run's", c.Name, res.Key)
				}
			}
			if len(firstKeys) < 2 {
				t.Errorf("%d sessions captured, want several", len(firstKeys))
			}
		})
	}
	for client := range capturedClients {
		if !found[client] {
			t.Errorf("no captured requests of %s", client)
		}
	}
}
