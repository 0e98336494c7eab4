package sessionkeeping

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// singleEndpoint lists the recipes with one upstream, which need no
// session_sticky policy.
var singleEndpoint = map[string]bool{
	"examples/openai":    true,
	"examples/anthropic": true,
}

// TestExamplesAdapt runs every example Caddyfile through the Caddyfile
// adapter, as `caddy adapt` does, so the examples stay true to the code.
func TestExamplesAdapt(t *testing.T) {
	files, err := filepath.Glob("examples/*/Caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Dir(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(src, map[string]any{"filename": f})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warnings {
				t.Errorf("%s:%d: %s", w.File, w.Line, w.Message)
			}
			wants := []string{`"handler":"session_keeping"`, `"policy":"session_sticky"`}
			if filepath.Dir(f) == "examples/tiers" {
				wants = append(wants, `"tiers":[["10.0.0.1:8000","10.0.0.2:8000"],["127.0.0.1:9090"]]`)
			}
			if singleEndpoint[filepath.Dir(f)] {
				wants = append(wants[:1], `"key_pools"`, `"strip_client_signals":true`, `{http.session.api_key.`)
			}
			for _, want := range wants {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s adapts to no %s", f, want)
				}
			}
		})
	}
}
