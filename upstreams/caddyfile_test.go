package upstreams

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard" // the caddyfile adapter and the standard selection policies
)

// parsePolicy parses a session_sticky block.
func parsePolicy(t *testing.T, input string) (*StickySelection, error) {
	t.Helper()
	p := new(StickySelection)
	err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	return p, err
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("bad JSON %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad JSON %s: %v", want, err)
	}
	return reflect.DeepEqual(g, w)
}

func TestCaddyfileEveryOption(t *testing.T) {
	p, err := parsePolicy(t, `session_sticky {
		ttl              2h30m
		max_sessions     50000
		fallback         least_conn
		balance_factor   1.5
		failure_cooldown 45s
		repin_on_status  500 502
		repin_on_status  529
		name             chat-pool
		tier             10.0.0.1:8000 10.0.0.2:8000
		tier             https://api.example.com
	}`)
	if err != nil {
		t.Fatal(err)
	}
	bf := 1.5
	want := &StickySelection{
		TTL:             caddy.Duration(150 * time.Minute),
		MaxSessions:     50000,
		FallbackRaw:     json.RawMessage(`{"policy":"least_conn"}`),
		BalanceFactor:   &bf,
		FailureCooldown: caddy.Duration(45 * time.Second),
		RepinOnStatus:   []int{500, 502, 529},
		Name:            "chat-pool",
		Tiers:           [][]string{{"10.0.0.1:8000", "10.0.0.2:8000"}, {"https://api.example.com"}},
	}
	if !jsonEqual(t, p.FallbackRaw, string(want.FallbackRaw)) {
		t.Fatalf("fallback = %s, want %s", p.FallbackRaw, want.FallbackRaw)
	}
	p.FallbackRaw, want.FallbackRaw = nil, nil
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got  %+v\nwant %+v", p, want)
	}

	// balance_factor 0 is "off", and kept as an explicit 0.
	p, err = parsePolicy(t, "session_sticky {\nbalance_factor 0\n}")
	if err != nil || p.BalanceFactor == nil || *p.BalanceFactor != 0 {
		t.Fatalf("balance_factor 0: %v, %v", p.BalanceFactor, err)
	}

	// Days are accepted, as everywhere in Caddy.
	p, err = parsePolicy(t, "session_sticky {\nttl 1d\n}")
	if err != nil || p.TTL != caddy.Duration(24*time.Hour) {
		t.Fatalf("ttl 1d: %v, %v", time.Duration(p.TTL), err)
	}

	// No block: every default.
	for _, input := range []string{"session_sticky", "session_sticky {\n}"} {
		p, err := parsePolicy(t, input)
		if err != nil || !reflect.DeepEqual(p, &StickySelection{}) {
			t.Fatalf("%q: %+v, %v", input, p, err)
		}
	}
}

