package sessionkeeping

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

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
			for _, want := range []string{`"handler":"session_keeping"`, `"policy":"session_sticky"`} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s adapts to no %s", f, want)
				}
			}
		})
	}
}
