// Package gemini is the Gemini CLI adapter: it decodes and validates Gemini
// CLI hook payloads (.gemini/settings.json hooks), normalises them into the
// decoded form the capture and changelog hooks consume (BeforeAgent is a
// prompt, BeforeTool/AfterTool a tool start/finish, AfterAgent a turn end),
// pairs tool starts and finishes by order (the payloads carry no tool-call
// id) and cuts a chat file into a fresh session for `gemini --resume`.
package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/capability"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// AgentName identifies Gemini CLI in event records and declarations.
const AgentName = "gemini"

// Version is the Gemini CLI release the adapter was qualified against.
const Version = "0.61.0"

// Marked subcommands of the hooks agentscm installs for Gemini CLI.
const (
	HookSubcommand      = "change-capture hook-gemini"
	ChangelogSubcommand = "changelog hook-gemini"
)

// HookFile is where the hooks are installed, relative to the checkout.
const HookFile = ".gemini/settings.json"

// HookTimeoutMillis is the timeout of an installed hook; Gemini CLI reads
// hook timeouts in milliseconds.
const HookTimeoutMillis = 20000

// HookEvents are the Gemini CLI events the capture hook takes. BeforeModel,
// AfterModel (model text: conversation bodies), BeforeToolSelection,
// PreCompress and Notification are not installed.
var HookEvents = []string{"SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "SessionEnd"}

// ChangelogEvents are the events the changelog hook takes (BeforeTool and
// BeforeAgent capture work done outside the agent).
var ChangelogEvents = []string{"BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent", "SessionEnd"}

// claudeEvent is the decoded-form event of each Gemini event.
var claudeEvent = map[string]string{
	"SessionStart": "SessionStart",
	"BeforeAgent":  "UserPromptSubmit",
	"BeforeTool":   "PreToolUse",
	"AfterTool":    "PostToolUse",
	"AfterAgent":   "Stop",
	"SessionEnd":   "SessionEnd",
	"PreCompress":  "PreCompact",
}

// payload is the part of a Gemini CLI hook input agentscm reads beyond the
// fields Claude Code's payload shares.
type payload struct {
	PromptResponse *string         `json:"prompt_response"`
	Error          json.RawMessage `json:"error"`
}

// Orderer gives the order-derived id of a tool call: Gemini CLI fires
// BeforeTool1, AfterTool1, BeforeTool2, ... strictly in turn and carries no
// tool-call id, so the k-th start and the k-th finish of a session are the
// same call. Each hook (capture, changelog) keeps its own counters.
//
// Without Recover every counter update is a durable write (temp file,
// fsync, rename, directory fsync). With Recover the file is created
// durably once per session and boot, and later updates of the same boot
// are renamed into place without an fsync: a killed process cannot lose
// them (the page cache outlives it), only an operating system crash can,
// and that changes the boot id the file carries. A file of another boot
// (or one a crash left unreadable) is then raised to what Recover finds in
// the durable record before it is used.
type Orderer struct {
	// Dir holds one small counter file per session; empty disables pairing
	// (the records then carry no tool_use_id).
	Dir string
	// Recover, when set, returns the highest order k the hook's durable
	// record holds for a session (a start or a finish of order-k), 0 when
	// none; see Orderer.
	Recover func(session, cwd string) (int, error)
	// Boot is the current boot id; empty reads /proc/sys/kernel/random/boot_id
	// (and where that cannot be read every update is durable).
	Boot string
}

// OrderID is the tool_use_id given to the k-th tool call of a session.
func OrderID(k int) string { return "order-" + strconv.Itoa(k) }

// OrderOf parses an OrderID.
func OrderOf(id string) (int, bool) {
	var k int
	if _, err := fmt.Sscanf(id, "order-%d", &k); err != nil || k < 1 || OrderID(k) != id {
		return 0, false
	}
	return k, true
}

type counters struct {
	Starts   int    `json:"starts"`
	Finishes int    `json:"finishes"`
	Boot     string `json:"boot,omitempty"`
}

// bootIDFile names the running kernel's boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

func (o Orderer) boot() string {
	if o.Boot != "" {
		return o.Boot
	}
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// next counts one start or finish of session and returns its ordinal.
func (o Orderer) next(session, cwd string, finish bool) (int, error) {
	if o.Dir == "" {
		return 0, nil
	}
	if !validSession(session) {
		return 0, fmt.Errorf("session id %q cannot name a state file", session)
	}
	if err := fsutil.MkdirPrivate(o.Dir); err != nil {
		return 0, err
	}
	path := filepath.Join(o.Dir, session+".json")
	c, durable, err := o.load(path, session, cwd)
	if err != nil {
		return 0, err
	}
	n := &c.Starts
	if finish {
		n = &c.Finishes
	}
	*n++
	b, _ := json.Marshal(c)
	write := fsutil.WriteAtomic
	if !durable {
		write = fsutil.WriteReplace
	}
	if err := write(path, b, fsutil.FileMode); err != nil {
		return 0, err
	}
	return *n, nil
}

// load reads session's counters and says whether their update must be
// durable: always without Recover; with it, when the file is new, of
// another boot or unreadable (then raised to the durable record first).
func (o Orderer) load(path, session, cwd string) (counters, bool, error) {
	var c counters
	b, err := fsutil.ReadFileNoFollow(path, 4096)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Boot = o.boot()
		return c, true, nil // created durably: after a crash, no file is a new session
	case err != nil:
		return c, false, err
	}
	uerr := json.Unmarshal(b, &c)
	if o.Recover == nil {
		if uerr != nil {
			return c, false, fmt.Errorf("tool order state %s: %w", path, uerr)
		}
		return c, true, nil
	}
	boot := o.boot()
	if uerr == nil && boot != "" && c.Boot == boot {
		return c, false, nil
	}
	if uerr != nil {
		c = counters{}
	}
	k, err := o.Recover(session, cwd)
	if err != nil {
		return c, false, fmt.Errorf("recover the tool order of session %s: %w", session, err)
	}
	c.Starts, c.Finishes, c.Boot = max(c.Starts, k), max(c.Finishes, k), boot
	return c, true, nil
}

// Decode parses one Gemini CLI hook payload into the decoded form: the
// event renamed to its Claude Code equivalent (Host keeps the payload
// from Gemini), a tool start or finish given its order id, a finish with an
// error field turned into PostToolUseFailure, and AfterAgent's
// prompt_response as the turn's last assistant message. Unknown events keep
// their name (and are then not captured).
func (o Orderer) Decode(b []byte) (*agent.Payload, error) {
	p, err := agent.DecodePayload(b)
	if err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	var g payload
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("gemini: %w", err)
	}
	p.Host = AgentName
	if ev, ok := claudeEvent[p.HookEventName]; ok {
		p.HookEventName = ev
	}
	switch p.HookEventName {
	case "PreToolUse", "PostToolUse":
		if p.ToolUseID != "" {
			break // a future release's own id wins
		}
		k, err := o.next(p.SessionID, p.Cwd, p.HookEventName == "PostToolUse")
		if err != nil {
			return nil, fmt.Errorf("gemini: pair the tool call by order: %w", err)
		}
		if k > 0 {
			p.ToolUseID = OrderID(k)
		}
		if p.HookEventName == "PostToolUse" {
			if msg, failed := toolError(g.Error, p.ToolResponse); failed {
				p.HookEventName = "PostToolUseFailure"
				p.Error = &msg
			} else if code := shellExitCode(p.ToolName, p.ToolResponse); code != nil {
				p.ExitCodeSource = "tool_response_text"
				resp := map[string]json.RawMessage{"exit_code": json.RawMessage(strconv.Itoa(*code)), "output": p.ToolResponse}
				p.ToolResponse, _ = json.Marshal(resp)
			}
		}
	case "Stop":
		if g.PromptResponse != nil {
			p.LastAssistantMessage = g.PromptResponse
		}
		p.Prompt = nil
	}
	return p, nil
}

