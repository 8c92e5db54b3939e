// Package scriptedresponses is a scripted stand-in for the OpenAI Responses
// API as the Codex CLI calls it: POST /v1/responses, streamed as server-sent
// events (response.created, response.output_item.done for each output item,
// response.completed). Each conversation request gets the next step of the
// script: a set of tool calls (exec_command function calls, apply_patch
// custom tool calls) or, after the last step, a final assistant message.
package scriptedresponses

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Call is one tool call the model makes.
type Call struct {
	// Shell is the command of an exec_command function call.
	Shell string
	// Patch is the input of an apply_patch custom tool call.
	Patch string
}

// Turn is what the model does after a prompt containing Marker: Steps[i] are
// the calls of its i-th reply; after the last one it answers FinalText.
type Turn struct {
	Marker    string
	Steps     [][]Call
	FinalText string
	// OnStep, when set, runs before the reply of step i (len(Steps) for
	// the final text) is sent, with the server locked: the previous
	// step's calls have all returned.
	OnStep func(step int)
}

// Request is one recorded request.
type Request struct {
	Path string
	Body json.RawMessage
}

// Server is a running scripted Responses API on 127.0.0.1.
type Server struct {
	URL string // base URL including /v1

	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	turns []Turn
	reqs  []Request
	step  map[string]int // marker -> next step
	seq   int
}

// Start serves the script on a free loopback port.
func Start(turns ...Turn) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String() + "/v1", ln: ln, turns: turns, step: map[string]int{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Body: body})
	s.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.Error(w, `{"error":{"message":"not scripted"}}`, http.StatusNotFound)
		return
	}
	items := s.reply(body)
	w.Header().Set("Content-Type", "text/event-stream")
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("resp_%d", s.seq)
	s.mu.Unlock()
	send := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	send("response.created", map[string]any{"response": map[string]any{"id": id}})
	for _, it := range items {
		send("response.output_item.done", map[string]any{"item": it})
	}
	send("response.completed", map[string]any{"response": map[string]any{"id": id, "usage": map[string]any{
		"input_tokens": 100, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 110}}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// reply picks the turn whose marker is in the request's last user message
// and returns the output items of its next step.
func (s *Server) reply(body []byte) []map[string]any {
	var req struct {
		Input []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	lastUser := ""
	for _, in := range req.Input {
		if in.Type == "message" && in.Role == "user" {
			lastUser = string(in.Content)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.turns {
		if t.Marker == "" || !strings.Contains(lastUser, t.Marker) {
			continue
		}
		n := s.step[t.Marker]
		s.step[t.Marker] = n + 1
		if t.OnStep != nil {
			t.OnStep(min(n, len(t.Steps)))
		}
		if n < len(t.Steps) {
			var out []map[string]any
			for i, c := range t.Steps[n] {
				callID := fmt.Sprintf("call_%s_%d_%d", sanitize(t.Marker), n, i)
				if c.Patch != "" {
					out = append(out, map[string]any{"type": "custom_tool_call", "id": "ctc_" + callID, "status": "completed",
						"call_id": callID, "name": "apply_patch", "input": c.Patch})
					continue
				}
				args, _ := json.Marshal(map[string]any{"cmd": c.Shell})
				out = append(out, map[string]any{"type": "function_call", "id": "fc_" + callID, "status": "completed",
					"call_id": callID, "name": "exec_command", "arguments": string(args)})
			}
			return out
		}
		return []map[string]any{message(t.FinalText)}
	}
	return []map[string]any{message("nothing scripted for this prompt")}
}

func message(text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "id": "msg_x", "status": "completed",
		"content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}}}}
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}