func TestCaddyfileRedisStore(t *testing.T) {
	p, err := parsePolicy(t, `session_sticky {
		ttl 1h
		store redis {
			address    10.0.0.5:6379
			address    10.0.0.6:6379 10.0.0.7:6379
			master_name gateway
			username   caddy
			password   {env.REDIS_PASSWORD}
			db         2
			tls        on
			key_prefix gw:pins:
			timeout    20ms
		}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"backend": "redis", "addresses": ["10.0.0.5:6379", "10.0.0.6:6379", "10.0.0.7:6379"],
		"master_name": "gateway", "username": "caddy", "password": "{env.REDIS_PASSWORD}", "db": 2,
		"tls": true, "key_prefix": "gw:pins:", "timeout": 20000000}`
	if !jsonEqual(t, p.StoreRaw, want) {
		t.Fatalf("store = %s\nwant %s", p.StoreRaw, want)
	}

	// A bare store redis takes every default.
	for _, input := range []string{"session_sticky {\nstore redis\n}", "session_sticky {\nstore redis {\n}\n}"} {
		p, err := parsePolicy(t, input)
		if err != nil || !jsonEqual(t, p.StoreRaw, `{"backend": "redis"}`) {
			t.Fatalf("%q: %s, %v", input, p.StoreRaw, err)
		}
	}
}

func TestCaddyfileErrorsNameTheOption(t *testing.T) {
	tests := []struct{ input, wantInError string }{
		{"session_sticky extra", "extra"},
		{"session_sticky extra {\nttl 1h\n}", "extra"},
		{"session_sticky {\nbogus 1\n}", `"bogus"`},
		{"session_sticky {\nttl\n}", "ttl"},
		{"session_sticky {\nttl soon\n}", "ttl"},
		{"session_sticky {\nttl 0s\n}", "ttl"},
		{"session_sticky {\nttl -5m\n}", "ttl"},
		{"session_sticky {\nttl 1h 2h\n}", "ttl"},
		{"session_sticky {\nmax_sessions\n}", "max_sessions"},
		{"session_sticky {\nmax_sessions lots\n}", "max_sessions"},
		{"session_sticky {\nmax_sessions 0\n}", "max_sessions"},
		{"session_sticky {\nmax_sessions -1\n}", "max_sessions"},
		{"session_sticky {\nmax_sessions 1.5\n}", "max_sessions"},
		{"session_sticky {\nmax_sessions 10 20\n}", "max_sessions"},
		{"session_sticky {\nbalance_factor\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor 0.5\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor -1\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor high\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor NaN\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor Inf\n}", "balance_factor"},
		{"session_sticky {\nbalance_factor 1 2\n}", "balance_factor"},
		{"session_sticky {\nfailure_cooldown\n}", "failure_cooldown"},
		{"session_sticky {\nfailure_cooldown never\n}", "failure_cooldown"},
		{"session_sticky {\nfailure_cooldown 0\n}", "failure_cooldown"},
		{"session_sticky {\nfailure_cooldown -1s\n}", "failure_cooldown"},
		{"session_sticky {\nrepin_on_status\n}", "repin_on_status"},
		{"session_sticky {\nrepin_on_status 99\n}", "repin_on_status"},
		{"session_sticky {\nrepin_on_status 600\n}", "repin_on_status"},
		{"session_sticky {\nrepin_on_status abc\n}", "repin_on_status"},
		{"session_sticky {\nrepin_on_status 502 5xx\n}", "repin_on_status"},
		{"session_sticky {\nname\n}", "name"},
		{"session_sticky {\nname \"\"\n}", "name"},
		{"session_sticky {\nname a b\n}", "name"},
		{"session_sticky {\nfallback\n}", "fallback"},
		{"session_sticky {\nfallback bogus\n}", "fallback"},
		{"session_sticky {\nfallback session_sticky\n}", "fallback"},
		{"session_sticky {\nfallback random_choose two\n}", "fallback"},
		{"session_sticky {\nfallback header\n}", "fallback"},
		{"session_sticky {\nfallback first\nfallback random\n}", "fallback"},
		{"session_sticky {\ntier\n}", "tier"},
		{"session_sticky {\ntier 10.0.0.1\n}", "tier"},
		{"session_sticky {\ntier ftp://files.example.com\n}", "tier"},
		{"session_sticky {\ntier https://api.example.com/v1\n}", "tier"},
		{"session_sticky {\ntier 10.0.0.1:80\ntier http://10.0.0.1\n}", "tier"},
		{"session_sticky {\nstore\n}", "store"},
		{"session_sticky {\nstore memcached\n}", "store"},
		{"session_sticky {\nstore redis\nstore redis\n}", "store"},
		{"session_sticky {\nstore redis extra\n}", "extra"},
		{"session_sticky {\nstore redis {\nbogus 1\n}\n}", `"bogus"`},
		{"session_sticky {\nstore redis {\naddress\n}\n}", "address"},
		{"session_sticky {\nstore redis {\nusername\n}\n}", "username"},
		{"session_sticky {\nstore redis {\npassword a b\n}\n}", "password"},
		{"session_sticky {\nstore redis {\ndb first\n}\n}", "db"},
		{"session_sticky {\nstore redis {\ndb -1\n}\n}", "db"},
		{"session_sticky {\nstore redis {\ntls yes\n}\n}", "tls"},
		{"session_sticky {\nstore redis {\ntimeout\n}\n}", "timeout"},
		{"session_sticky {\nstore redis {\ntimeout 0s\n}\n}", "timeout"},
		{"session_sticky {\nstore redis {\ntimeout fast\n}\n}", "timeout"},
	}
	for _, tt := range tests {
		_, err := parsePolicy(t, tt.input)
		if err == nil {
			t.Errorf("%q: no error", tt.input)
			continue
		}
		if !strings.Contains(err.Error(), tt.wantInError) {
			t.Errorf("%q: error %q does not name %q", tt.input, err, tt.wantInError)
		}
	}
}

func TestCaddyfileFallbackPolicies(t *testing.T) {
	tests := []struct{ fallback, want string }{
		{"round_robin", `{"policy":"round_robin"}`},
		{"least_conn", `{"policy":"least_conn"}`},
		{"random", `{"policy":"random"}`},
		{"first", `{"policy":"first"}`},
		{"ip_hash", `{"policy":"ip_hash"}`},
		{"client_ip_hash", `{"policy":"client_ip_hash"}`},
		{"uri_hash", `{"policy":"uri_hash"}`},
		{"random_choose 2", `{"policy":"random_choose","choose":2}`},
		{"weighted_round_robin 3 1", `{"policy":"weighted_round_robin","weights":[3,1]}`},
		{"header X-Upstream", `{"policy":"header","field":"X-Upstream"}`},
		{"header X-Upstream {\n\t\tfallback first\n\t}", `{"policy":"header","field":"X-Upstream","fallback":{"policy":"first"}}`},
		{"query backend {\n\t\tfallback least_conn\n\t}", `{"policy":"query","key":"backend","fallback":{"policy":"least_conn"}}`},
		{"cookie lb", `{"policy":"cookie","name":"lb"}`},
		{"cookie lb s3cret {\n\t\tfallback random_choose 3\n\t}", `{"policy":"cookie","name":"lb","secret":"s3cret","fallback":{"policy":"random_choose","choose":3}}`},
	}
	for _, tt := range tests {
		// Options after the fallback (and its block) are still read.
		input := "session_sticky {\n\tttl 1h\n\tfallback " + tt.fallback + "\n\tname after\n}"
		p, err := parsePolicy(t, input)
		if err != nil {
			t.Errorf("fallback %s: %v", tt.fallback, err)
			continue
		}
		if !jsonEqual(t, p.FallbackRaw, tt.want) {
			t.Errorf("fallback %s: JSON %s, want %s", tt.fallback, p.FallbackRaw, tt.want)
		}
		if p.Name != "after" || p.TTL != caddy.Duration(time.Hour) {
			t.Errorf("fallback %s: the options around it were lost: %+v", tt.fallback, p)
		}
	}
}

// findHandler returns the first JSON object in v with "handler": name.
func findHandler(v any, name string) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == name {
			return v
		}
		for _, child := range v {
			if h := findHandler(child, name); h != nil {
				return h
			}
		}
	case []any:
		for _, child := range v {
			if h := findHandler(child, name); h != nil {
				return h
			}
		}
	}
	return nil
}

