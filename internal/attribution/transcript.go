package attribution

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
)

// callDetail is what a session's transcript says of one tool call.
type callDetail struct {
	agent   string
	command string // a shell call's command
	prompt  int    // the sequence number of the prompt whose turn ran it
	model   string
}

// maxTranscriptLine bounds one transcript line read.
const maxTranscriptLine = 64 << 20

// detail returns what the session's transcript says of the tool call
// toolUseID (zero when the transcript or the call is not found).
func (r *Repo) detail(session, toolUseID string) callDetail {
	calls, ok := r.details[session]
	if !ok {
		calls = readTranscript(r.transcriptPath(session))
		r.details[session] = calls
	}
	return calls[toolUseID]
}

type transcriptLine struct {
	Type        string `json:"type"`
	IsMeta      bool   `json:"isMeta"`
	IsSidechain bool   `json:"isSidechain"`
	// IsCompactSummary marks the summary Claude Code writes as a user
	// message when it compacts the conversation: not a prompt.
	IsCompactSummary bool `json:"isCompactSummary"`
	Message          struct {
		Model   string          `json:"model"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

type transcriptBlock struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Name  string `json:"name"`
	Input struct {
		Command string `json:"command"`
	} `json:"input"`
}

// readTranscript reads a Claude Code transcript (JSONL): every user line
// that is a prompt (not a tool result, not meta, not a slash command's
// output, not a subagent's) counts one prompt; every tool_use block is
// recorded with the prompt count, the model of its message and, for Bash,
// its command.
func readTranscript(path string) map[string]callDetail {
	out := map[string]callDetail{}
	if path == "" {
		return out
	}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), maxTranscriptLine)
	prompt := 0
	for sc.Scan() {
		var l transcriptLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.IsSidechain {
			continue
		}
		switch l.Type {
		case "user":
			if !l.IsMeta && !l.IsCompactSummary && isPrompt(l.Message.Content) {
				prompt++
			}
		case "assistant":
			var blocks []transcriptBlock
			if json.Unmarshal(l.Message.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				if b.Type != "tool_use" || b.ID == "" {
					continue
				}
				d := callDetail{agent: "claude-code", prompt: prompt, model: l.Message.Model}
				if b.Name == "Bash" {
					d.command = b.Input.Command
				}
				out[b.ID] = d
			}
		}
	}
	return out
}

// isPrompt reports whether a user message's content is a prompt the user
// typed: text, not tool results, not a slash command's echo, not the
// marker of an interrupted request.
func isPrompt(content json.RawMessage) bool {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return typed(s)
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &blocks) != nil || len(blocks) == 0 {
		return false
	}
	for _, b := range blocks {
		if b.Type == "tool_result" || (b.Type == "text" && !typed(b.Text)) {
			return false
		}
	}
	return true
}

// typed reports whether a user message's text is one the user typed.
func typed(s string) bool {
	for _, p := range []string{"<command-", "<local-command-", "[Request interrupted by user"} {
		if strings.HasPrefix(s, p) {
			return false
		}
	}
	return true
}