// toolError reports a failed tool call: an error in the payload's error
// field or, as Gemini CLI 0.61.0 sends it, in tool_response.error
// ({"message", "type"}). The message is the error text.
func toolError(top, resp json.RawMessage) (string, bool) {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(resp, &r)
	for _, e := range []json.RawMessage{top, r.Error} {
		s := string(bytes.TrimSpace(e))
		if s == "" || s == "null" || s == `""` || s == "{}" || s == "false" {
			continue
		}
		var msg string
		if json.Unmarshal(e, &msg) == nil {
			return msg, true
		}
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		if json.Unmarshal(e, &obj) == nil && (obj.Message != "" || obj.Type != "") {
			return strings.TrimSpace(obj.Type + ": " + obj.Message), true
		}
		return s, true
	}
	return "", false
}

// exitLine is how run_shell_command ends its llmContent (0.61.0):
// "...\nExit Code: 3\nProcess Group PGID: 7527\n</untrusted_context>".
var exitLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\nExit Code: (-?\d{1,9})\n(?:Signal: [^\n]*\n)?Process Group PGID: [^\n]*\n</untrusted_context>\s*$`)
})

// shellExitCode reads the exit code run_shell_command states in the text of
// its result: the stated code, 0 when the text ends as a completed command
// without one, nil when the text is not in that form.
func shellExitCode(tool string, resp json.RawMessage) *int {
	if tool != "run_shell_command" {
		return nil
	}
	var r struct {
		LLMContent string `json:"llmContent"`
	}
	if json.Unmarshal(resp, &r) != nil {
		return nil
	}
	if m := exitLine().FindStringSubmatch(r.LLMContent); m != nil {
		c, err := strconv.Atoi(m[1])
		if err != nil {
			return nil
		}
		return &c
	}
	if completedLine().MatchString(r.LLMContent) {
		c := 0
		return &c
	}
	return nil
}

var completedLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\nProcess Group PGID: [^\n]*\n</untrusted_context>\s*$`)
})