func TestCaddyfileAdaptsInReverseProxy(t *testing.T) {
	const input = `
:8080 {
	reverse_proxy 127.0.0.1:9001 127.0.0.1:9002 {
		lb_policy session_sticky {
			ttl              30m
			max_sessions     1000
			balance_factor   2
			failure_cooldown 1m
			repin_on_status  503
			name             chat
			fallback header X-Upstream {
				fallback first
			}
		}
		lb_retries 2
	}
}
`
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("no caddyfile adapter")
	}
	out, _, err := adapter.Adapt([]byte(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	var config any
	if err := json.Unmarshal(out, &config); err != nil {
		t.Fatal(err)
	}
	proxy := findHandler(config, "reverse_proxy")
	if proxy == nil {
		t.Fatalf("no reverse_proxy handler in %s", out)
	}
	lb, _ := proxy["load_balancing"].(map[string]any)
	policy, err := json.Marshal(lb["selection_policy"])
	if err != nil {
		t.Fatal(err)
	}
	want := `{
		"policy": "session_sticky",
		"ttl": 1800000000000,
		"max_sessions": 1000,
		"balance_factor": 2,
		"failure_cooldown": 60000000000,
		"repin_on_status": [503],
		"name": "chat",
		"fallback": {"policy": "header", "field": "X-Upstream", "fallback": {"policy": "first"}}
	}`
	if !jsonEqual(t, policy, want) {
		t.Fatalf("selection_policy = %s\nwant %s", policy, want)
	}
	if lb["retries"] != float64(2) {
		t.Fatalf("the options after lb_policy were lost: %v", lb)
	}

	// The adapted JSON provisions.
	p := new(StickySelection)
	if err := json.Unmarshal(policy, p); err != nil {
		t.Fatal(err)
	}
	provisionPolicy(t, p)
	if p.Name != "chat" || p.balanceFactor != 2 || p.fallback == nil {
		t.Fatalf("provisioned %+v", p)
	}
}

func TestProvisionDefaults(t *testing.T) {
	p := new(StickySelection)
	provisionPolicy(t, p)
	if p.TTL != caddy.Duration(DefaultTTL) || p.MaxSessions != DefaultMaxSessions ||
		p.FailureCooldown != caddy.Duration(DefaultFailureCooldown) ||
		!reflect.DeepEqual(p.RepinOnStatus, DefaultRepinOnStatus) || p.balanceFactor != DefaultBalanceFactor {
		t.Fatalf("defaults: %+v", p)
	}
	if p.placeByFallback || p.fallback == nil {
		t.Fatal("without fallback, new sessions must be placed by rendezvous hashing, with round_robin for sessionless requests")
	}
}

func TestProvisionErrorsNameTheOption(t *testing.T) {
	tests := []struct{ config, wantInError string }{
		{`{"ttl": "-1h"}`, "ttl"},
		{`{"max_sessions": -5}`, "max_sessions"},
		{`{"failure_cooldown": "-1s"}`, "failure_cooldown"},
		{`{"balance_factor": 0.5}`, "balance_factor"},
		{`{"balance_factor": -1}`, "balance_factor"},
		{`{"repin_on_status": [99]}`, "repin_on_status"},
		{`{"repin_on_status": [502, 1000]}`, "repin_on_status"},
		{`{"fallback": {"policy": "bogus"}}`, "fallback"},
		{`{"fallback": {"policy": "header"}}`, "fallback"}, // header needs a field
		{`{"tiers": [[]]}`, "tiers"},
		{`{"tiers": [["10.0.0.1"]]}`, "tiers"},
		{`{"tiers": [["10.0.0.1:80"], ["http://10.0.0.1"]]}`, "tiers"},
	}
	for _, tt := range tests {
		p := new(StickySelection)
		if err := json.Unmarshal([]byte(tt.config), p); err != nil {
			t.Fatalf("%s: %v", tt.config, err)
		}
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		err := p.Provision(ctx)
		if err == nil {
			_ = p.Cleanup()
			t.Errorf("%s: provisioned without error", tt.config)
		} else if !strings.Contains(err.Error(), tt.wantInError) {
			t.Errorf("%s: error %q does not name %q", tt.config, err, tt.wantInError)
		}
		cancel()
		if p.table != nil {
			t.Errorf("%s: a failed Provision holds a pin table", tt.config)
		}
	}
}
