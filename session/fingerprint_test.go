package session

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The tests build request bodies as Go values and serialise them with a small
// encoder of their own, which can reorder keys, indent, and escape strings in
// several equivalent ways: that is how re-serialisation is simulated.

// orderedMember is one member of an orderedObject.
type orderedMember struct {
	k string
	v any
}

// orderedObject is a JSON object that keeps its member order.
type orderedObject []orderedMember

// obj builds an orderedObject from alternating keys and values.
func obj(pairs ...any) orderedObject {
	out := make(orderedObject, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, orderedMember{pairs[i].(string), pairs[i+1]})
	}
	return out
}

// list builds a JSON array.
func list(elems ...any) []any { return elems }

// encodeStyle says how encode writes a value. The zero encodeStyle is compact, in
// member order, with minimal escapes.
type encodeStyle struct {
	order         int    // 0 as built, 1 reversed, 2 sorted by key
	indent        string // non-empty: one member or element per line
	escapeUnicode bool   // non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
	escapeSlash   bool   // '/' as \/
	escapeASCII   bool   // every letter of a string value (not a key) as \u00XX
	escapeHTML    bool   // <, > and & as \u003c, \u003e, \u0026, as Go's encoding/json does
	upperHex      bool   // \u00E9 rather than \u00e9
	floats        bool   // integers as 1e2-style floats
}

// encodeJSON serialises v in style s.
func encodeJSON(v any, s encodeStyle) []byte {
	var b strings.Builder
	encodeJSONTo(&b, v, s, 0)
	return []byte(b.String())
}

func encodeJSONTo(b *strings.Builder, v any, s encodeStyle, depth int) {
	newline := func(d int) {
		if s.indent != "" {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(s.indent, d))
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case int:
		if s.floats && v != 0 {
			b.WriteString(strconv.FormatFloat(float64(v), 'e', -1, 64))
		} else {
			b.WriteString(strconv.Itoa(v))
		}
	case float64:
		b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	case string:
		writeJSONString(b, v, s, false)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(depth + 1)
			encodeJSONTo(b, e, s, depth+1)
		}
		if len(v) > 0 {
			newline(depth)
		}
		b.WriteByte(']')
	case orderedObject:
		members := slices.Clone(v)
		switch s.order {
		case 1:
			slices.Reverse(members)
		case 2:
			slices.SortStableFunc(members, func(a, b orderedMember) int { return strings.Compare(a.k, b.k) })
		}
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			newline(depth + 1)
			writeJSONString(b, m.k, s, true)
			b.WriteByte(':')
			if s.indent != "" {
				b.WriteByte(' ')
			}
			encodeJSONTo(b, m.v, s, depth+1)
		}
		if len(members) > 0 {
			newline(depth)
		}
		b.WriteByte('}')
	default:
		panic(fmt.Sprintf("encode: unsupported %T", v))
	}
}

