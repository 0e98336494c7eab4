package sessionkeeping

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/sessionkeeping/caddy-session-keeping/session"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("session_keeping", parseHandler)
	// After the authentication directives, so {http.auth.user.id} is known
	// for the scope; before handle and route, so one site-level
	// session_keeping covers every reverse_proxy of the site.
	httpcaddyfile.RegisterDirectiveOrder("session_keeping", httpcaddyfile.Before, "invoke")
}

func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var sk Handler
	err := sk.UnmarshalCaddyfile(h.Dispenser)
	return &sk, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	session_keeping [<matcher>] {
//	    auto_detect   on|off
//	    builtin_rules on|off
//	    header        <name> [session-uuid]
//	    body_field    <gjson.path> [session-uuid]
//	    order         headers|body|auto...
//	    scope         <placeholder or literal>...
//	    max_body      <size>
//	    max_buffered  <size>
//	    buffer_bodies on|off
//	    record_ids    hashed|raw
//	    key_pool      <name> <key>...
//	    key_pool_sticky <name> on|off
//	    strip_client_signals on|off
//	    read_usage    on|off
//	    hint_secret   <secret>
//	}
//
// header, body_field, key_pool and key_pool_sticky may be repeated (one
// key_pool line per pool).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	type stickyLine struct {
		name string
		on   bool
		line int
	}
	var sticky []stickyLine
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "auto_detect", "builtin_rules", "read_usage":
			on, err := parseOnOff(d)
			if err != nil {
				return err
			}
			switch opt {
			case "auto_detect":
				h.AutoDetect = &on
			case "builtin_rules":
				h.BuiltinRules = &on
			default:
				h.ReadUsage = &on
			}

		case "header", "body_field":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return d.Errf("%s: want <name> [session-uuid], got %d arguments", opt, len(args))
			}
			sc := SignalConfig{Name: args[0]}
			if len(args) == 2 {
				sc.Transform = args[1]
			}
			t, err := session.ParseTransform(sc.Transform)
			if err != nil {
				return d.Errf("%s %s: %v", opt, sc.Name, err)
			}
			if opt == "header" {
				if _, err := session.HeaderSignal(sc.Name, t); err != nil {
					return d.Errf("header: %v", err)
				}
				h.Headers = append(h.Headers, sc)
			} else {
				if _, err := session.BodySignal(sc.Name, t); err != nil {
					return d.Errf("body_field: %v", err)
				}
				h.BodyFields = append(h.BodyFields, sc)
			}

		case "order":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("order: want one or more of headers, body, auto")
			}
			seen := map[string]bool{}
			for _, a := range args {
				if _, err := session.ParseKind(a); err != nil {
					return d.Errf("order: %v", err)
				}
				if seen[a] {
					return d.Errf("order: %s appears twice", a)
				}
				seen[a] = true
			}
			h.Order = args

		case "scope":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Err("scope: want one or more placeholders or literals")
			}
			h.Scope = args

		case "max_body", "max_buffered":
			size, err := parseSize(d)
			if err != nil {
				return err
			}
			if opt == "max_body" {
				h.MaxBody = size
			} else {
				h.MaxBuffered = size
			}

		case "buffer_bodies":
			on, err := parseOnOff(d)
			if err != nil {
				return err
			}
			h.BufferBodies = on

		case "record_ids":
			if !d.NextArg() {
				return d.Err("record_ids: want hashed or raw")
			}
			switch v := d.Val(); v {
			case "hashed", "raw":
				h.RecordIDs = v
			default:
				return d.Errf("record_ids: want hashed or raw, got %q", v)
			}
			if d.NextArg() {
				return d.Err("record_ids: too many arguments")
			}

		case "key_pool":
			args := d.RemainingArgs()
			if len(args) < 2 {
				return d.Err("key_pool: want <name> <key>...")
			}
			name := args[0]
			if !validPoolName(name) {
				return d.Errf("key_pool: bad pool name %q: want letters, digits, - and _", name)
			}
			for _, p := range h.KeyPools {
				if p.Name == name {
					return d.Errf("key_pool: pool %q is defined twice", name)
				}
			}
			h.KeyPools = append(h.KeyPools, KeyPool{Name: name, Keys: args[1:]})

		case "key_pool_sticky":
			if !d.NextArg() {
				return d.Err("key_pool_sticky: want <name> on|off")
			}
			name := d.Val()
			on, err := parseOnOff(d)
			if err != nil {
				return d.Errf("key_pool_sticky %s: want on or off", name)
			}
			sticky = append(sticky, stickyLine{name, on, d.Line()})

		case "strip_client_signals":
			on, err := parseOnOff(d)
			if err != nil {
				return err
			}
			h.StripClientSignals = on

		case "hint_secret":
			args := d.RemainingArgs()
			if len(args) != 1 || args[0] == "" {
				return d.Err("hint_secret: want one secret")
			}
			h.HintSecret = args[0]

		default:
			return d.Errf("unrecognized session_keeping option %q", opt)
		}
	}
	// key_pool_sticky may come before or after its key_pool line.
	for _, s := range sticky {
		i := slices.IndexFunc(h.KeyPools, func(p KeyPool) bool { return p.Name == s.name })
		if i < 0 {
			return fmt.Errorf("key_pool_sticky: no key_pool named %q, at %s:%d", s.name, d.File(), s.line)
		}
		on := s.on
		h.KeyPools[i].Sticky = &on
	}
	return nil
}

// parseSize reads the single size argument of the current option: bytes,
// or a size such as 512KiB, 32MiB or 32MB, from 1 byte to 1 TiB.
func parseSize(d *caddyfile.Dispenser) (int64, error) {
	opt := d.Val()
	if !d.NextArg() {
		return 0, d.Errf("%s: want a size", opt)
	}
	size, err := humanize.ParseBytes(d.Val())
	if err != nil {
		return 0, d.Errf("%s: bad size %q: %v", opt, d.Val(), err)
	}
	if size == 0 || size > 1<<40 {
		return 0, d.Errf("%s: size %q out of range", opt, d.Val())
	}
	if d.NextArg() {
		return 0, d.Errf("%s: too many arguments", opt)
	}
	return int64(size), nil
}

// parseOnOff reads the single on|off argument of the current option.
func parseOnOff(d *caddyfile.Dispenser) (bool, error) {
	opt := d.Val()
	if !d.NextArg() {
		return false, d.Errf("%s: want on or off", opt)
	}
	v := d.Val()
	if d.NextArg() {
		return false, d.Errf("%s: too many arguments", opt)
	}
	switch v {
	case "on":
		return true, nil
	case "off":
		return false, nil
	}
	if b, err := strconv.ParseBool(v); err == nil {
		return b, nil
	}
	return false, d.Errf("%s: want on or off, got %q", opt, v)
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)
