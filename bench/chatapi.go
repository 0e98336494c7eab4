package main

import "strconv"

// The subset of the OpenAI chat completions API that agents send and the
// emulated engines answer, with the usage block vLLM and SGLang return
// (prompt_tokens_details.cached_tokens is their prefix-cache hit).
type (
	chatRequest struct {
		Model     string        `json:"model"`
		MaxTokens int           `json:"max_tokens"`
		Messages  []chatMessage `json:"messages"`
		Stream    bool          `json:"stream"`
	}

	chatMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}

	chatResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   chatUsage    `json:"usage"`
	}

	chatChoice struct {
		Index        int         `json:"index"`
		Message      chatMessage `json:"message"`
		FinishReason string      `json:"finish_reason"`
	}

	// chatChunk is one event of a streamed answer; the last one has no
	// choices and the usage.
	chatChunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
		Usage   *chatUsage    `json:"usage,omitempty"`
	}

	chunkChoice struct {
		Index        int       `json:"index"`
		Delta        chatDelta `json:"delta"`
		FinishReason string    `json:"finish_reason,omitempty"`
	}

	chatDelta struct {
		Role    string `json:"role,omitempty"`
		Content string `json:"content,omitempty"`
	}

	chatUsage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

// appendJSONString appends s as a JSON string. Request bodies are built by
// appending, turn after turn, instead of re-encoding the whole history.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		default:
			b = append(b, `\u00`...)
			b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendMessage appends one chat message object.
func appendMessage(b []byte, role, content string) []byte {
	b = append(b, `{"role":`...)
	b = strconv.AppendQuote(b, role) // roles are plain ASCII
	b = append(b, `,"content":`...)
	b = appendJSONString(b, content)
	return append(b, '}')
}
