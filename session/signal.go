package session

import (
	"fmt"
	"net/textproto"
	"strings"
)

// Kind is the kind of a signal: where in a request a session id is looked for.
type Kind uint8

// The signal kinds, in their default order.
const (
	KindHeaders Kind = iota + 1
	KindBody
	KindAuto
)

// DefaultOrder is the order in which kinds are tried unless configured.
var DefaultOrder = []Kind{KindHeaders, KindBody, KindAuto}

// String returns the name used in configuration: headers, body or auto.
func (k Kind) String() string {
	switch k {
	case KindHeaders:
		return "headers"
	case KindBody:
		return "body"
	case KindAuto:
		return "auto"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind parses a kind name as written in configuration.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "headers":
		return KindHeaders, nil
	case "body":
		return KindBody, nil
	case "auto":
		return KindAuto, nil
	}
	return 0, fmt.Errorf("unknown signal kind %q (want headers, body or auto)", s)
}

// Transform turns a raw signal value into a session id.
type Transform uint8

// The transforms.
const (
	// TransformNone uses the value as it is.
	TransformNone Transform = iota
	// TransformSessionUUID extracts the session part of a Claude Code user
	// id; a value with no session part does not match.
	TransformSessionUUID
)

// ParseTransform parses a transform name as written in configuration; the
// empty string is TransformNone.
func ParseTransform(s string) (Transform, error) {
	switch s {
	case "":
		return TransformNone, nil
	case "session-uuid":
		return TransformSessionUUID, nil
	}
	return 0, fmt.Errorf("unknown transform %q (want session-uuid)", s)
}

// String returns the transform's configuration name ("" for none).
func (t Transform) String() string {
	if t == TransformSessionUUID {
		return "session-uuid"
	}
	return ""
}

// Signal is one place a session id may be found: a request header (Name is
// the header name) or a JSON body field (Name is a gjson path; only string
// values count).
type Signal struct {
	Kind      Kind
	Name      string
	Transform Transform
}

// Source returns how the signal is reported in {http.session.source}:
// "header:<Name>" or "body:<path>".
func (s Signal) Source() string {
	if s.Kind == KindHeaders {
		return "header:" + s.Name
	}
	return "body:" + s.Name
}

// BuiltinHeaders are the session headers of known clients, in the order they
// are tried. Names are in canonical form (Session_id is the canonical form
// of session_id).
var BuiltinHeaders = []Signal{
	{Kind: KindHeaders, Name: "X-Session-Id"},             // OpenCode with other providers, OpenRouter convention
	{Kind: KindHeaders, Name: "X-Claude-Code-Session-Id"}, // Claude Code
	{Kind: KindHeaders, Name: "Session-Id"},               // Codex CLI
	{Kind: KindHeaders, Name: "Session_id"},               // older Codex CLI; needs expected_underscore_headers
	{Kind: KindHeaders, Name: "X-Opencode-Session"},       // OpenCode
	{Kind: KindHeaders, Name: "X-Session-Affinity"},       // Kilo Code
	{Kind: KindHeaders, Name: "X-Litellm-Session-Id"},     // LiteLLM
	{Kind: KindHeaders, Name: "Helicone-Session-Id"},      // Helicone
	{Kind: KindHeaders, Name: "Agent-Session-Id"},         // Goose
}

// BuiltinBodyFields are the session fields of known request bodies, in the
// order they are tried.
var BuiltinBodyFields = []Signal{
	{Kind: KindBody, Name: "metadata.user_id", Transform: TransformSessionUUID}, // Claude Code
	{Kind: KindBody, Name: "session_id"},                                        // OpenRouter convention
	{Kind: KindBody, Name: "litellm_session_id"},                                // LiteLLM
	{Kind: KindBody, Name: "prompt_cache_key"},                                  // OpenAI, Codex CLI
	{Kind: KindBody, Name: "conversation"},                                      // Responses API, as a string
	{Kind: KindBody, Name: "conversation.id"},                                   // Responses API, as an object
}

// credentialHeaders carry credentials; they are refused as session sources
// because a session id is hashed into keys, placed in placeholders and may be
// logged with record_ids raw.
var credentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie",
	"X-Api-Key", "Api-Key", "X-Goog-Api-Key", "X-Auth-Token", "X-Access-Token",
}

// HeaderSignal returns the signal for a user-named header, with the name in
// canonical form. It refuses credential-bearing headers and names that are
// not valid header field names.
func HeaderSignal(name string, t Transform) (Signal, error) {
	if name == "" {
		return Signal{}, fmt.Errorf("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenByte(name[i]) {
			return Signal{}, fmt.Errorf("invalid header name %q", name)
		}
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	for _, c := range credentialHeaders {
		if strings.EqualFold(canon, c) {
			return Signal{}, fmt.Errorf("header %s carries credentials and cannot be a session source", c)
		}
	}
	return Signal{Kind: KindHeaders, Name: canon, Transform: t}, nil
}

// BodySignal returns the signal for a user-named body field path.
func BodySignal(path string, t Transform) (Signal, error) {
	if path == "" {
		return Signal{}, fmt.Errorf("empty body field path")
	}
	for i := 0; i < len(path); i++ {
		if path[i] <= ' ' || path[i] == 0x7f {
			return Signal{}, fmt.Errorf("invalid body field path %q", path)
		}
	}
	return Signal{Kind: KindBody, Name: path, Transform: t}, nil
}

// isTokenByte reports whether c may appear in an HTTP header field name
// (RFC 9110 token).
func isTokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