// writeJSONString writes str as a JSON string in encodeStyle s.
func writeJSONString(b *strings.Builder, str string, s encodeStyle, key bool) {
	u := func(r rune) {
		if s.upperHex {
			fmt.Fprintf(b, `\u%04X`, r)
		} else {
			fmt.Fprintf(b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	for _, r := range str {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20:
			u(r)
		case r == '/' && s.escapeSlash:
			b.WriteString(`\/`)
		case s.escapeASCII && !key && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'):
			u(r)
		case s.escapeHTML && (r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029'):
			u(r)
		case r >= 0x80 && s.escapeUnicode:
			if r > 0xffff {
				r -= 0x10000
				u(0xd800 + (r>>10)&0x3ff)
				u(0xdc00 + r&0x3ff)
			} else {
				u(r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// equivalentStyles are styles that must all give the same fingerprint.
var equivalentStyles = []encodeStyle{
	{},
	{order: 1, indent: "  "},
	{order: 2, indent: "\t", escapeUnicode: true, escapeSlash: true, upperHex: true, escapeHTML: true},
	{order: 1, escapeASCII: true, escapeUnicode: true},
	{order: 2, floats: true, escapeSlash: true, escapeHTML: true},
}

// conversationVariant describes one request of a test conversation.
type conversationVariant struct {
	model, system, tool, user string
	// billing is the per-request token in Claude Code's billing header.
	billing string
	// turns is how many exchanges follow the first user turn.
	turns int
	// cacheAt is the user turn that carries a cache_control marker, -1 for
	// none; cacheSystem also marks the system part and the last tool.
	cacheAt     int
	cacheSystem bool
}

// firstRequest is the first request of the test conversation.
var firstRequest = conversationVariant{
	model:   "model-a",
	system:  "You are a careful coding assistant. Répondez en français si on vous écrit en français 😀.\nPaths look like /src/main.go.",
	tool:    "read_file",
	user:    "Why does parser.go fail on \"a\\b\"?\tSee https://example.com/x.",
	billing: "9f2c41",
	cacheAt: 0,
}

// billingHeaderLine returns Claude Code's billing header for token cch.
func billingHeaderLine(cch string) string {
	return "x-anthropic-billing-header: cc_version=2.1.328.593; cc_entrypoint=sdk-cli; cch=" + cch + ";"
}

// ephemeralCache returns an ephemeral cache_control marker.
func ephemeralCache() orderedObject { return obj("type", "ephemeral") }

// withCacheControl appends a cache_control member to m when on is set.
func withCacheControl(m orderedObject, on bool) orderedObject {
	if on {
		return append(slices.Clone(m), orderedMember{"cache_control", ephemeralCache()})
	}
	return m
}

// readFileSchema is a JSON schema with nesting, numbers and enums.
func readFileSchema() orderedObject {
	return obj(
		"type", "object",
		"properties", obj(
			"path", obj("type", "string", "description", "Absolute path, e.g. /src/main.go"),
			"offset", obj("type", "integer", "minimum", 0, "default", 1),
			"limit", obj("type", "integer", "maximum", 2000),
			"mode", obj("type", "string", "enum", list("text", "bytes")),
		),
		"required", list("path"),
		"additionalProperties", false,
	)
}

// apiDialect builds the request path and body of one API dialect.
type apiDialect struct {
	name  string
	build func(v conversationVariant) (path string, body any)
}

var apiDialects = []apiDialect{
	{"openai-chat", func(v conversationVariant) (string, any) {
		msgs := list(
			obj("role", "system", "content", billingHeaderLine(v.billing)+"\n"+v.system),
			obj("role", "user", "content", list(withCacheControl(obj("type", "text", "text", v.user), v.cacheAt == 0))),
		)
		for i := 1; i <= v.turns; i++ {
			id := fmt.Sprintf("call_%d", i)
			msgs = append(msgs,
				obj("role", "assistant", "content", nil, "tool_calls", list(obj("id", id, "type", "function",
					"function", obj("name", v.tool, "arguments", `{"path":"/src/parser.go"}`)))),
				obj("role", "tool", "tool_call_id", id, "content", "package parser\n\nfunc Parse() {}\n"),
				obj("role", "assistant", "content", fmt.Sprintf("Answer %d.", i)),
				obj("role", "user", "content", list(withCacheControl(obj("type", "text", "text", fmt.Sprintf("Follow-up %d", i)), v.cacheAt == i))),
			)
		}
		return "/v1/chat/completions", obj(
			"model", v.model,
			"messages", msgs,
			"tools", list(withCacheControl(obj("type", "function", "function", obj("name", v.tool, "description", "Reads a file.", "parameters", readFileSchema())), v.cacheSystem)),
			"temperature", 0.2,
			"stream", true,
		)
	}},
	{"responses-string-input", func(v conversationVariant) (string, any) {
		var input any = v.user
		if v.turns > 0 {
			// SDKs replay a string input as an easy input message.
			items := list(obj("role", "user", "content", v.user))
			for i := 1; i <= v.turns; i++ {
				items = append(items,
					obj("type", "message", "role", "assistant", "id", fmt.Sprintf("msg_%d", i),
						"content", list(obj("type", "output_text", "text", fmt.Sprintf("Answer %d.", i), "annotations", list()))),
					obj("role", "user", "content", list(withCacheControl(obj("type", "input_text", "text", fmt.Sprintf("Follow-up %d", i)), v.cacheAt == i))),
				)
			}
			input = items
		}
		return "/v1/responses", obj(
			"model", v.model,
			"instructions", billingHeaderLine(v.billing)+"\n"+v.system,
			"input", input,
			"tools", list(withCacheControl(obj("type", "function", "name", v.tool, "description", "Reads a file.", "parameters", readFileSchema(), "strict", false), v.cacheSystem)),
			"store", false,
		)
	}},
	{"responses-items", func(v conversationVariant) (string, any) {
		// Codex CLI: developer items, then the user turn; empty instructions.
		items := list(
			obj("type", "message", "role", "developer", "content", list(
				obj("type", "input_text", "text", billingHeaderLine(v.billing)),
				withCacheControl(obj("type", "input_text", "text", v.system), v.cacheSystem),
			)),
			obj("type", "message", "role", "developer", "content", list(obj("type", "input_text", "text", "<permissions instructions>sandbox: workspace-write</permissions instructions>"))),
			obj("type", "message", "role", "user", "content", list(withCacheControl(obj("type", "input_text", "text", v.user), v.cacheAt == 0))),
		)
		for i := 1; i <= v.turns; i++ {
			call := fmt.Sprintf("call_%d", i)
			items = append(items,
				obj("type", "reasoning", "summary", list(), "encrypted_content", fmt.Sprintf("gAAAA%d", i)),
				obj("type", "function_call", "name", v.tool, "arguments", `{"path":"/src/parser.go"}`, "call_id", call),
				obj("type", "function_call_output", "call_id", call, "output", "package parser\n"),
				obj("type", "message", "role", "assistant", "content", list(obj("type", "output_text", "text", fmt.Sprintf("Answer %d.", i)))),
				obj("type", "message", "role", "user", "content", list(withCacheControl(obj("type", "input_text", "text", fmt.Sprintf("Follow-up %d", i)), v.cacheAt == i))),
			)
		}
		return "/v1/responses", obj(
			"model", v.model,
			"instructions", "",
			"input", items,
			"tools", list(obj("type", "function", "name", v.tool, "description", "Reads a file.", "parameters", readFileSchema(), "strict", false)),
			"tool_choice", "auto",
			"parallel_tool_calls", false,
			"reasoning", obj("effort", "medium", "summary", "auto"),
			"store", false,
			"stream", true,
			"include", list("reasoning.encrypted_content"),
			"prompt_cache_key", "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		)
	}},
	{"anthropic-string-system", func(v conversationVariant) (string, any) {
		msgs := list(obj("role", "user", "content", list(withCacheControl(obj("type", "text", "text", v.user), v.cacheAt == 0))))
		for i := 1; i <= v.turns; i++ {
			msgs = append(msgs,
				obj("role", "assistant", "content", list(obj("type", "text", "text", fmt.Sprintf("Answer %d.", i)))),
				obj("role", "user", "content", list(withCacheControl(obj("type", "text", "text", fmt.Sprintf("Follow-up %d", i)), v.cacheAt == i))),
			)
		}
		return "/v1/messages", obj(
			"model", v.model,
			"max_tokens", 4096,
			"system", billingHeaderLine(v.billing)+"\n"+v.system,
			"messages", msgs,
			"tools", list(withCacheControl(obj("name", v.tool, "description", "Reads a file.", "input_schema", readFileSchema()), v.cacheSystem)),
		)
	}},
	{"anthropic-block-system", func(v conversationVariant) (string, any) {
		// Claude Code: key order model, messages, system, tools, metadata,
		// max_tokens, thinking, stream.
		msgs := list(obj("role", "user", "content", list(
			obj("type", "text", "text", "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nUse tabs.\n</system-reminder>\n"),
			withCacheControl(obj("type", "text", "text", v.user), v.cacheAt == 0),
		)))
		for i := 1; i <= v.turns; i++ {
			id := fmt.Sprintf("toolu_%02d", i)
			msgs = append(msgs,
				obj("role", "assistant", "content", list(
					obj("type", "thinking", "thinking", "Let me look.", "signature", "EqQBCkYIBxgCKkD"),
					obj("type", "tool_use", "id", id, "name", v.tool, "input", obj("path", "/src/parser.go", "offset", 1)),
				)),
				obj("role", "user", "content", list(withCacheControl(obj("type", "tool_result", "tool_use_id", id,
					"content", "     1→package parser\n     2→\n     3→func Parse() {}\n"), v.cacheAt == i))),
				obj("role", "system", "content", "<system-reminder>The file changed.</system-reminder>"),
			)
		}
		return "/v1/messages", obj(
			"model", v.model,
			"messages", msgs,
			"system", list(
				obj("type", "text", "text", billingHeaderLine(v.billing)),
				withCacheControl(obj("type", "text", "text", "You are Claude Code, Anthropic's official CLI for Claude."), v.cacheSystem),
				withCacheControl(obj("type", "text", "text", v.system), v.cacheSystem),
			),
			"tools", list(
				obj("name", "Bash", "description", "Runs a command.", "input_schema", obj("type", "object", "properties", obj("command", obj("type", "string")), "required", list("command"))),
				withCacheControl(obj("name", v.tool, "description", "Reads a file.", "input_schema", readFileSchema()), v.cacheSystem),
			),
			"metadata", obj("user_id", `{"device_id":"ab12","account_uuid":"","session_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}`),
			"max_tokens", 32000,
			"thinking", obj("type", "enabled", "budget_tokens", 31999),
			"stream", true,
		)
	}},
	{"gemini", func(v conversationVariant) (string, any) {
		contents := list(obj("role", "user", "parts", list(withCacheControl(obj("text", v.user), v.cacheAt == 0))))
		for i := 1; i <= v.turns; i++ {
			contents = append(contents,
				obj("role", "model", "parts", list(obj("functionCall", obj("name", v.tool, "args", obj("path", "/src/parser.go"))))),
				obj("role", "user", "parts", list(obj("functionResponse", obj("name", v.tool, "response", obj("content", "package parser\n"))))),
				obj("role", "model", "parts", list(obj("text", fmt.Sprintf("Answer %d.", i)))),
				obj("role", "user", "parts", list(withCacheControl(obj("text", fmt.Sprintf("Follow-up %d", i)), v.cacheAt == i))),
			)
		}
		return "/v1beta/models/" + v.model + ":streamGenerateContent", obj(
			"contents", contents,
			"systemInstruction", obj("role", "system", "parts", list(obj("text", billingHeaderLine(v.billing)), withCacheControl(obj("text", v.system), v.cacheSystem))),
			"tools", list(obj("functionDeclarations", list(obj("name", v.tool, "description", "Reads a file.", "parameters", readFileSchema())))),
			"generationConfig", obj("temperature", 0.2, "maxOutputTokens", 8192),
		)
	}},
}

// skimAndFingerprint skims body as the resolver does and fingerprints it. A body the skim
// rejects gets no fingerprint, as in the resolver.
func skimAndFingerprint(body []byte, path string, scope []string) (string, bool) {
	f := fields{names: fingerprintFields}
	if !f.skim(body) {
		return "", false
	}
	return fingerprint(&f, path, modelOf(&f, path), scope)
}

// mustFingerprint is skimAndFingerprint for bodies that must have a conversation shape.
func mustFingerprint(t *testing.T, body []byte, path string, scope []string) string {
	t.Helper()
	id, ok := skimAndFingerprint(body, path, scope)
	if !ok {
		t.Fatalf("no fingerprint for %s %.300s", path, body)
	}
	if len(id) != len("auto-")+32 || !strings.HasPrefix(id, "auto-") || strings.Trim(id[5:], "0123456789abcdef") != "" {
		t.Fatalf("malformed id %q", id)
	}
	return id
}

// dialectID builds conversationVariant v of apiDialect d, serialises it in encodeStyle s and
// fingerprints it under the scope ["tenant-1"].
func dialectID(t *testing.T, d apiDialect, v conversationVariant, s encodeStyle) string {
	t.Helper()
	path, body := d.build(v)
	return mustFingerprint(t, encodeJSON(body, s), path, []string{"tenant-1"})
}

func TestFingerprintProperties(t *testing.T) {
	for _, d := range apiDialects {
		t.Run(d.name, func(t *testing.T) {
			base := dialectID(t, d, firstRequest, encodeStyle{})

			t.Run("stable when turns are appended", func(t *testing.T) {
				for turns := 1; turns <= 6; turns++ {
					v := firstRequest
					v.turns = turns
					v.cacheAt = turns // the marker moves to the newest turn
					if got := dialectID(t, d, v, encodeStyle{}); got != base {
						t.Errorf("after %d more turns: %s, want %s", turns, got, base)
					}
				}
			})

			t.Run("stable under re-serialisation", func(t *testing.T) {
				for _, turns := range []int{0, 2} {
					v := firstRequest
					v.turns = turns
					v.cacheAt = turns
					for i, s := range equivalentStyles {
						if got := dialectID(t, d, v, s); got != base {
							t.Errorf("turns %d, encodeStyle %d %+v: %s, want %s", turns, i, s, got, base)
						}
					}
				}
			})

			t.Run("stable when cache_control moves", func(t *testing.T) {
				for _, turns := range []int{0, 3} {
					for cacheAt := -1; cacheAt <= turns; cacheAt++ {
						for _, cacheSystem := range []bool{false, true} {
							v := firstRequest
							v.turns, v.cacheAt, v.cacheSystem = turns, cacheAt, cacheSystem
							if got := dialectID(t, d, v, encodeStyle{order: 1}); got != base {
								t.Errorf("turns %d, cache at %d, on system %v: %s, want %s", turns, cacheAt, cacheSystem, got, base)
							}
						}
					}
				}
			})

			t.Run("stable when the billing header varies", func(t *testing.T) {
				for _, cch := range []string{"", "0", "4be0c1d2e3f4", "ffffffffffffffff"} {
					v := firstRequest
					v.billing = cch
					for _, s := range equivalentStyles[:4] {
						if got := dialectID(t, d, v, s); got != base {
							t.Errorf("cch %q: %s, want %s", cch, got, base)
						}
					}
				}
			})

			t.Run("changes with model, system, tools, first user turn", func(t *testing.T) {
				seen := map[string]string{base: "base"}
				for name, change := range map[string]func(*conversationVariant){
					"model":      func(v *conversationVariant) { v.model = "model-b" },
					"system":     func(v *conversationVariant) { v.system += " Be brief." },
					"tools":      func(v *conversationVariant) { v.tool = "write_file" },
					"first user": func(v *conversationVariant) { v.user = "Why does lexer.go fail?" },
				} {
					v := firstRequest
					change(&v)
					for _, turns := range []int{0, 2} {
						v.turns = turns
						id := dialectID(t, d, v, encodeStyle{})
						if other, dup := seen[id]; dup && !(other == name) {
							t.Errorf("changing %s gives the id of %s: %s", name, other, id)
						}
						seen[id] = name
					}
				}
			})

			t.Run("changes with scope", func(t *testing.T) {
				path, body := d.build(firstRequest)
				raw := encodeJSON(body, encodeStyle{})
				seen := map[string][]string{}
				for _, scope := range [][]string{nil, {""}, {"tenant-1"}, {"tenant-2"}, {"tenant-1", ""}, {"ab", "c"}, {"a", "bc"}} {
					id := mustFingerprint(t, raw, path, scope)
					if other, dup := seen[id]; dup {
						t.Errorf("scopes %q and %q give the same id %s", other, scope, id)
					}
					seen[id] = scope
				}
			})
		})
	}
}

func TestFingerprintOpening(t *testing.T) {
	scope := []string{"t"}
	sys := func(i int) orderedObject { return obj("role", "developer", "content", fmt.Sprintf("rule %d", i)) }
	body := func(items ...any) []byte {
		return encodeJSON(obj("model", "m", "input", items), encodeStyle{})
	}

	t.Run("items after the first user turn do not count", func(t *testing.T) {
		a := mustFingerprint(t, body(sys(1), obj("role", "user", "content", "hi"), obj("role", "user", "content", "again")), "/v1/responses", scope)
		b := mustFingerprint(t, body(sys(1), obj("role", "user", "content", "hi"), obj("role", "user", "content", "other")), "/v1/responses", scope)
		if a != b {
			t.Errorf("second user turn changed the id")
		}
		c := mustFingerprint(t, body(sys(2), obj("role", "user", "content", "hi")), "/v1/responses", scope)
		if a == c {
			t.Errorf("leading developer item did not count")
		}
	})

	t.Run("at most 8 items", func(t *testing.T) {
		var items []any
		for i := range 8 {
			items = append(items, sys(i))
		}
		a := mustFingerprint(t, body(items...), "/v1/responses", scope)
		b := mustFingerprint(t, body(append(slices.Clone(items), sys(8), obj("role", "user", "content", "hi"))...), "/v1/responses", scope)
		if a != b {
			t.Errorf("a ninth item changed the id")
		}
		c := mustFingerprint(t, body(items[:7]...), "/v1/responses", scope)
		if a == c {
			t.Errorf("the eighth item did not count")
		}
	})

	t.Run("a Gemini content without role is a user turn", func(t *testing.T) {
		path := "/v1beta/models/gemini-2.5-flash:generateContent"
		a := mustFingerprint(t, encodeJSON(obj("contents", list(obj("parts", list(obj("text", "hi"))))), encodeStyle{}), path, scope)
		b := mustFingerprint(t, encodeJSON(obj("contents", list(obj("parts", list(obj("text", "hi"))), obj("parts", list(obj("text", "more"))))), encodeStyle{}), path, scope)
		if a != b {
			t.Errorf("content after the first role-less content changed the id")
		}
	})

	t.Run("system_instruction spellings agree", func(t *testing.T) {
		path := "/v1beta/models/gemini-2.5-flash:generateContent"
		contents := list(obj("role", "user", "parts", list(obj("text", "hi"))))
		a := mustFingerprint(t, encodeJSON(obj("contents", contents, "systemInstruction", obj("parts", list(obj("text", "S")))), encodeStyle{}), path, scope)
		b := mustFingerprint(t, encodeJSON(obj("contents", contents, "system_instruction", obj("parts", list(obj("text", "S")))), encodeStyle{}), path, scope)
		c := mustFingerprint(t, encodeJSON(obj("contents", contents), encodeStyle{}), path, scope)
		if a != b || a == c {
			t.Errorf("systemInstruction %s, system_instruction %s, none %s", a, b, c)
		}
	})

	t.Run("numbers compare by value", func(t *testing.T) {
		a := mustFingerprint(t, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"n":100,"z":-0,"f":0.5}]}`), "/v1/chat/completions", scope)
		b := mustFingerprint(t, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"n":1e2,"z":0,"f":5E-1}]}`), "/v1/chat/completions", scope)
		c := mustFingerprint(t, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"n":"100","z":0,"f":0.5}]}`), "/v1/chat/completions", scope)
		if a != b || a == c {
			t.Errorf("100 %s, 1e2 %s, \"100\" %s", a, b, c)
		}
	})

	t.Run("empty conversation", func(t *testing.T) {
		if id, ok := skimAndFingerprint([]byte(`{"model":"m","messages":[]}`), "/v1/chat/completions", scope); ok {
			t.Errorf("empty messages got %s", id)
		}
	})
}

func TestFingerprintNoConversation(t *testing.T) {
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct{ name, path, body string }{
		{"legacy completion", "/v1/completions", `{"model":"x","prompt":"hi"}`},
		{"embeddings", "/v1/embeddings", `{"input":"hello","model":"text-embedding-3-small"}`},
		{"embeddings with items", "/v1/embeddings", `{"input":["a","b"],"model":"text-embedding-3-small"}`},
		{"bare string input elsewhere", "/v1/something", `{"input":"hello","model":"m"}`},
		{"bare string input on a gateway path", "/openai/deployments/d/chat", `{"model":"m","input":"hello"}`},
		{"not an object", "/v1/chat/completions", `["messages"]`},
		{"messages not an array", "/v1/chat/completions", `{"model":"m","messages":"hi"}`},
		{"contents not an array", "/v1beta/models/g:generateContent", `{"contents":{"parts":[]}}`},
		{"input object", "/v1/responses", `{"model":"m","input":{"role":"user"}}`},
		{"input number", "/v1/responses", `{"model":"m","input":1}`},
		{"chat on embeddings", "/v1/embeddings", chat},
		{"chat on azure embeddings", "/openai/deployments/emb/embeddings", chat},
		{"chat on moderations", "/v1/moderations", chat},
		{"chat on transcriptions", "/v1/audio/transcriptions", chat},
		{"chat on speech", "/v1/audio/speech", chat},
		{"chat on images", "/v1/images/generations", chat},
		{"chat on files", "/v1/files", chat},
		{"chat on files with slash", "/v1/files/", chat},
		{"gemini embed", "/v1beta/models/text-embedding-004:embedContent", `{"contents":[{"parts":[{"text":"hi"}]}]}`},
		{"gemini batch embed", "/v1beta/models/text-embedding-004:batchEmbedContents", `{"contents":[{"parts":[{"text":"hi"}]}]}`},
		{"malformed member", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi" "x"}]}`},
		{"malformed literal", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":nul}]}`},
		{"malformed number", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":1.2.3}]}`},
		{"bad value start", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":+1}]}`},
		{"truncated", "/v1/chat/completions", chat[:len(chat)-3]},
		{"too deep", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if id, ok := skimAndFingerprint([]byte(c.body), c.path, nil); ok {
				t.Errorf("got %s", id)
			}
		})
	}

	// The same shapes do get an id where they belong.
	for _, c := range []struct{ path, body string }{
		{"/v1/responses", `{"input":"hello","model":"m"}`},
		{"/v1/responses/", `{"input":"hello","model":"m"}`},
		{"/v1/chat/completions", `{"input":"hello","instructions":"be nice","model":"m"}`},
		{"/v1/chat/completions", chat},
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]}`},
	} {
		if _, ok := skimAndFingerprint([]byte(c.body), c.path, nil); !ok {
			t.Errorf("%s %s: no fingerprint", c.path, c.body)
		}
	}
}

func TestFingerprintMalformed(t *testing.T) {
	for _, d := range apiDialects {
		t.Run(d.name, func(t *testing.T) {
			v := firstRequest
			v.turns = 2
			path, value := d.build(v)
			body := encodeJSON(value, encodeStyle{indent: " "})
			full, _ := skimAndFingerprint(body, path, nil)

			// Every truncation either gets no id or the id of the whole
			// body (when only trailing whitespace was cut).
			for n := range len(body) {
				if id, ok := skimAndFingerprint(body[:n], path, nil); ok && id != full {
					t.Fatalf("truncated to %d bytes: %s, want %s or none", n, id, full)
				}
			}

			// Random corruption must not panic.
			rng := rand.New(rand.NewPCG(1, uint64(len(body))))
			junk := []byte(`{}[]":,\u0 ab1-e.`)
			for range 2000 {
				b := slices.Clone(body)
				for range 1 + rng.IntN(4) {
					b[rng.IntN(len(b))] = junk[rng.IntN(len(junk))]
				}
				skimAndFingerprint(b, path, nil)
				f := fields{names: fingerprintFields}
				f.skim(b)
				fingerprint(&f, path, modelOf(&f, path), nil) // even when the skim failed
			}
		})
	}
}

func TestModelOf(t *testing.T) {
	for _, c := range []struct{ body, path, want string }{
		{`{"model":"claude-sonnet-4-5","messages":[]}`, "/v1/messages", "claude-sonnet-4-5"},
		{`{"messages":[],"model":"gpt-5\u002dcodex"}`, "/v1/responses", "gpt-5-codex"},
		{`{"model":"a\/b \"q\" \u00e9\ud83d\ude00"}`, "/v1/chat/completions", `a/b "q" é😀`},
		{`{"model":"m"}`, "/v1beta/models/gemini-2.5-pro:generateContent", "m"},
		{`{"contents":[]}`, "/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro"},
		{`{"contents":[]}`, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini-2.5-flash"},
		{`{"contents":[]}`, "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash-001:generateContent", "gemini-2.0-flash-001"},
		{`{"model":7,"contents":[]}`, "/v1beta/models/g:generateContent", "g"},
		{`{"contents":[]}`, "/v1/models/gpt-4", ""},
		{`{"contents":[]}`, "/v1beta/models/:generateContent", ""},
		{`{"contents":[]}`, "/v1beta/models/g:", ""},
		{`{"contents":[]}`, "/v1beta/models/g:generateContent/x", ""},
		{`{"messages":[]}`, "/v1/chat/completions", ""},
		{`not json`, "/v1/chat/completions", ""},
	} {
		f := fields{names: fingerprintFields}
		f.skim([]byte(c.body))
		if got := modelOf(&f, c.path); got != c.want {
			t.Errorf("modelOf(%s, %s) = %q, want %q", c.body, c.path, got, c.want)
		}
		if m := gjson.Get(c.body, "model"); m.Type == gjson.String && m.Str != c.want {
			t.Errorf("gjson decodes the model of %s to %q, want %q", c.body, m.Str, c.want)
		}
	}

	// The model is hashed decoded, and the path model counts for Gemini.
	a := mustFingerprint(t, []byte(`{"model":"gpt-5-codex","input":[{"role":"user","content":"hi"}]}`), "/v1/responses", nil)
	b := mustFingerprint(t, []byte(`{"model":"gpt\u002d5\u002dcodex","input":[{"role":"user","content":"hi"}]}`), "/v1/responses", nil)
	if a != b {
		t.Errorf("escaped model changed the id")
	}
	g1 := mustFingerprint(t, []byte(`{"contents":[{"parts":[{"text":"hi"}]}]}`), "/v1beta/models/g1:generateContent", nil)
	g2 := mustFingerprint(t, []byte(`{"contents":[{"parts":[{"text":"hi"}]}]}`), "/v1beta/models/g2:generateContent", nil)
	g1s := mustFingerprint(t, []byte(`{"contents":[{"parts":[{"text":"hi"}]}]}`), "/v1beta/models/g1:streamGenerateContent", nil)
	if g1 == g2 || g1 != g1s {
		t.Errorf("Gemini path model: g1 %s, g2 %s, g1 streaming %s", g1, g2, g1s)
	}
}

func TestConversationPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/chat/completions":      true,
		"/v1/messages":              true,
		"/v1/messages/count_tokens": true,
		"/v1/responses":             true,
		"/v1beta/models/gemini-2.5-pro:generateContent": true,
		"/openai/deployments/gpt/chat/completions":      true,
		"/v1/embeddings":                   false,
		"/v1/embeddings/":                  false,
		"/openai/deployments/e/embeddings": false,
		"/v1/EMBEDDINGS":                   false,
		"/v1/moderations":                  false,
		"/v1/files":                        false,
		"/v1/audio/speech":                 false,
		"/v1/audio/transcriptions":         false,
		"/v1/images/generations":           false,
		"/v1/images/edits":                 false,
		"/v1beta/models/text-embedding-004:embedContent": false,
		"/v1beta/models/e:batchEmbedContents":            false,
		"/v1/embeddings?api-version=2024-10-21":          false,
		"/v1/chat/completions?api-version=2024-10-21":    true,
		"/v1/audiobook/chat/completions":                 true,
		"":                                               true,
		"/":                                              true,
	} {
		if got := conversationPath(path); got != want {
			t.Errorf("conversationPath(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestUnescapeMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	alphabet := []rune("ab/\\\"\n\t\r\x00\x1f é€😀\u2028\ufffd<&>")
	for i := range 3000 {
		var sb strings.Builder
		for range rng.IntN(40) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		text := sb.String()
		s := equivalentStyles[i%len(equivalentStyles)]
		var b strings.Builder
		writeJSONString(&b, text, s, false)
		raw := []byte(b.String())
		content := raw[1 : len(raw)-1]

		var want string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if want != text {
			t.Fatalf("test encoder: %s decodes to %q, want %q", raw, want, text)
		}
		if got := string(appendUnescaped(nil, content)); got != want {
			t.Fatalf("appendUnescaped(%s) = %q, want %q", raw, got, want)
		}
		// Decoding through a small buffer gives the same text.
		var got []byte
		buf := make([]byte, utf8.UTFMax+rng.IntN(8))
		for c := content; len(c) > 0; {
			n, used := unescapeInto(buf, c)
			if used == 0 {
				t.Fatalf("unescapeInto made no progress on %q", c)
			}
			got = append(got, buf[:n]...)
			c = c[used:]
		}
		if string(got) != want {
			t.Fatalf("unescapeInto(%s) = %q, want %q", raw, got, want)
		}
		var h1, h2 hasher
		if h1.stringHash(content) != h2.name(want) {
			t.Fatalf("stringHash(%s) differs from the hash of its text", raw)
		}
	}

	// Lone surrogates decode as encoding/json decodes them; invalid escapes
	// are kept as they are.
	for raw, want := range map[string]string{
		`\ud83d`:       "\ufffd",
		`\ud83dx`:      "\ufffdx",
		`\ude00\ud83d`: "\ufffd\ufffd",
		`\ud83d\u0041`: "\ufffdA",
		`\u00e9\u00E9`: "éé",
		`\x`:           `\x`,
		`\u12`:         `\u12`,
		`\u12g4`:       `\u12g4`,
		`a\`:           `a\`,
		`\/\b\f\n\r\t`: "/\b\f\n\r\t",
	} {
		if got := string(appendUnescaped(nil, []byte(raw))); got != want {
			t.Errorf("appendUnescaped(%s) = %q, want %q", raw, got, want)
		}
		var std string
		if json.Unmarshal([]byte(`"`+raw+`"`), &std) == nil && std != want {
			t.Errorf("encoding/json decodes %s to %q, want %q", raw, std, want)
		}
	}
}

func TestAfterFirstLine(t *testing.T) {
	for raw, want := range map[string]string{
		`a\nb`:        `b`,
		`a\u000Ab\nc`: `b\nc`,
		"a\nb":        `b`,
		`a\\nb\nc`:    `c`,
		`abc`:         ``,
		`abc\`:        ``,
		`\u005cn\nx`:  `x`,
	} {
		if got := string(afterFirstLine([]byte(raw))); got != want {
			t.Errorf("afterFirstLine(%s) = %s, want %s", raw, got, want)
		}
	}
}

// claudeCodeSizedBody returns a Claude-Code-shaped request body of about size
// bytes: a system prompt and tool list in proportion to the size (up to the
// ~50 KiB a real first request carries; the same from 128 KiB on), a first user turn with a
// system-reminder, and then tool-use exchanges with source code until the
// size is reached.
func claudeCodeSizedBody(size int) []byte {
	header := 48 << 10
	if size < 128<<10 {
		header = size / 2
	}
	code := strings.Repeat("\tif err := parse(\"a\\\\b\", 'x'); err != nil {\n\t\treturn fmt.Errorf(\"parse: %w\", err) // é →\n\t}\n", 4)
	prose := "You are an interactive CLI tool that helps users with software engineering tasks. Use the instructions below and the tools available to you to assist the user.\n\n# Tone and style\nBe concise, direct, and to the point. Use `code` spans for paths such as /src/main.go.\n"

	var system strings.Builder
	for system.Len() < header/4 {
		system.WriteString(prose)
	}
	var tools []any
	toolBytes := 0
	for i := 0; toolBytes < header*3/4; i++ {
		desc := strings.Repeat("Reads a file from the local filesystem. You can access any file directly by using this tool.\n- The file_path parameter must be an absolute path.\n", 6)
		tools = append(tools, obj(
			"name", fmt.Sprintf("Tool%d", i),
			"description", desc,
			"input_schema", obj("type", "object", "properties", obj(
				"file_path", obj("type", "string", "description", "The absolute path to the file to read"),
				"offset", obj("type", "number", "description", "The line number to start reading from"),
				"limit", obj("type", "number", "description", "The number of lines to read"),
			), "required", list("file_path"), "additionalProperties", false, "$schema", "http://json-schema.org/draft-07/schema#"),
		))
		toolBytes += len(desc) + 400
	}
	msgs := list(obj("role", "user", "content", list(
		obj("type", "text", "text", "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\n"+strings.Repeat("- Use tabs for indentation.\n", 20)+"</system-reminder>\n"),
		obj("type", "text", "text", "Fix the failing test in parser_test.go."),
	)))
	build := func(msgs []any, cacheOn int) []byte {
		withMarker := slices.Clone(msgs)
		last := withMarker[cacheOn].(orderedObject)
		content := slices.Clone(last[1].v.([]any))
		content[len(content)-1] = withCacheControl(content[len(content)-1].(orderedObject), true)
		withMarker[cacheOn] = obj("role", last[0].v, "content", content)
		return encodeJSON(obj(
			"model", "claude-sonnet-4-5-20250929",
			"messages", withMarker,
			"system", list(
				obj("type", "text", "text", billingHeaderLine("4be0c1d2e3f4")),
				obj("type", "text", "text", "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control", ephemeralCache()),
				obj("type", "text", "text", system.String(), "cache_control", ephemeralCache()),
			),
			"tools", tools,
			"metadata", obj("user_id", `{"device_id":"ab12","account_uuid":"","session_id":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}`),
			"max_tokens", 32000,
			"thinking", obj("type", "enabled", "budget_tokens", 31999),
			"stream", true,
		), encodeStyle{})
	}
	// Grow the conversation by measuring each exchange on its own, not by
	// re-encoding the whole body every time.
	total := len(build(msgs, 0))
	for i := 0; ; i++ {
		id := fmt.Sprintf("toolu_01%020d", i)
		exchange := list(
			obj("role", "assistant", "content", list(
				obj("type", "text", "text", "Let me read the file."),
				obj("type", "tool_use", "id", id, "name", "Tool0", "input", obj("file_path", "/src/parser.go")),
			)),
			obj("role", "user", "content", list(obj("type", "tool_result", "tool_use_id", id, "content", code))),
		)
		add := len(encodeJSON(exchange, encodeStyle{})) // the brackets stand for the two commas
		if total+add > size {
			break
		}
		msgs = append(msgs, exchange...)
		total += add
	}
	body := build(msgs, len(msgs)-1)
	for len(body) > size && len(msgs) > 1 {
		msgs = msgs[:len(msgs)-2]
		body = build(msgs, len(msgs)-1)
	}
	return body
}

func TestClaudeCodeBody(t *testing.T) {
	for _, size := range []int{16 << 10, 1 << 20} {
		body := claudeCodeSizedBody(size)
		if len(body) < size*9/10 || len(body) > size || !json.Valid(body) {
			t.Fatalf("claudeCodeSizedBody(%d) has %d bytes, valid %v", size, len(body), json.Valid(body))
		}
		mustFingerprint(t, body, "/v1/messages", []string{"u"})
	}
	// A longer conversation (with the marker moved) keeps the id.
	a := mustFingerprint(t, claudeCodeSizedBody(128<<10), "/v1/messages", nil)
	b := mustFingerprint(t, claudeCodeSizedBody(256<<10), "/v1/messages", nil)
	if a != b {
		t.Errorf("Claude Code conversation changed id as it grew")
	}
}

func benchmarkFingerprint(b *testing.B, size int) {
	body := claudeCodeSizedBody(size)
	scope := []string{"user-42"}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f := fields{names: fingerprintFields}
		if !f.skim(body) {
			b.Fatal("skim failed")
		}
		if _, ok := fingerprint(&f, "/v1/messages", modelOf(&f, "/v1/messages"), scope); !ok {
			b.Fatal("no fingerprint")
		}
	}
}

// BenchmarkFingerprint16KiB measures the skim and fingerprint of a small
// Claude Code request, as the resolver runs them.
func BenchmarkFingerprint16KiB(b *testing.B) { benchmarkFingerprint(b, 16<<10) }

// BenchmarkFingerprint1MiB measures the skim and fingerprint of a long
// Claude Code conversation.
func BenchmarkFingerprint1MiB(b *testing.B) { benchmarkFingerprint(b, 1<<20) }

func benchmarkFingerprintAfterSkim(b *testing.B, size int) {
	body := claudeCodeSizedBody(size)
	scope := []string{"user-42"}
	f := fields{names: fingerprintFields}
	if !f.skim(body) {
		b.Fatal("skim failed")
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := fingerprint(&f, "/v1/messages", modelOf(&f, "/v1/messages"), scope); !ok {
			b.Fatal("no fingerprint")
		}
	}
}

// BenchmarkFingerprintAfterSkim16KiB measures the fingerprint alone, the
// skim being shared with the other body signals.
func BenchmarkFingerprintAfterSkim16KiB(b *testing.B) { benchmarkFingerprintAfterSkim(b, 16<<10) }

// BenchmarkFingerprintAfterSkim1MiB measures the fingerprint alone of a long
// conversation: only its opening is read.
func BenchmarkFingerprintAfterSkim1MiB(b *testing.B) { benchmarkFingerprintAfterSkim(b, 1<<20) }

// FuzzFingerprint checks that fingerprinting arbitrary input never panics,
// and that a valid body keeps its id when encoding/json re-serialises it
// (sorted keys, its own escapes and number formatting).
func FuzzFingerprint(f *testing.F) {
	for _, d := range apiDialects {
		for _, turns := range []int{0, 1} {
			v := firstRequest
			v.turns = turns
			path, body := d.build(v)
			f.Add(encodeJSON(body, encodeStyle{}), path)
		}
	}
	f.Add([]byte(`{"model":"m","input":"hi","tools":[{"a":1e2,"b":-0}]}`), "/v1/responses")
	// Injected context and dates in the opening.
	f.Add(encodeJSON(openingBody("m", "Today's date: 2026-12-03", list(
		textPart("<system-reminder>\nThe current date is: Thursday, December 3, 2026.\n</system-reminder>"),
		textPart("Hi <b>there</b>\n<environment_details>\nTime: 12/3/2026, 7:30:00 AM\n</environment_details>")), 1), encodeStyle{}), "/v1/chat/completions")
	f.Add([]byte(`{"contents":[{"role":"user","parts":[{"text":"<session_context>x</session_context>"}]},{"role":"user","parts":[{"text":"Thu Dec 03 2026"}]}]}`), "/v1beta/models/g:generateContent")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		scope := []string{"s"}
		fl := fields{names: fingerprintFields}
		fl.skim(body)
		modelOf(&fl, path)
		id, ok := fingerprint(&fl, path, modelOf(&fl, path), scope)
		if ok && (len(id) != len("auto-")+32 || !strings.HasPrefix(id, "auto-")) {
			t.Fatalf("malformed id %q", id)
		}
		id, ok = skimAndFingerprint(body, path, scope)
		if !ok || !utf8.Valid(body) || !json.Valid(body) || !canonicalKeys(gjson.ParseBytes(body), true) {
			return
		}
		var v any
		if json.Unmarshal(body, &v) != nil {
			return // a number beyond float64
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if id2, ok2 := skimAndFingerprint(again, path, scope); id2 != id {
			t.Fatalf("%s re-serialised as %s: %s, %v; want %s", body, again, id2, ok2, id)
		}
	})
}

// canonicalKeys reports whether no object in r has duplicate keys (which
// encoding/json would collapse) and, at the top level, escaped keys (which
// the skim matches raw, while encoding/json writes them plain).
func canonicalKeys(r gjson.Result, top bool) bool {
	ok := true
	seen := map[string]bool{}
	r.ForEach(func(key, value gjson.Result) bool {
		if r.IsObject() {
			if seen[key.String()] || (top && strings.Contains(key.Raw, `\`)) {
				ok = false
				return false
			}
			seen[key.String()] = true
		}
		if value.IsObject() || value.IsArray() {
			ok = canonicalKeys(value, false)
		}
		return ok
	})
	return ok
}
