package upstreams

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens. Syntax:
//
//	lb_policy session_sticky {
//	    ttl              <duration>
//	    max_sessions     <n>
//	    fallback         <policy> [<args>...] [{ ... }]
//	    balance_factor   <float>
//	    failure_cooldown <duration>
//	    repin_on_status  <code>...
//	    name             <string>
//	    tier             <upstream>...
//	    store            <module> { ... }
//	}
//
// Every option is optional. balance_factor 0 turns the load bound off;
// repeated repin_on_status lines add to the list; fallback takes any
// selection policy with its own arguments and block, as lb_policy does;
// each tier line is one tier, the first the cheapest, of upstreams written
// as in reverse_proxy (host:port, or a URL such as https://api.example.com).

func (p *StickySelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // policy name
	if d.NextArg() {
		return d.Errf("session_sticky: unexpected argument %q; options go in a block", d.Val())
	}
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "ttl", "failure_cooldown":
			val, err := oneArg(d)
			if err != nil {
				return err
			}
			dur, err := caddy.ParseDuration(val)
			if err != nil || dur <= 0 {
				return d.Errf("%s: want a positive duration, got %q", opt, val)
			}
			if opt == "ttl" {
				p.TTL = caddy.Duration(dur)
			} else {
				p.FailureCooldown = caddy.Duration(dur)
			}

		case "max_sessions":
			val, err := oneArg(d)
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return d.Errf("max_sessions: want a positive integer, got %q", val)
			}
			p.MaxSessions = n

		case "balance_factor":
			val, err := oneArg(d)
			if err != nil {
				return err
			}
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || (f > 0 && f < 1) {
				return d.Errf("balance_factor: want 0 (off) or a number of at least 1, got %q", val)
			}
			p.BalanceFactor = &f

		case "repin_on_status":
			// Repeated lines add to the list.
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("repin_on_status: want one or more status codes")
			}
			for _, a := range args {
				code, err := strconv.Atoi(a)
				if err != nil || code < 100 || code > 599 {
					return d.Errf("repin_on_status: %q is not an HTTP status code", a)
				}
				p.RepinOnStatus = append(p.RepinOnStatus, code)
			}

		case "name":
			val, err := oneArg(d)
			if err != nil {
				return err
			}
			if val == "" {
				return d.Err("name: must not be empty")
			}
			p.Name = val

		case "tier":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("tier: want one or more upstreams")
			}
			p.Tiers = append(p.Tiers, args)
			if _, err := newTierSet(p.Tiers); err != nil {
				return d.Errf("tier: %v", strings.TrimPrefix(err.Error(), "tiers: "))
			}

		case "store":
			if !d.NextArg() {
				return d.Err("store: want a store module name, such as redis")
			}
			if p.StoreRaw != nil {
				return d.Err("store: already specified")
			}
			name := d.Val()
			modID := "http.reverse_proxy.selection_policies.session_sticky.stores." + name
			unm, err := caddyfile.UnmarshalModule(d, modID)
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			if _, ok := unm.(PinStoreModule); !ok {
				return d.Errf("store: module %s is not a pin store", modID)
			}
			p.StoreRaw = caddyconfig.JSONModuleObject(unm, "backend", name, nil)

		case "fallback":
			if !d.NextArg() {
				return d.Err("fallback: want a selection policy name")
			}
			if p.FallbackRaw != nil {
				return d.Err("fallback: selection policy already specified")
			}
			name := d.Val()
			if name == "session_sticky" {
				return d.Err("fallback: session_sticky cannot be its own fallback")
			}
			modID := "http.reverse_proxy.selection_policies." + name
			unm, err := caddyfile.UnmarshalModule(d, modID)
			if err != nil {
				// The error already says where in the file it is.
				return fmt.Errorf("fallback: %w", err)
			}
			sel, ok := unm.(reverseproxy.Selector)
			if !ok {
				return d.Errf("fallback: module %s is not a selection policy", modID)
			}
			p.FallbackRaw = caddyconfig.JSONModuleObject(sel, "policy", name, nil)

		default:
			return d.Errf("unrecognized session_sticky option %q", opt)
		}
	}
	return nil
}

// oneArg returns the single argument of the current option.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	opt := d.Val()
	if !d.NextArg() {
		return "", d.Errf("%s: missing value", opt)
	}
	val := d.Val()
	if d.NextArg() {
		return "", d.Errf("%s: too many arguments", opt)
	}
	return val, nil
}

// UnmarshalCaddyfile sets up the store from Caddyfile tokens. Syntax:
//
//	store redis {
//	    address     <host:port>
//	    master_name <name>
//	    username    <name>
//	    password    <secret>
//	    db          <n>
//	    tls         on|off
//	    key_prefix  <prefix>
//	    timeout     <duration>
//	}
//
// address may be repeated (Redis Cluster seed nodes, or Sentinels with
// master_name); with none, localhost:6379. A bare "store redis" takes every
// default.
func (s *RedisStore) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // store name
	if d.NextArg() {
		return d.Errf("store redis: unexpected argument %q; options go in a block", d.Val())
	}
	for d.NextBlock(0) {
		opt := d.Val()
		if opt == "address" {
			// Repeated lines and several arguments both add addresses.
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("address: want host:port")
			}
			s.Addresses = append(s.Addresses, args...)
			continue
		}
		val, err := oneArg(d)
		if err != nil {
			return err
		}
		switch opt {
		case "master_name":
			s.MasterName = val
		case "username":
			s.Username = val
		case "password":
			s.Password = val
		case "db":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return d.Errf("db: want a database number, got %q", val)
			}
			s.DB = n
		case "tls":
			switch val {
			case "on":
				s.TLS = true
			case "off":
				s.TLS = false
			default:
				return d.Errf("tls: want on or off, got %q", val)
			}
		case "key_prefix":
			s.KeyPrefix = val
		case "timeout":
			dur, err := caddy.ParseDuration(val)
			if err != nil || dur <= 0 {
				return d.Errf("timeout: want a positive duration, got %q", val)
			}
			s.Timeout = caddy.Duration(dur)
		default:
			return d.Errf("unrecognized store redis option %q", opt)
		}
	}
	return nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*StickySelection)(nil)
	_ caddyfile.Unmarshaler = (*RedisStore)(nil)
)
