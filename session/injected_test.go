package session

import (
	"fmt"
	"strings"
	"testing"
)

func TestCutInjected(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Hello", "Hello"},
		{"<system-reminder>\nToday is Monday.\n</system-reminder>\n\nHello", "Hello"},
		{"Hello\n\n<environment_details>\nTime: 7:30\n</environment_details>", "Hello"},
		{"<system-reminder>x</system-reminder> <session_context k=\"v\">y</session_context>\nHello <system-reminder>there</system-reminder>\n<user_instructions>z</user_instructions>", "Hello"},
		{"<system-reminder>x</system-reminder>\nHello <i>there</i>\n<environment_context>z</environment_context>", "Hello <i>there</i>"},
		// Nothing else left: kept as it is.
		{"<system-reminder>\nFix the bug.\n</system-reminder>", "<system-reminder>\nFix the bug.\n</system-reminder>"},
		{"  <system-reminder>x</system-reminder>  <session_context>y</session_context> ", "  <system-reminder>x</system-reminder>  <session_context>y</session_context> "},
		// The user's own tags stay.
		{"<file>a.go</file>\nFix this.", "<file>a.go</file>\nFix this."},
		{"Fix this:\n<task>\nFix a.go\n</task>", "Fix this:\n<task>\nFix a.go\n</task>"},
		// Not blocks: unclosed, another closing tag, empty tags.
		{"<system-reminder>x\nHello", "<system-reminder>x\nHello"},
		{"<system-reminder>x</session_context>\nHello", "<system-reminder>x</session_context>\nHello"},
		{"<system-reminder/>\nHello", "<system-reminder/>\nHello"},
		{"a < b and c > d", "a < b and c > d"},
	}
	for _, tc := range tests {
		if got, _ := cutInjected([]byte(tc.in)); string(got) != tc.want {
			t.Errorf("cutInjected(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for in, want := range map[string]bool{
		"<system-reminder>x</system-reminder>":                                                       true,
		"\n<system-reminder>x</system-reminder>\n\n<environment_details n=1>y</environment_details>": true,
		"<system-reminder>x</system-reminder> Hello":                                                 false,
		"<task>x</task>":     false,
		"Hello":              false,
		"":                   false,
		"<system-reminder>x": false,
	} {
		if _, got := cutInjected([]byte(in)); got != want {
			t.Errorf("cutInjected(%q) reports injected only %v", in, got)
		}
	}
}

func TestNextDate(t *testing.T) {
	tests := []struct{ in, date string }{
		{"Today's date: 2026-12-03", "2026-12-03"},
		{"Message time: 2026-12-03T07:24:29Z\n", "2026-12-03T07:24:29Z"},
		{"at 2026-12-03 07:24:29.123+01:00, ok", "2026-12-03 07:24:29.123+01:00"},
		{"2026/12/3 was", "2026/12/3"},
		{"2. Date: 12/3/2026\n3. IDE", "12/3/2026"},
		{"# Current Time\n12/3/2026, 7:30:00 AM (UTC)", "12/3/2026, 7:30:00 AM"},
		{"Today's date is Thursday, December 3, 2026 (formatted", "Thursday, December 3, 2026"},
		{"Today's date: Thu Dec 03 2026\n", "Thu Dec 03 2026"},
		{"on 3 December 2026.", "3 December 2026"},
		{"on Dec. 3rd, 2026.", "Dec. 3rd, 2026"},
		{"The current date is: Thursday, December 3, 2026. Note", "Thursday, December 3, 2026"},
		{"version 2026 of", ""},
		{"in 2026", ""},
		{"port 20261, 2000 rows, id 120260, 2026a", ""},
		{"see issue 4/2026 for", ""},
		{"v1.2.2026", ""},
		{"", ""},
	}
	for _, tc := range tests {
		start, end := nextDate([]byte(tc.in), 0)
		got := ""
		if start >= 0 {
			got = tc.in[start:end]
		}
		if got != tc.date {
			t.Errorf("nextDate(%q) = %q, want %q", tc.in, got, tc.date)
		}
	}
}

// openingBody builds a chat request whose system prompt and first user
// turn are given; later turns follow when turns > 0.
func openingBody(model, system string, firstUser any, turns int) orderedObject {
	msgs := list(obj("role", "system", "content", system), obj("role", "user", "content", firstUser))
	for i := 1; i <= turns; i++ {
		msgs = append(msgs,
			obj("role", "assistant", "content", fmt.Sprintf("Answer %d.", i)),
			obj("role", "user", "content", list(
				obj("type", "text", "text", "<system-reminder>\nThe current date is: Friday, December 4, 2026.\n</system-reminder>"),
				obj("type", "text", "text", fmt.Sprintf("Follow-up %d", i)))))
	}
	return obj("model", model, "messages", msgs, "tools", list(obj("type", "function", "function", obj("name", "read_file"))))
}

// textPart is an OpenAI chat text part.
func textPart(text string) orderedObject { return obj("type", "text", "text", text) }

func TestFingerprintInjectedContext(t *testing.T) {
	const (
		skills   = "<system-reminder>\nThe following skills are available: review, test.\n</system-reminder>"
		context  = "<system-reminder>\nThis is the agent.\nToday's date is Thursday, December 3, 2026.\nI'm working in /src/app.\n</system-reminder>"
		dateNote = "<system-reminder>\nThe current date is: Thursday, December 3, 2026.\n</system-reminder>"
		system   = "You are a coding agent.\n<env>\nToday's date: 2026-12-03\n</env>"
		prompt   = "Why does parser.go fail?"
	)
	id := func(t *testing.T, body orderedObject, s encodeStyle) string {
		t.Helper()
		return mustFingerprint(t, encodeJSON(body, s), "/v1/chat/completions", []string{"tenant"})
	}
	first := openingBody("m", system, list(textPart(skills), textPart(context), textPart(dateNote), textPart(prompt)), 0)
	base := id(t, first, encodeStyle{})

	same := map[string]orderedObject{
		"the resume drops the date note": openingBody("m", system, list(textPart(skills), textPart(context), textPart(prompt)), 2),
		"the next day":                   openingBody("m", "You are a coding agent.\n<env>\nToday's date: 2026-12-04\n</env>", list(textPart(context), textPart(prompt)), 3),
		"only the prompt":                openingBody("m", system, list(textPart(prompt)), 1),
		"context after the prompt":       openingBody("m", system, list(textPart(prompt), textPart("\n\n<environment_details>\nMessage time: 2026-12-03T07:24:29Z\n</environment_details>")), 0),
		"another date format":            openingBody("m", "You are a coding agent.\n<env>\nToday's date: Thu Dec 03 2026\n</env>", list(textPart(prompt)), 0),
	}
	for name, body := range same {
		for i, s := range equivalentStyles {
			if got := id(t, body, s); got != base {
				t.Errorf("%s, style %d: %s, want %s", name, i, got, base)
			}
		}
	}
	// Content as a string: context blocks in it are cut.
	stringBase := id(t, openingBody("m", system, prompt, 1), encodeStyle{})
	for i, s := range equivalentStyles {
		if got := id(t, openingBody("m", system, context+"\n\n"+prompt+"\n"+dateNote, 0), s); got != stringBase {
			t.Errorf("context in the string, style %d: %s, want %s", i, got, stringBase)
		}
	}

	seen := map[string]string{base: "base"}
	for name, body := range map[string]orderedObject{
		"another prompt after the same context": openingBody("m", system, list(textPart(skills), textPart(context), textPart(dateNote), textPart("Name one prime number.")), 0),
		"another system prompt":                 openingBody("m", "You are a reviewer.\n<env>\nToday's date: 2026-12-03\n</env>", list(textPart(context), textPart(prompt)), 0),
		"another model":                         openingBody("m2", system, list(textPart(context), textPart(prompt)), 0),
		"another prompt, no context":            openingBody("m", system, "Name one prime number.", 0),
		// A turn of injected context only is hashed as it is: two tasks
		// wrapped in tags stay apart.
		"a task in tags":       openingBody("m", system, list(textPart("<system-reminder>\nFix a.go\n</system-reminder>"), textPart("<environment_details>\nx\n</environment_details>")), 0),
		"another task in tags": openingBody("m", system, list(textPart("<system-reminder>\nFix b.go\n</system-reminder>"), textPart("<environment_details>\nx\n</environment_details>")), 0),
		// The user's own tags are the user's words.
		"a pasted file":       openingBody("m", system, list(textPart(context), textPart("Fix this:\n<file>a.go</file>")), 0),
		"another pasted file": openingBody("m", system, list(textPart(context), textPart("Fix this:\n<file>b.go</file>")), 0),
	} {
		got := id(t, body, encodeStyle{})
		if other, dup := seen[got]; dup {
			t.Errorf("%s has the id of %s", name, other)
		}
		seen[got] = name
	}
}

func TestFingerprintContextItems(t *testing.T) {
	// Codex: instructions and environment as user items of their own,
	// then the user's prompt. The prompt is the first user turn.
	body := func(env, prompt string, turns int) []byte {
		items := list(
			obj("type", "message", "role", "developer", "content", list(obj("type", "input_text", "text", "Sandbox: workspace-write."))),
			obj("type", "message", "role", "user", "content", list(obj("type", "input_text", "text", "<user_instructions>\nUse tabs.\n</user_instructions>"))),
			obj("type", "message", "role", "user", "content", list(obj("type", "input_text", "text", "<environment_context>\n"+env+"\n</environment_context>"))),
			obj("type", "message", "role", "user", "content", list(obj("type", "input_text", "text", prompt))),
		)
		for i := 0; i < turns; i++ {
			items = append(items, obj("type", "message", "role", "assistant", "content", list(obj("type", "output_text", "text", "ok"))))
		}
		return encodeJSON(obj("model", "gpt-5-codex", "instructions", "", "input", items), encodeStyle{})
	}
	a := mustFingerprint(t, body("cwd: /src", "Fix a.go", 0), "/v1/responses", nil)
	if got := mustFingerprint(t, body("cwd: /src\ndate: 2026-12-04", "Fix a.go", 2), "/v1/responses", nil); got != a {
		t.Errorf("a changed environment changed the id")
	}
	if got := mustFingerprint(t, body("cwd: /src", "Fix b.go", 0), "/v1/responses", nil); got == a {
		t.Errorf("two prompts after the same context share an id")
	}

	// Gemini CLI's model router: the session context as its own content on
	// the first run, merged with the prompt into one content on a resume.
	router := func(contents ...any) []byte {
		return encodeJSON(obj("contents", contents, "systemInstruction", obj("parts", list(obj("text", "Route.")))), encodeStyle{})
	}
	ctx := func(day string) orderedObject {
		return obj("text", "<session_context>\nToday's date is "+day+".\n</session_context>")
	}
	path := "/v1beta/models/flash-lite:generateContent"
	firstRun := mustFingerprint(t, router(obj("role", "user", "parts", list(ctx("Thursday, December 3, 2026"))), obj("role", "user", "parts", list(obj("text", "Reply with apple.")))), path, nil)
	resumed := mustFingerprint(t, router(obj("role", "user", "parts", list(ctx("Friday, December 4, 2026"), obj("text", "Reply with apple."))), obj("role", "model", "parts", list(obj("text", "OK.")))), path, nil)
	if firstRun != resumed {
		t.Errorf("router request: first run %s, resumed %s", firstRun, resumed)
	}
	// A context item that no user item follows is the turn.
	alone := mustFingerprint(t, router(obj("role", "user", "parts", list(ctx("Thursday, December 3, 2026")))), path, nil)
	if alone == firstRun {
		t.Errorf("a lone context item took the id of the prompt")
	}
}

// FuzzTextRules checks that the date and context-block finders stay within
// the text and agree with each other, whatever the text.
func FuzzTextRules(f *testing.F) {
	for _, seed := range []string{
		"Today's date is Thursday, December 3, 2026 at 2026-12-03T07:24:29Z",
		"12/3/2026, 7:30:00 AM and 2026/1/2 and Dec. 3rd, 2026",
		"<system-reminder>\nx\n</system-reminder>\nHello\n<environment_details a=b>y</environment_details>",
		"<session_context><session_context>x</session_context></session_context>",
		"20202020-20-20 2020",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		text := []byte(s)
		for at := 0; ; {
			start, end := nextDate(text, at)
			if start < 0 {
				break
			}
			if start < at || end <= start || end > len(text) {
				t.Fatalf("nextDate(%q, %d) = %d, %d", s, at, start, end)
			}
			at = end
		}
		cut, only := cutInjected(text)
		if len(cut) > len(text) || (len(cut) > 0 && !strings.Contains(s, string(cut))) {
			t.Fatalf("cutInjected(%q) = %q, not part of the text", s, cut)
		}
		if only && string(cut) != s {
			t.Fatalf("%q is injected context only, yet cut to %q", s, cut)
		}
	})
}
