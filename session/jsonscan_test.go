package session

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestSkipString(t *testing.T) {
	for _, c := range []struct {
		in         string
		start, end int
	}{
		{`""`, 0, 2},
		{`"abc"`, 0, 5},
		{`"a\"b"`, 0, 6},
		{`"a\\"`, 0, 5},
		{`"a\\\"b"`, 0, 8},
		{`"\\\\"`, 0, 6},
		{`"\\\\\"x"`, 0, 9},
		{`"\\"\\"`, 0, 4},
		{`"\"\""`, 0, 6},
		{`"é😀\u00e9"`, 0, len(`"é😀\u00e9"`)},
		{`x"ab"y`, 1, 5},
		// Backslashes before the opening quote escape nothing inside.
		{`\"ab"`, 1, 5},
		{`\"\\"`, 1, 5},
		{`"abc`, 0, -1},
		{`"abc\"`, 0, -1},
		{`"abc\\\"`, 0, -1},
		{`"`, 0, -1},
		{`"\`, 0, -1},
	} {
		if got := skipString([]byte(c.in), c.start); got != c.end {
			t.Errorf("skipString(%s, %d) = %d, want %d", c.in, c.start, got, c.end)
		}
	}
}

func TestSkipValue(t *testing.T) {
	for _, c := range []struct {
		in         string
		start, end int
	}{
		{`"a"`, 0, 3},
		{`{}`, 0, 2},
		{`[]`, 0, 2},
		{`{"a":[1,{"b":"]}"}]}x`, 0, 20},
		{`["a\"]", "\\", "}"] , 1`, 0, 19},
		{`[[[]],[]]`, 0, 9},
		{`123,`, 0, 3},
		{`-1.5e3}`, 0, 6},
		{`1 `, 0, 1},
		{"1\n", 0, 1},
		{`1`, 0, 1},
		{`true`, 0, 4},
		{`null]`, 0, 4},
		{`false `, 0, 5},
		{`x{"a":1}`, 1, 8},
		{`{"a":"}"`, 0, -1},
		{`[[]`, 0, -1},
		{`["]`, 0, -1},
		{`{"a":"\"}`, 0, -1},
		{`}`, 0, -1},
		{`]`, 0, -1},
		{`,`, 0, -1},
		{`:`, 0, -1},
		{``, 0, -1},
		{`1`, 1, -1},
		{`1`, 5, -1},
	} {
		if got := skipValue([]byte(c.in), c.start); got != c.end {
			t.Errorf("skipValue(%s, %d) = %d, want %d", c.in, c.start, got, c.end)
		}
	}
}

// member is one key and value that eachMember yielded.
type member struct{ key, value string }

// membersOf collects what eachMember yields for doc, and its result.
func membersOf(doc []byte) ([]member, bool) {
	var ms []member
	ok := eachMember(doc, func(key, value []byte) bool {
		ms = append(ms, member{string(key), string(value)})
		return true
	})
	return ms, ok
}

func TestEachMember(t *testing.T) {
	t.Run("well-formed", func(t *testing.T) {
		for _, c := range []struct {
			in   string
			want []member
		}{
			{`{}`, nil},
			{" \t\r\n{ \n} ", nil},
			{`{"a":1}`, []member{{"a", "1"}}},
			{" { \"a\" :\n1 , \"b\":\"x\" ,\"c\":{\"d\":[1,2]},\t\"e\\\"f\":null } ",
				[]member{{"a", "1"}, {"b", `"x"`}, {"c", `{"d":[1,2]}`}, {`e\"f`, "null"}}},
			{`{"":"","\u0061":[],"a":{}}`, []member{{"", `""`}, {`\u0061`, "[]"}, {"a", "{}"}}},
			{`{"a":1,"a":2}`, []member{{"a", "1"}, {"a", "2"}}},
			{`{"s":"}{][,:","n":-0.5E+3,"t":true,"f":false}`, []member{{"s", `"}{][,:"`}, {"n", "-0.5E+3"}, {"t", "true"}, {"f", "false"}}},
		} {
			got, ok := membersOf([]byte(c.in))
			if !ok || !slices.Equal(got, c.want) {
				t.Errorf("eachMember(%s) = %q, %v; want %q, true", c.in, got, ok, c.want)
			}
		}
	})

	t.Run("stops when fn returns false", func(t *testing.T) {
		calls := 0
		ok := eachMember([]byte(`{"a":1,"b":2,"c":`), func(key, value []byte) bool {
			calls++
			return string(key) != "b"
		})
		if !ok || calls != 2 {
			t.Errorf("ok %v after %d calls, want true after 2", ok, calls)
		}
	})

	t.Run("malformed", func(t *testing.T) {
		for _, c := range []struct {
			in   string
			seen int // members yielded before the fault was found
		}{
			{``, 0},
			{`[1]`, 0},
			{`"x"`, 0},
			{`{`, 0},
			{`{a:1}`, 0},
			{`{"a" 1}`, 0},
			{`{"a":}`, 0},
			{`{"a":,"b":1}`, 0},
			{`{"a":1,}`, 1},
			{`{"a":1 "b":2}`, 1},
			{`{"a":1]`, 1},
			{`{"a":1,"b":2,,}`, 2},
			{`{"a"`, 0},
			{`{"a`, 0},
			{`{"a":"x`, 0},
		} {
			got, ok := membersOf([]byte(c.in))
			if ok || len(got) != c.seen {
				t.Errorf("eachMember(%s) yielded %q, %v; want %d members, false", c.in, got, ok, c.seen)
			}
		}
	})

	t.Run("truncated", func(t *testing.T) {
		doc := []byte(`{"model":"m","n":12345,"messages":[{"role":"user","content":"a\"b"}],"ok":true,"s":"x"}`)
		full, _ := membersOf(doc)
		for n := range len(doc) {
			got, ok := membersOf(doc[:n])
			if ok {
				t.Fatalf("eachMember accepted %d of %d bytes", n, len(doc))
			}
			// What was yielded is the start of the whole; only a number or
			// literal cut at the end can be yielded short.
			if len(got) > len(full) {
				t.Fatalf("prefix %d yielded %q", n, got)
			}
			for i, m := range got {
				if m.key != full[i].key || !strings.HasPrefix(full[i].value, m.value) ||
					(m.value != full[i].value && (i != len(got)-1 || strings.ContainsAny(m.value[:1], `"{[`))) {
					t.Fatalf("prefix %d yielded %q, whole %q", n, got, full)
				}
			}
		}
	})
}

func TestFieldsSkim(t *testing.T) {
	names := []string{"model", "messages", "metadata"}
	skim := func(body string) (fields, bool) {
		f := fields{names: names}
		ok := f.skim([]byte(body))
		return f, ok
	}

	t.Run("first duplicate wins", func(t *testing.T) {
		f, ok := skim(`{"model":"a","x":{"model":"nested"},"model":"b","messages":[]}`)
		if !ok || string(f.get("model")) != `"a"` || string(f.get("messages")) != `[]` || f.get("metadata") != nil {
			t.Errorf("ok %v, model %s, messages %s, metadata %s", ok, f.get("model"), f.get("messages"), f.get("metadata"))
		}
	})

	t.Run("stops when every name is found", func(t *testing.T) {
		// Everything after the last wanted member is garbage: a skim that
		// read on would fail.
		f, ok := skim(`{"metadata":{"user_id":"u"},"model":"m","messages":[1], oops`)
		if !ok || string(f.get("metadata")) != `{"user_id":"u"}` || string(f.get("messages")) != `[1]` {
			t.Errorf("ok %v, metadata %s, messages %s", ok, f.get("metadata"), f.get("messages"))
		}
	})

	t.Run("missing and unwanted names", func(t *testing.T) {
		f, ok := skim(`{"model":"m","other":1}`)
		if !ok || f.get("messages") != nil || f.get("other") != nil || f.get("") != nil {
			t.Errorf("ok %v, messages %s, other %s", ok, f.get("messages"), f.get("other"))
		}
	})

	t.Run("keys are matched raw", func(t *testing.T) {
		f, ok := skim(`{"mod\u0065l":"escaped","model":"plain"}`)
		if !ok || string(f.get("model")) != `"plain"` {
			t.Errorf("ok %v, model %s", ok, f.get("model"))
		}
	})

	t.Run("not an object", func(t *testing.T) {
		for _, body := range []string{``, `[]`, `"model"`, `null`, `{"model":}`} {
			if _, ok := skim(body); ok {
				t.Errorf("skim(%s) reported an object", body)
			}
		}
	})

	t.Run("truncated", func(t *testing.T) {
		f, ok := skim(`{"model":"m","messages":[{"role":"user"`)
		if ok || string(f.get("model")) != `"m"` || f.get("messages") != nil {
			t.Errorf("ok %v, model %s, messages %s", ok, f.get("model"), f.get("messages"))
		}
	})

	t.Run("no names", func(t *testing.T) {
		f := fields{}
		if !f.skim([]byte(`{"a":1,`)) {
			t.Errorf("a skim for nothing failed")
		}
	})
}

// scanDocs are varied JSON objects on which eachMember must agree with
// gjson.
var scanDocs = []string{
	`{}`,
	`{"a":1}`,
	" {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : { \"c\" : \"d\" } } ",
	`{"esc":"a\"b\\c\/d\u00e9\ud83d\ude00\n","k\"ey":"v","\\":"\\\\"}`,
	`{"n":-0,"f":1.5e-10,"F":2E+3,"t":true,"x":false,"z":null}`,
	`{"dup":1,"dup":"two","dup":[3]}`,
	`{"nested":{"a":{"b":{"c":[[[{"d":"]}"}]]]}}},"after":"x"}`,
	`{"empty":"","arr":[],"obj":{},"sp":" "}`,
	`{"unicode":"日本語","emoji":"😀","raw":"é"}`,
	`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.593;"}],"metadata":{"user_id":"{\"session_id\":\"s\"}"},"stream":true}`,
	`{"long":"` + strings.Repeat(`ab\"cd\\`, 500) + `","k":1}`,
}

func TestEachMemberMatchesGJSON(t *testing.T) {
	docs := slices.Clone(scanDocs)
	// Add generated documents in every encoding style of the fingerprint
	// tests.
	rng := rand.New(rand.NewPCG(3, 5))
	for i := range 200 {
		doc := encodeJSON(randomObject(rng, 4), equivalentStyles[i%len(equivalentStyles)])
		docs = append(docs, string(doc))
	}
	for _, doc := range docs {
		checkAgainstGJSON(t, []byte(doc))
	}
}

// checkAgainstGJSON checks that eachMember yields for the valid JSON object
// doc exactly the keys and raw values gjson finds, and that a skim finds the
// first of duplicated members.
func checkAgainstGJSON(t *testing.T, doc []byte) {
	t.Helper()
	r := gjson.ParseBytes(doc)
	var want []member
	r.ForEach(func(key, value gjson.Result) bool {
		want = append(want, member{key.Raw[1 : len(key.Raw)-1], value.Raw})
		return true
	})
	got, ok := membersOf(doc)
	if !ok || !slices.Equal(got, want) {
		t.Errorf("eachMember(%.200s) = %q, %v; gjson %q", doc, got, ok, want)
		return
	}

	names := []string{"a", "dup", "model", "messages", ""}
	for _, m := range want {
		if len(names) < maxFields && !slices.Contains(names, m.key) {
			names = append(names, m.key)
		}
	}
	f := fields{names: names}
	if !f.skim(doc) {
		t.Errorf("skim(%.200s) failed", doc)
	}
	for _, name := range names {
		var first []byte
		for _, m := range want {
			if m.key == name {
				first = []byte(m.value)
				break
			}
		}
		if got := f.get(name); !bytes.Equal(got, first) || (got == nil) != (first == nil) {
			t.Errorf("skim(%.200s): %q is %s, want %s", doc, name, got, first)
		}
	}
}

// randomObject returns a random JSON object nested up to depth levels, with
// strings that need escapes and keys that repeat.
func randomObject(rng *rand.Rand, depth int) orderedObject {
	var o orderedObject
	for range rng.IntN(6) {
		o = append(o, orderedMember{randomText(rng, 6), randomValue(rng, depth-1)})
	}
	return o
}

// randomValue returns a random JSON value nested up to depth levels.
func randomValue(rng *rand.Rand, depth int) any {
	n := 6
	if depth <= 0 {
		n = 4
	}
	switch rng.IntN(n) {
	case 0:
		return randomText(rng, 30)
	case 1:
		return rng.IntN(1e6) - 5e5
	case 2:
		return []any{nil, true, false}[rng.IntN(3)]
	case 3:
		return rng.NormFloat64() * 1e3
	case 4:
		var a []any
		for range rng.IntN(5) {
			a = append(a, randomValue(rng, depth-1))
		}
		return a
	default:
		return randomObject(rng, depth)
	}
}

// randomText returns a random string of up to n runes, many of which need
// escaping in JSON.
func randomText(rng *rand.Rand, n int) string {
	alphabet := []rune("ab\"\\/\n\t{}[],: é😀\u2028\x01")
	var sb strings.Builder
	for range rng.IntN(n + 1) {
		sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return sb.String()
}

// offsetIn returns where s starts in data, and false when s is not a slice
// of data.
func offsetIn(data, s []byte) (int, bool) {
	off := cap(data) - cap(s)
	if off < 0 || off+len(s) > len(data) {
		return 0, false
	}
	if len(s) > 0 && &data[off] != &s[0] {
		return 0, false
	}
	return off, true
}

func FuzzSkim(f *testing.F) {
	for _, doc := range scanDocs {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for i := range min(len(data), 64) {
			if skipSpace(data, i) != i {
				continue // skipValue expects no leading whitespace
			}
			if end := skipValue(data, i); end != -1 && (end <= i || end > len(data)) {
				t.Fatalf("skipValue(%q, %d) = %d", data, i, end)
			}
			if data[i] == '"' {
				if end := skipString(data, i); end != -1 && (end < i+2 || end > len(data) || data[end-1] != '"') {
					t.Fatalf("skipString(%q, %d) = %d", data, i, end)
				}
			}
		}

		// Every slice handed out lies inside data, and nested values can be
		// walked in turn.
		inside := func(what string, s []byte) {
			if _, ok := offsetIn(data, s); !ok {
				t.Fatalf("%s %q is not inside %q", what, s, data)
			}
		}
		var walk func(v []byte, depth int)
		walk = func(v []byte, depth int) {
			if depth > 8 {
				return
			}
			eachMember(v, func(key, value []byte) bool {
				inside("key", key)
				inside("value", value)
				walk(value, depth+1)
				return true
			})
		}
		walk(data, 0)

		fl := fields{names: []string{"model", "messages", "a", ""}}
		skimmed := fl.skim(data)
		for i := range fl.names {
			if fl.vals[i] != nil {
				inside("skimmed value", fl.vals[i])
			}
		}

		if !gjson.ValidBytes(data) || !gjson.ParseBytes(data).IsObject() {
			return
		}
		if !skimmed {
			t.Fatalf("skim rejected the valid object %q", data)
		}
		checkAgainstGJSON(t, data)
	})
}

// refSkipString is the obvious byte-at-a-time skipString: a backslash
// escapes the byte after it, and the first other quote ends the string.
func refSkipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

func TestByteMask(t *testing.T) {
	// first returns the index byteMask reports for c in w, or 8.
	first := func(w [8]byte, c byte) int {
		m := byteMask(binary.LittleEndian.Uint64(w[:]), c)
		if m == 0 {
			return 8
		}
		return bits.TrailingZeros64(m) >> 3
	}
	// Bytes one bit away from '"' and '\\', and '#' ('"'+1), which the
	// borrow of the zero-byte test can flag when it follows a match.
	fill := []byte{'a', '#', ']', 0x00, 0x01, 0x80, 0xa2, 0xdc, 0xff, '"' ^ 0x40}
	for _, c := range []byte{'"', '\\'} {
		for _, f := range fill {
			var w [8]byte
			for k := range w {
				w[k] = f
			}
			if got := first(w, c); got != 8 {
				t.Errorf("byteMask(%q, %q) found it at %d", w, c, got)
			}
			// c at one offset, or at two: the first one is found, also
			// when the byte after it is c+1.
			for at := range 8 {
				for second := at; second < 8; second++ {
					for k := range w {
						w[k] = f
					}
					if at+1 < 8 {
						w[at+1] = c + 1
					}
					w[at], w[second] = c, c
					if got := first(w, c); got != at {
						t.Errorf("byteMask(%q, %q) found it at %d, want %d", w, c, got, at)
					}
				}
			}
		}
	}
}

func TestSkipStringEscapeRuns(t *testing.T) {
	// A quote after a run of 0 to 5 backslashes, at every offset from the
	// opening quote through several words, past the point where the word
	// scan hands over to bytes.IndexByte, and with the opening quote at
	// every offset within a word. Runs of odd length escape the quote, so
	// the string goes on to a closing quote further on.
	for run := range 6 {
		for at := 0; at < swarSpan+24; at++ {
			for start := range 9 {
				b := bytes.Repeat([]byte{'x'}, start)
				b = append(b, '"')
				b = append(b, bytes.Repeat([]byte{'a'}, at)...)
				b = append(b, bytes.Repeat([]byte{'\\'}, run)...)
				b = append(b, `"#b"c`...)
				got, want := skipString(b, start), refSkipString(b, start)
				if got != want {
					t.Fatalf("skipString(%q, %d) = %d, want %d", b, start, got, want)
				}
				// Cut before the closing quote: not terminated.
				cut := b[:len(b)-3]
				if run%2 == 0 {
					cut = b[:len(b)-5]
				}
				if got := skipString(cut, start); got != -1 {
					t.Fatalf("skipString(%q, %d) = %d, want -1", cut, start, got)
				}
			}
		}
	}
}

func TestSkipStringMatchesReference(t *testing.T) {
	// Random strings dense in quotes and backslashes, long enough to cross
	// many words and the hand-over to bytes.IndexByte, read from every
	// quote in them.
	rng := rand.New(rand.NewPCG(13, 17))
	alphabet := []byte{'a', 'a', 'a', '"', '\\', '\\', '#', ']', 0xa2, 0xdc}
	for range 2000 {
		b := make([]byte, rng.IntN(swarSpan*3))
		for k := range b {
			b[k] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(2) == 0 {
			// Long plain runs, so that the scan reaches IndexByte.
			for k := range b {
				if rng.IntN(64) != 0 && b[k] != '"' {
					b[k] = 'a'
				}
			}
		}
		for i, c := range b {
			if c != '"' {
				continue
			}
			if got, want := skipString(b, i), refSkipString(b, i); got != want {
				t.Fatalf("skipString(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
	}
}

func TestUnescapeIntoWords(t *testing.T) {
	// unescapeInto copies plain bytes and decodes short escapes a word at a
	// time, and hands long runs to bytes.IndexByte. Escapes at every offset
	// of a word, before and after a run longer than that, decoded through
	// buffers of sizes around a word, give what appendUnescaped gives; so
	// does a lone backslash at the end.
	escapes := []string{`\n`, `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, `\x`, `\u12`, `\`}
	for _, e := range escapes {
		for before := range swarSpan + 20 {
			for after := range 12 {
				src := []byte(strings.Repeat("a", before) + e + strings.Repeat("b", after) + e)
				want := string(appendUnescaped(nil, src))
				for _, size := range []int{4, 7, 8, 9, 15, 16, 17, 24, 1024} {
					var got []byte
					buf := make([]byte, size)
					for c := src; len(c) > 0; {
						n, used := unescapeInto(buf, c)
						if used == 0 {
							t.Fatalf("unescapeInto made no progress on %q with %d bytes", c, size)
						}
						got = append(got, buf[:n]...)
						c = c[used:]
					}
					if string(got) != want {
						t.Fatalf("unescapeInto(%q) through %d bytes = %q, want %q", src, size, got, want)
					}
				}
			}
		}
	}
}
