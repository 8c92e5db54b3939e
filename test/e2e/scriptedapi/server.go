// Package scriptedapi is a scripted stand-in for the Anthropic Messages API.
// It streams server-sent events exactly as the API does (message_start,
// content_block_start/delta/stop for text and tool_use blocks,
// message_delta, message_stop) and decides each reply from a scenario: which
// tool calls each turn makes, step by step.
package scriptedapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// ToolCall is one tool_use block the model emits.
type ToolCall struct {
	Name  string
	Input map[string]any
}

// Turn is what the model does after a user prompt that contains Marker:
// Steps[i] is the set of tool calls of its i-th reply (several calls in one
// reply run in parallel); after the last step it answers FinalText and ends
// the turn.
type Turn struct {
	Marker    string
	Steps     [][]ToolCall
	FinalText string
	// OnStep, when set, runs before the reply of step i (len(Steps) for
	// the final text) is sent: the model is "thinking", the previous
	// step's tool calls have all returned. It runs with the server locked.
	OnStep func(step int)
}

// Request is a recorded Messages API request.
type Request struct {
	Path   string
	Body   json.RawMessage
	Stream bool
	// Main is true for conversation requests (with tools), false for side
	// queries the CLI makes (titles, summaries, checks).
	Main bool
}

// Server is a running scripted API on 127.0.0.1.
type Server struct {
	URL string

	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	turns []Turn
	reqs  []Request
	seq   int
	usage Usage
}

// Usage is the token usage every reply reports: InputTokens, cache counts
// and a first OutputTokens in message_start, the final OutputTokens in
// message_delta, as the API streams them.
type Usage struct {
	InputTokens, OutputTokens, CacheCreationInputTokens, CacheReadInputTokens int
}

// DefaultUsage is what a reply reports unless SetUsage changed it.
var DefaultUsage = Usage{InputTokens: 120, OutputTokens: 20}

// SetUsage changes the usage that later replies report.
func (s *Server) SetUsage(u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = u
}

// Start serves the scripted API on a free loopback port.
func Start(turns ...Turn) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln, turns: turns, usage: DefaultUsage}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens": 100}`)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, Request{Path: r.Method + " " + r.URL.Path})
		s.mu.Unlock()
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not scripted"}}`, http.StatusNotFound)
	})
	s.srv = &http.Server{Handler: mux}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// SetTurns replaces the scenario.
func (s *Server) SetTurns(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = turns
}

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Content json.RawMessage `json:"content"`
}

type messagesRequest struct {
	Model    string          `json:"model"`
	Stream   bool            `json:"stream"`
	Messages []message       `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

// blocks returns a message's content as blocks (a string is one text block).
func blocks(m message) []block {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

// MessageText concatenates every text and tool_result content of a message.
func messageText(m message) string {
	var sb strings.Builder
	for _, b := range blocks(m) {
		sb.WriteString(b.Text)
		sb.Write(b.Content)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	main := len(bytes.TrimSpace(req.Tools)) > 2
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Body: body, Stream: req.Stream, Main: main})
	s.seq++
	id := fmt.Sprintf("msg_scripted_%04d", s.seq)
	var out []outBlock
	stop := "end_turn"
	if main {
		out, stop = s.reply(req.Messages)
	} else {
		out = []outBlock{{Type: "text", Text: "scripted side answer"}}
	}
	u := s.usage
	s.mu.Unlock()
	model := req.Model
	if model == "" {
		model = "claude-scripted"
	}
	if !req.Stream {
		writeJSONMessage(w, id, model, out, stop, u)
		return
	}
	writeStream(w, id, model, out, stop, u)
}

type outBlock struct {
	Type  string
	Text  string
	ID    string
	Name  string
	Input map[string]any
}

// reply finds the turn whose marker is in the latest marked user prompt and
// returns the next step's blocks. Callers hold s.mu.
func (s *Server) reply(msgs []message) ([]outBlock, string) {
	turn, start := -1, -1
	for i := len(msgs) - 1; i >= 0 && turn < 0; i-- {
		if msgs[i].Role != "user" {
			continue
		}
		text := messageText(msgs[i])
		for t := range s.turns {
			if strings.Contains(text, s.turns[t].Marker) {
				turn, start = t, i
				break
			}
		}
	}
	if turn < 0 {
		return []outBlock{{Type: "text", Text: "no scripted turn matches this conversation"}}, "end_turn"
	}
	step := 0
	for _, m := range msgs[start+1:] {
		if m.Role == "assistant" {
			step++
		}
	}
	t := s.turns[turn]
	if t.OnStep != nil {
		t.OnStep(min(step, len(t.Steps)))
	}
	if step >= len(t.Steps) {
		text := t.FinalText
		if text == "" {
			text = "Done."
		}
		return []outBlock{{Type: "text", Text: text}}, "end_turn"
	}
	out := []outBlock{{Type: "text", Text: fmt.Sprintf("Step %d of %s.", step+1, t.Marker)}}
	for i, c := range t.Steps[step] {
		out = append(out, outBlock{Type: "tool_use", ID: fmt.Sprintf("toolu_%s_%d_%d", sanitize(t.Marker), step, i), Name: c.Name, Input: c.Input})
	}
	return out, "tool_use"
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

func usage(u Usage, out int) map[string]any {
	return map[string]any{"input_tokens": u.InputTokens, "output_tokens": out,
		"cache_creation_input_tokens": u.CacheCreationInputTokens, "cache_read_input_tokens": u.CacheReadInputTokens}
}

func writeJSONMessage(w http.ResponseWriter, id, model string, out []outBlock, stop string, u Usage) {
	content := make([]map[string]any, 0, len(out))
	for _, b := range out {
		if b.Type == "text" {
			content = append(content, map[string]any{"type": "text", "text": b.Text})
		} else {
			content = append(content, map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "usage": usage(u, u.OutputTokens),
	})
}

func writeStream(w http.ResponseWriter, id, model string, out []outBlock, stop string, u Usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("request-id", "req_"+id)
	fl, _ := w.(http.Flusher)
	send := func(ev string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev, b)
		if fl != nil {
			fl.Flush()
		}
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage(u, 1),
	}})
	send("ping", map[string]any{"type": "ping"})
	for i, b := range out {
		if b.Type == "text" {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			// Stream the text in two deltas, as the API splits text.
			half := len(b.Text) / 2
			for _, part := range []string{b.Text[:half], b.Text[half:]} {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": part}})
			}
		} else {
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			in, _ := json.Marshal(b.Input)
			half := len(in) / 2
			for _, part := range [][]byte{in[:half], in[half:]} {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(part)}})
			}
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": u.OutputTokens}})
	send("message_stop", map[string]any{"type": "message_stop"})
}
