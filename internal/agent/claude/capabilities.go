package claude

import "github.com/agentscm/agentscm/internal/agent/capability"

// Capabilities is the Claude Code adapter's capability declaration. A
// session can be complete only within the supported visible scope: original
// start and end observed and no gaps.
func Capabilities() capability.Declaration {
	return capability.Declaration{
		Agent:           AgentName,
		CompleteCapture: true,
		Summary:         "complete only within the supported visible scope: original start and end observed, no gaps",
		Fields: []capability.Field{
			{Name: "session_boundaries", Available: true, Note: "SessionStart (startup, resume, clear, compact) and SessionEnd"},
			{Name: "user_prompts", Available: true, Note: "UserPromptSubmit; bodies only in a conversation mode"},
			{Name: "tool_starts", Available: true, Note: "PreToolUse"},
			{Name: "tool_completions", Available: true, Note: "PostToolUse and PostToolUseFailure (returned or failed)"},
			{Name: "assistant_messages", Available: true, Note: "MessageDisplay, or assistant text from the transcript under --claude-history-root"},
			{Name: "turn_and_subagent_markers", Available: true, Note: "Stop, PreCompact, SubagentStart, SubagentStop (never raise coverage)"},
			{Name: "provider_usage", Available: true, Note: "from the transcript under --claude-history-root only"},
			{Name: "setup", Available: true, Note: "model, permission mode and effort when the hook exposes them; other setup components unobserved"},
			{Name: "retrospective_history", Available: true, Note: "change-capture import of one explicit JSONL file, starting with adapter_started_late"},
			{Name: "thinking", Available: false, Note: "thinking and redacted_thinking blocks are never selected"},
		},
	}
}
