package sessionkeeping

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func mustPools(t *testing.T, pools ...KeyPool) map[string]*keyPool {
	t.Helper()
	m, err := provisionKeyPools(pools)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sessionKeys(n int) []session.Key {
	keys := make([]session.Key, n)
	for i := range keys {
		keys[i] = session.NewKey([]string{"tenant"}, fmt.Sprintf("sess-%d", i))
	}
	return keys
}

func TestKeyPoolStickyAndMinimalRemap(t *testing.T) {
	four := mustPools(t, KeyPool{Name: "p", Keys: []string{"k1", "k2", "k3", "k4"}})["p"]
	three := mustPools(t, KeyPool{Name: "p", Keys: []string{"k1", "k2", "k4"}})["p"] // k3 removed
	sessions := sessionKeys(1000)

	perKey := map[string]int{}
	moved := 0
	for _, k := range sessions {
		first := four.keys[four.pick(&k)]
		for range 5 {
			if got := four.keys[four.pick(&k)]; got != first {
				t.Fatalf("session %s got %s, then %s", k, first, got)
			}
		}
		perKey[first]++
		after := three.keys[three.pick(&k)]
		if first != "k3" && after != first {
			t.Fatalf("session %s was on %s, which stayed, but moved to %s", k, first, after)
		}
		if first == "k3" {
			moved++
		}
	}
	for _, key := range four.keys {
		if n := perKey[key]; n < 180 || n > 320 {
			t.Errorf("key %s holds %d of 1000 sessions, want about 250", key, n)
		}
	}
	if moved < 180 || moved > 320 {
		t.Errorf("removing one of 4 keys moved %d of 1000 sessions, want about 250", moved)
	}

	// Order of the pool does not matter to a session, and a restart (a new
	// provisioning) gives the same keys.
	again := mustPools(t, KeyPool{Name: "p", Keys: []string{"k4", "k3", "k2", "k1", "k2"}})["p"]
	if len(again.keys) != 4 {
		t.Fatalf("duplicates kept: %d keys", len(again.keys))
	}
	for _, k := range sessions {
		if a, b := four.keys[four.pick(&k)], again.keys[again.pick(&k)]; a != b {
			t.Fatalf("session %s: %s before, %s after reordering", k, a, b)
		}
	}
}

func TestKeyPoolRoundRobin(t *testing.T) {
	off := false
	pools := mustPools(t,
		KeyPool{Name: "rr", Keys: []string{"a", "b", "c", "d"}},
		KeyPool{Name: "off", Keys: []string{"a", "b", "c", "d"}, Sticky: &off},
	)
	k := session.NewKey(nil, "one-session")
	for name, key := range map[string]*session.Key{"rr": nil, "off": &k} {
		p := pools[name]
		count := map[string]int{}
		prev := ""
		for range 400 {
			got := p.keys[p.pick(key)]
			if got == prev {
				t.Fatalf("%s: %s twice in a row", name, got)
			}
			prev = got
			count[got]++
		}
		for _, want := range p.keys {
			if count[want] != 100 {
				t.Errorf("%s: key %s used %d of 400 times, want 100", name, want, count[want])
			}
		}
	}
}

func TestKeyPoolProvisionErrors(t *testing.T) {
	t.Setenv("SK_TEST_KEY_SET", "sk-secret-value-1")
	tests := []struct {
		pools []KeyPool
		want  string
	}{
		{[]KeyPool{{Name: "p"}}, "key_pool p: the pool has no keys"},
		{[]KeyPool{{Name: "p", Keys: []string{"x"}}, {Name: "p", Keys: []string{"y"}}}, `key_pool: pool "p" is defined twice`},
		{[]KeyPool{{Name: "a.b", Keys: []string{"x"}}}, "key_pool: bad pool name"},
		{[]KeyPool{{Name: "", Keys: []string{"x"}}}, "key_pool: bad pool name"},
		{[]KeyPool{{Name: "p", Keys: []string{"{env.SK_TEST_KEY_SET}", "{env.SK_TEST_KEY_UNSET}"}}}, "key_pool p: key 2 is empty"},
	}
	for _, tc := range tests {
		_, err := provisionKeyPools(tc.pools)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.pools, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "sk-secret-value-1") {
			t.Errorf("error reveals a key: %v", err)
		}
		h := &Handler{KeyPools: tc.pools}
		if !strings.Contains(tc.want, "empty") {
			if err := h.Validate(); err == nil {
				t.Errorf("%+v: Validate accepted it", tc.pools)
			}
		}
	}
	p := mustPools(t, KeyPool{Name: "env", Keys: []string{"{env.SK_TEST_KEY_SET}", "literal"}})["env"]
	if p.keys[0] != "sk-secret-value-1" || p.keys[1] != "literal" {
		t.Fatalf("keys not replaced: %d keys", len(p.keys))
	}
}
