package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
)

// hostAgent is one agent host whose capture hook the benchmark runs: the
// installed command line after the executable, the host's capture events
// (every kind, in session order) and its payloads.
type hostAgent struct {
	name    string
	args    []string
	kinds   []string
	payload func(ev, cwd, session, scratch string) func(int) []byte
}

// agentsFor returns the hosts of the -agents flag; claudeKinds are the
// Claude Code events of -kinds.
func agentsFor(list string, claudeKinds []string) ([]hostAgent, error) {
	var out []hostAgent
	for _, a := range strings.Split(list, ",") {
		switch a {
		case "claude":
			out = append(out, hostAgent{name: "claude-code", args: []string{"change-capture", "hook-claude"}, kinds: claudeKinds,
				payload: func(ev, cwd, session, _ string) func(int) []byte { return payload(ev, cwd, session) }})
		case "codex":
			out = append(out, hostAgent{name: "codex", args: []string{"change-capture", "hook-codex"},
				kinds:   []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SessionEnd"},
				payload: codexPayload})
		case "gemini":
			out = append(out, hostAgent{name: "gemini", args: []string{"change-capture", "hook-gemini"},
				kinds:   []string{"SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd"},
				payload: geminiPayload})
		default:
			return nil, fmt.Errorf("unknown agent %q: claude, codex or gemini", a)
		}
	}
	return out, nil
}

// changelogEntries turns each host's capture entry into its changelog
// entry (-changelog): the adapter's changelog subcommand on the capture
// events the changelog takes too, in session order.
func changelogEntries(hosts []hostAgent) ([]hostAgent, error) {
	for i, h := range hosts {
		a, err := adapter.For(h.name)
		if err != nil {
			return nil, err
		}
		h.args = strings.Fields(a.ChangelogSubcommand())
		h.kinds = slices.DeleteFunc(slices.Clone(h.kinds), func(k string) bool { return !slices.Contains(a.ChangelogEvents(), k) })
		hosts[i] = h
	}
	return hosts, nil
}

// codexPayload is a Codex CLI hook payload of kind ev (as Codex 0.169
// sends them, /work/shared/agents.md) for iteration i: each iteration is a
// new session and a new tool call. A PostToolUse's session has a rollout
// under scratch holding the call's completion, which the hook reads for
// the exit code (the payload has none), as it does in a real session.
func codexPayload(ev, cwd, session, scratch string) func(int) []byte {
	return func(i int) []byte {
		sid := fmt.Sprintf("%s-%06d", session, i)
		call := fmt.Sprintf("call_%s_%06d", strings.ReplaceAll(session, "-", "_"), i)
		rollout := filepath.Join(scratch, "sessions", "2026", "12", "02", "rollout-2026-12-02T10-00-00-"+sid+".jsonl")
		extra := ""
		switch ev {
		case "SessionStart":
			extra = `,"source":"startup"`
		case "UserPromptSubmit":
			extra = `,"turn_id":"turn-1","prompt":"please fix the failing test in parser.go"`
		case "PreToolUse":
			extra = `,"turn_id":"turn-1","tool_name":"Bash","tool_use_id":"` + call + `","tool_input":{"command":"go test ./..."}`
		case "PostToolUse":
			extra = `,"turn_id":"turn-1","tool_name":"Bash","tool_use_id":"` + call + `","tool_input":{"command":"go test ./..."},"tool_response":"ok  \tparser\t0.01s\n"`
			writeRollout(rollout, sid, call)
		case "Stop":
			extra = `,"turn_id":"turn-1","stop_hook_active":false,"last_assistant_message":"fixed"`
		case "SessionEnd":
			extra = `,"reason":"exit"`
		}
		return []byte(`{"session_id":"` + sid + `","transcript_path":"` + rollout + `","cwd":"` + cwd + `","hook_event_name":"` + ev + `","model":"gpt-5-codex","permission_mode":"bypassPermissions"` + extra + `}`)
	}
}

// writeRollout writes a small rollout of session sid whose last call
// (call) completed with exit code 0.
func writeRollout(path, sid, call string) {
	lines := []string{
		`{"type":"session_meta","payload":{"session_id":"` + sid + `","id":"` + sid + `"}}`,
		`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"please fix the failing test"}]}}`,
		`{"type":"response_item","payload":{"type":"function_call","call_id":"` + call + `","name":"exec_command","arguments":"{\"cmd\":\"go test ./...\"}"}}`,
		`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"` + call + `","status":"completed","exit_code":0}}}`,
		`{"type":"response_item","payload":{"type":"function_call_output","call_id":"` + call + `","output":"Process exited with code 0\nOutput:\nok\n"}}`,
	}
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// geminiPayload is a Gemini CLI hook payload of kind ev (as Gemini CLI
// 0.61 sends them) for iteration i, each iteration a new session.
func geminiPayload(ev, cwd, session, scratch string) func(int) []byte {
	return func(i int) []byte {
		sid := fmt.Sprintf("%s-%06d", session, i)
		transcript := filepath.Join(scratch, "gemini-chats", "session-2026-12-02T10-00-"+sid+".jsonl")
		extra := ""
		switch ev {
		case "SessionStart":
			extra = `,"source":"startup"`
		case "BeforeAgent":
			extra = `,"prompt":"please fix the failing test in parser.go"`
		case "BeforeTool":
			extra = `,"tool_name":"run_shell_command","tool_input":{"command":"go test ./...","description":"run tests"}`
		case "AfterTool":
			extra = `,"tool_name":"run_shell_command","tool_input":{"command":"go test ./...","description":"run tests"},"tool_response":{"llmContent":"Command: go test ./...\nOutput: ok\nExit Code: 0","returnDisplay":"ok"}`
		case "AfterAgent":
			extra = `,"prompt":"please fix the failing test in parser.go","prompt_response":"fixed"`
		case "SessionEnd":
			extra = `,"reason":"exit"`
		}
		return []byte(`{"session_id":"` + sid + `","transcript_path":"` + transcript + `","cwd":"` + cwd + `","hook_event_name":"` + ev + `","timestamp":"2026-12-02T10:00:00.000Z"` + extra + `}`)
	}
}

// shellQuote quotes s for sh as hookfile writes an installed command.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// viaShell is argv started as the host starts a hook: `sh -c COMMAND`.
func viaShell(argv []string) []string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return []string{"/bin/sh", "-c", strings.Join(q, " ")}
}
