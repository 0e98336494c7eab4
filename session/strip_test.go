package session

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestStripMembersBytes(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"session_id":"s","model":"m"}`, `{"model":"m"}`},
		{`{"model":"m","session_id":"s","stream":true}`, `{"model":"m","stream":true}`},
		{`{"model":"m","session_id":"s"}`, `{"model":"m"}`},
		{`{"session_id":"s"}`, `{}`},
		{"{ \"session_id\" : \"s\" }", "{  }"},
		{"{\n  \"model\": \"m\",\n  \"session_id\": \"s\",\n  \"x\": 1\n}", "{\n  \"model\": \"m\",\n  \n  \"x\": 1\n}"},
		{"{\n\t\"model\" :\"m\" ,\r\n\t\"litellm_session_id\"\t:\t\"s\"\n}", "{\n\t\"model\" :\"m\" \r\n\t\n}"},
		{`{"session_id":"a","litellm_session_id":"b","model":"m"}`, `{"model":"m"}`},
		{`{"model":"m","session_id":"a","litellm_session_id":"b"}`, `{"model":"m"}`},
		{`{"session_id":"a","litellm_session_id":"b"}`, `{}`},
		{`{"a":1,"session_id":{"n":[1,",",2]},"b":2,"litellm_session_id":null}`, `{"a":1,"b":2}`},
		{`{"session\u005fid":"s","m":1}`, `{"m":1}`},
		// Duplicate members all go.
		{`{"session_id":"a","m":1,"session_id":"b"}`, `{"m":1}`},
	}
	for _, tc := range tests {
		b := []byte(tc.in)
		n, ok := stripMembers(b, StripFields)
		got := b[:n]
		if !ok || string(got) != tc.want {
			t.Errorf("strip %q = %q (%v), want %q", tc.in, got, ok, tc.want)
			continue
		}
		if !json.Valid(got) {
			t.Errorf("strip %q gives invalid JSON %q", tc.in, got)
		}
	}
	for _, in := range []string{
		`{"model":"m"}`,
		`{"metadata":{"session_id":"nested"},"prompt_cache_key":"p","conversation":"c"}`,
		`{"session_id":"s",`,
		`["session_id"]`,
		`"session_id"`,
		`{"session_id" "s"}`,
	} {
		b := []byte(in)
		if n, ok := stripMembers(b, StripFields); ok || string(b) != in {
			t.Errorf("strip %q = %q, want untouched", in, b[:n])
		}
	}
}

func TestStripBodyRequest(t *testing.T) {
	body := `{"model":"m","session_id":"s","messages":[]}`
	want := `{"model":"m","messages":[]}`
	for _, chunked := range []bool{false, true} {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd)
		}
		r, _ := http.NewRequest("POST", "/v1/chat/completions", rd)
		r.Header.Set("Content-Type", "application/json")
		if !chunked {
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		} else {
			r.ContentLength = -1
		}
		changed, err := newResolver(t, defaultConfig).StripBody(r)
		if err != nil || !changed {
			t.Fatalf("chunked=%v: changed=%v err=%v", chunked, changed, err)
		}
		got, _ := io.ReadAll(r.Body)
		if string(got) != want || r.ContentLength != int64(len(want)) {
			t.Fatalf("chunked=%v: body %q ContentLength %d", chunked, got, r.ContentLength)
		}
		if !chunked && r.Header.Get("Content-Length") != strconv.Itoa(len(want)) {
			t.Fatalf("Content-Length header %q", r.Header.Get("Content-Length"))
		}
	}

	// Over max, encoded or not JSON: untouched.
	for _, tc := range []struct {
		ctype, enc string
		max        int64
	}{
		{"application/json", "", 10},
		{"application/json", "gzip", 0},
		{"text/plain", "", 0},
	} {
		r, _ := http.NewRequest("POST", "/", bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", tc.ctype)
		if tc.enc != "" {
			r.Header.Set("Content-Encoding", tc.enc)
		}
		changed, err := newResolver(t, Config{AutoDetect: true, MaxBody: tc.max}).StripBody(r)
		got, _ := io.ReadAll(r.Body)
		if changed || err != nil || string(got) != body {
			t.Errorf("%+v: changed=%v err=%v body %q", tc, changed, err, got)
		}
	}
}
