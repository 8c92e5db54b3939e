package scriptedapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, s *Server, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(s.URL+"/v1/messages", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// events parses an SSE stream into its event names and data objects.
func events(t *testing.T, resp *http.Response) ([]string, []map[string]any) {
	t.Helper()
	defer resp.Body.Close()
	var names []string
	var datas []map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(d), &m); err != nil {
				t.Fatalf("bad data line %q: %v", d, err)
			}
			datas = append(datas, m)
		}
	}
	return names, datas
}

func TestStreamsScenarioStepByStep(t *testing.T) {
	s, err := Start(Turn{Marker: "M1", Steps: [][]ToolCall{
		{{Name: "Bash", Input: map[string]any{"command": "ls"}}, {Name: "Read", Input: map[string]any{"file_path": "/x"}}},
	}, FinalText: "fin"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := `{"model":"m","stream":true,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"do M1"}]}`
	names, datas := events(t, post(t, s, req))
	want := []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v", names)
	}
	for i, d := range datas {
		if d["type"] != names[i] {
			t.Fatalf("data %d type %v for event %s", i, d["type"], names[i])
		}
	}
	if datas[14]["delta"].(map[string]any)["stop_reason"] != "tool_use" {
		t.Fatalf("stop reason %v", datas[14])
	}
	// The partial JSON deltas of a tool_use block join to its input.
	joined := datas[7]["delta"].(map[string]any)["partial_json"].(string) + datas[8]["delta"].(map[string]any)["partial_json"].(string)
	if joined != `{"command":"ls"}` {
		t.Fatalf("tool input %q", joined)
	}
	// After one assistant reply the turn ends with the final text.
	req2 := `{"model":"m","stream":false,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":[{"type":"text","text":"do M1"}]},{"role":"assistant","content":[]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"ok"}]}]}`
	resp := post(t, s, req2)
	var msg struct {
		StopReason string `json:"stop_reason"`
		Content    []struct{ Text string }
	}
	json.NewDecoder(resp.Body).Decode(&msg)
	if msg.StopReason != "end_turn" || msg.Content[0].Text != "fin" {
		t.Fatalf("final message %+v", msg)
	}
	if reqs := s.Requests(); len(reqs) != 2 || !reqs[0].Main || reqs[0].Stream != true {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestSideQueryGetsText(t *testing.T) {
	s, _ := Start()
	defer s.Close()
	names, _ := events(t, post(t, s, `{"model":"m","stream":true,"messages":[{"role":"user","content":"title?"}]}`))
	if len(names) == 0 || names[len(names)-1] != "message_stop" {
		t.Fatalf("events %v", names)
	}
	if s.Requests()[0].Main {
		t.Fatal("a request without tools counted as a conversation request")
	}
}
