// Package scriptedgemini is a scripted stand-in for the Gemini API as the
// Gemini CLI calls it: POST /v1beta/models/{model}:streamGenerateContent
// (server-sent events), :generateContent (including the model-router
// request, answered with a JSON complexity score) and :countTokens. Each
// conversation request gets the next step of the script: function calls
// (write_file, replace, run_shell_command) or, after the last step, a final
// text answer.
package scriptedgemini

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
)

// Call is one function call the model makes.
type Call struct {
	Name string
	Args map[string]any
}

// Turn is what the model does after a prompt containing Marker.
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
	// Main is true for conversation requests (with tools).
	Main bool
}

// Server is a running scripted Gemini API on 127.0.0.1.
type Server struct {
	URL string

	ln    net.Listener
	srv   *http.Server
	mu    sync.Mutex
	turns []Turn
	reqs  []Request
	step  map[string]int
}

// Start serves the script on a free loopback port.
func Start(turns ...Turn) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln, turns: turns, step: map[string]int{}}
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

type content struct {
	Role  string            `json:"role"`
	Parts []json.RawMessage `json:"parts"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var req struct {
		Contents []content      `json:"contents"`
		Tools    []any          `json:"tools"`
		Config   map[string]any `json:"generationConfig"`
	}
	_ = json.Unmarshal(body, &req)
	main := len(req.Tools) > 0
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Body: body, Main: main})
	s.mu.Unlock()
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": 10})
		return
	case strings.Contains(string(body), "complexity_score"):
		// The model-router request: a JSON answer with a complexity score.
		text := `{"complexity_reasoning":"scripted","complexity_score":50}`
		resp := candidate([]map[string]any{{"text": text}})
		if strings.HasSuffix(path, ":streamGenerateContent") {
			sse(w, resp)
			return
		}
		writeJSON(w, resp)
		return
	}
	parts := s.reply(req.Contents, main)
	resp := candidate(parts)
	if strings.HasSuffix(path, ":streamGenerateContent") {
		sse(w, resp)
		return
	}
	writeJSON(w, resp)
}

func candidate(parts []map[string]any) map[string]any {
	return map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
		"modelVersion":  "scripted",
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func sse(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "text/event-stream")
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// reply finds the turn whose marker is in the newest user text and returns
// the parts of its next step.
func (s *Server) reply(contents []content, main bool) []map[string]any {
	lastUser := ""
	for _, c := range contents {
		if c.Role != "user" {
			continue
		}
		for _, p := range c.Parts {
			var t struct {
				Text *string `json:"text"`
			}
			if json.Unmarshal(p, &t) == nil && t.Text != nil {
				lastUser = *t.Text
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !main {
		return []map[string]any{{"text": "scripted side answer"}}
	}
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
			for _, c := range t.Steps[n] {
				out = append(out, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": c.Args}})
			}
			return out
		}
		return []map[string]any{{"text": t.FinalText}}
	}
	return []map[string]any{{"text": "nothing scripted for this prompt"}}
}
