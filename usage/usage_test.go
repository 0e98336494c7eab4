package usage

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// sse joins events into an event stream.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e)
		b.WriteString("\n\n")
	}
	return b.String()
}

var longText = strings.Repeat("lorem ipsum \\\"usage\\\": {\\\"prompt_tokens\\\": 1} ", 1500) // 70 KB, with a decoy in a string

var answers = []struct {
	name, contentType, body string
	want                    Usage
}{
	{"openai chat json", "application/json",
		`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + longText + `"}}],` +
			`"usage":{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,"prompt_tokens_details":{"cached_tokens":1920}}}`,
		Usage{Prompt: 2006, Cached: 1920, Found: true}},
	{"openai chat stream", "text/event-stream; charset=utf-8", sse(
		`data: {"id":"c","choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}`,
		`data: {"id":"c","choices":[{"delta":{"content":"Hi"}}],"usage":null}`,
		`data: {"id":"c","choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}`,
		`data: {"id":"c","choices":[],"usage":{"prompt_tokens":512,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":256}}}`,
		`data: [DONE]`),
		Usage{Prompt: 512, Cached: 256, Found: true}},
	{"vllm stream without cache details", "text/event-stream", sse(
		`data: {"choices":[{"delta":{"content":"x"}}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":40,"total_tokens":41,"completion_tokens":1}}`,
		`data: [DONE]`),
		Usage{Prompt: 40, Found: true}},
	{"responses json", "application/json",
		`{"id":"resp_abc123","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"` + longText + `"}]}],` +
			`"usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2816},"output_tokens":10,"total_tokens":3010}}`,
		Usage{Prompt: 3000, Cached: 2816, Found: true, ResponseID: "resp_abc123"}},
	{"responses stream", "text/event-stream", sse(
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_s1\",\"status\":\"in_progress\",\"usage\":null}}",
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":9,\"response\":{\"id\":\"resp_s1\",\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\""+longText+"\"}]}],"+
			"\"usage\":{\"input_tokens\":100,\"input_tokens_details\":{\"cached_tokens\":64},\"output_tokens\":5}}}"),
		Usage{Prompt: 100, Cached: 64, Found: true, ResponseID: "resp_s1"}},
	{"anthropic json", "application/json",
		`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"cache_creation_input_tokens":200,"cache_read_input_tokens":4000,"output_tokens":50}}`,
		Usage{Prompt: 4212, Cached: 4000, Found: true}},
	{"anthropic stream", "text/event-stream", sse(
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":7,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":9000,\"output_tokens\":1}}}",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}"),
		Usage{Prompt: 9007, Cached: 9000, Found: true}},
	{"gemini json", "application/json; charset=UTF-8",
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":800,"candidatesTokenCount":2,"cachedContentTokenCount":512}}`,
		Usage{Prompt: 800, Cached: 512, Found: true}},
	{"gemini stream", "text/event-stream", "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}],\"usageMetadata\":{\"promptTokenCount\":90}}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":90,\"cachedContentTokenCount\":64,\"candidatesTokenCount\":2}}\r\n\r\n",
		Usage{Prompt: 90, Cached: 64, Found: true}},
}

func TestReaderWireFormats(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, a := range answers {
		for _, split := range []string{"whole", "bytes", "random"} {
			t.Run(a.name+"/"+split, func(t *testing.T) {
				r := NewReader(a.contentType, "")
				switch split {
				case "whole":
					r.Write([]byte(a.body))
				case "bytes":
					for i := range len(a.body) {
						r.Write([]byte{a.body[i]})
					}
				default:
					for b := a.body; len(b) > 0; {
						n := min(len(b), 1+rng.IntN(5000))
						r.Write([]byte(b[:n]))
						b = b[n:]
					}
				}
				got, outcome := r.Result()
				if got != a.want || outcome != Read {
					t.Fatalf("got %+v (%s), want %+v", got, outcome, a.want)
				}
			})
		}
	}
}

func TestReaderOutcomes(t *testing.T) {
	for _, tc := range []struct {
		contentType, encoding, body string
		want                        Outcome
	}{
		{"application/json", "gzip", `{"usage":{"prompt_tokens":1}}`, Compressed},
		{"text/event-stream", "br", "data: {}\n\n", Compressed},
		{"text/plain", "", `{"usage":{"prompt_tokens":1}}`, Unsupported},
		{"", "", `{"usage":{"prompt_tokens":1}}`, Unsupported},
		{"application/json", "", `{"error":{"message":"no"}}`, NoUsage},
		{"application/json", "identity", `{"usage":{"prompt_tokens":1}}`, Read},
		{"text/event-stream", "", "data: {\"usage\":null}\n\ndata: [DONE]\n\n", NoUsage},
		{"application/json", "", `{"usage":"lots"}`, NoUsage},
	} {
		r := NewReader(tc.contentType, tc.encoding)
		r.Write([]byte(tc.body))
		if _, got := r.Result(); got != tc.want {
			t.Errorf("%s %s %q: %s, want %s", tc.contentType, tc.encoding, tc.body, got, tc.want)
		}
	}
}

func TestReaderBoundedMemory(t *testing.T) {
	// A stream of 100 MB in one line keeps what fits the head and the
	// tail, and still finds the usage at its end.
	r := NewReader("application/json", "")
	r.Write([]byte(`{"choices":[{"message":{"content":"`))
	chunk := []byte(strings.Repeat("x", 1<<20))
	for range 100 {
		r.Write(chunk)
	}
	r.Write([]byte(`"}}],"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":3}}}`))
	if got, _ := r.Result(); got.Prompt != 7 || got.Cached != 3 {
		t.Fatalf("got %+v", got)
	}
	if c := cap(r.doc); c > headSize+tailSize {
		t.Fatalf("the reader grew a buffer of %d bytes", c)
	}
}

func BenchmarkReaderStream200Events(b *testing.B) {
	var events []string
	for i := range 200 {
		events = append(events, fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token %d "}}],"usage":null}`, i))
	}
	events = append(events, `data: {"choices":[],"usage":{"prompt_tokens":512,"prompt_tokens_details":{"cached_tokens":256}}}`, "data: [DONE]")
	var chunks [][]byte
	for _, e := range events {
		chunks = append(chunks, []byte(e+"\n\n"))
	}
	r := NewReader("text/event-stream", "")
	b.ReportAllocs()
	for b.Loop() {
		r.Reset("text/event-stream", "")
		for _, c := range chunks {
			r.Write(c)
		}
		if u, _ := r.Result(); u.Prompt != 512 {
			b.Fatal(u)
		}
	}
}
