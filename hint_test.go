package sessionkeeping

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func TestSessionHint(t *testing.T) {
	secret := []byte("s3cret")
	id := "abcdef0123456789abcdef0123456789" // hex, so containment could happen
	k := session.NewKey([]string{"tenant-a"}, id)
	h := sessionHint(secret, k)
	if len(h) != 32 || h != sessionHint(secret, k) {
		t.Fatalf("hint %q not stable or wrong length", h)
	}
	if h == id || strings.Contains(h, id) || strings.Contains(h, "tenant-a") || h == k.String() {
		t.Fatalf("hint %q reveals the id, scope or key", h)
	}
	others := []string{
		sessionHint(secret, session.NewKey([]string{"tenant-a"}, "other")),
		sessionHint(secret, session.NewKey([]string{"tenant-b"}, id)),
		sessionHint([]byte("other secret"), k),
	}
	for _, o := range others {
		if o == h {
			t.Fatalf("hint %q repeats across sessions, scopes or secrets", h)
		}
	}
	// The default secret is random: 32 bytes, not all zero.
	if secret := processHintSecret(); len(secret) != 32 || strings.Count(string(secret), "\x00") == 32 {
		t.Fatalf("process hint secret %x", secret)
	}
}

func TestHintSecretFromEnv(t *testing.T) {
	t.Setenv("SK_HINT_TEST", "from-env")
	h := &Handler{HintSecret: "{env.SK_HINT_TEST}"}
	if err := h.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	if string(h.hintSecret) != "from-env" {
		t.Fatalf("hint secret not replaced")
	}
	h = &Handler{HintSecret: "{env.SK_HINT_TEST_UNSET}"}
	if err := h.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), "hint_secret") {
		t.Fatalf("unset hint secret: %v", err)
	}
}