var sessionEndReasons = map[string]bool{"exit": true, "clear": true, "logout": true, "prompt_input_exit": true, "other": true}

// Map turns a decoded Gemini payload into the record to retain: Claude
// Code's mapping with the agent set to gemini, the host's own event name
// kept in hook_event, a shell finish that states a non-zero exit code
// failed, and AfterAgent's response as the turn end's message in a
// conversation mode.
func Map(p *agent.Payload, mode string, now time.Time) (*event.Record, bool, error) {
	rec, ok, err := agent.MapHook(p, AgentName, mode, now)
	if err != nil || !ok {
		return rec, ok, err
	}
	rec.Agent = AgentName
	for g, c := range claudeEvent {
		if c == p.HookEventName || (p.HookEventName == "PostToolUseFailure" && g == "AfterTool") {
			rec.HookEvent = g
			break
		}
	}
	switch p.HookEventName {
	case "PostToolUse":
		var v struct {
			ExitCode *int `json:"exit_code"`
		}
		if json.Unmarshal(p.ToolResponse, &v) == nil && v.ExitCode != nil && *v.ExitCode != 0 {
			rec.Outcome = event.OutcomeFailed
		}
	case "SessionEnd":
		rec.Reason = "other"
		if sessionEndReasons[p.Reason] {
			rec.Reason = p.Reason
		}
	case "Stop":
		local := mode == event.ModeLocalConversation || mode == event.ModeSharedConversation
		if local && p.LastAssistantMessage != nil && *p.LastAssistantMessage != "" {
			body := event.Body{Message: *p.LastAssistantMessage}
			if mode == event.ModeSharedConversation {
				agent.RedactBody(&body)
			}
			rec.Body = &body
		}
	}
	return rec, true, nil
}

// ResumeCommand is the command that continues session id.
func ResumeCommand(id string) string { return "gemini --resume " + id }

// TrustNote says what Gemini CLI needs before it runs a checkout's hooks.
func TrustNote(root string) string {
	return fmt.Sprintf("Gemini CLI runs the hooks in %s only in a trusted folder (trust it in Gemini, or GEMINI_CLI_TRUST_WORKSPACE=true; --skip-trust skips project hooks)", filepath.Join(root, HookFile))
}

// Capabilities is the Gemini CLI adapter's capability declaration, as the
// live payloads of Gemini CLI 0.61.0 carry them (docs/agents.md).
func Capabilities() capability.Declaration {
	return capability.Declaration{
		Agent:           AgentName,
		CompleteCapture: false,
		Summary:         "hooks in .gemini/settings.json: session boundaries, prompts, every tool start and finish (paired by order: no tool-call id), turn ends; complete capture is not claimed",
		Fields: []capability.Field{
			{Name: "session_boundaries", Available: true, Note: "SessionStart (source) and SessionEnd (reason)"},
			{Name: "user_prompts", Available: true, Note: "BeforeAgent; bodies only in a conversation mode"},
			{Name: "tool_starts", Available: true, Note: "BeforeTool (write_file, replace, run_shell_command, ...)"},
			{Name: "tool_completions", Available: true, Note: "AfterTool; an error (tool_response.error, or a top-level error field) makes it failed"},
			{Name: "tool_call_ids", Available: false, Note: "not in any payload: starts and finishes are paired by order (the k-th of a session, tool_use_id order-k), which the strictly sequential hooks allow; a re-delivered hook would shift the pairing"},
			{Name: "exit_codes", Available: false, Note: "no field: read from run_shell_command's result text (\"Exit Code: N\" before the PGID line); a non-zero code makes the finish failed"},
			{Name: "assistant_messages", Available: true, Note: "prompt_response of AfterAgent, in a conversation mode; AfterModel (model text) is not installed"},
			{Name: "turn_markers", Available: true, Note: "AfterAgent (never raises coverage)"},
			{Name: "resume", Available: true, Note: "rewind --resume-conversation cuts the chat file after call N into a fresh session: gemini --resume <id>"},
			{Name: "setup", Available: false, Note: "no model or permission mode in the hook payloads"},
			{Name: "provider_usage", Available: false, Note: "token counts are in the chat file, not read"},
			{Name: "retrospective_history", Available: false, Note: "no import of earlier chats"},
		},
	}
}
