// Package codex declares what the existing Codex hook integration exposes
// to AgentSCM. There is no Codex capture adapter yet; the declaration keeps
// every surface from claiming complete Codex session capture.
package codex

import "github.com/agentscm/agentscm/internal/agent/capability"

// AgentName identifies Codex in capability declarations.
const AgentName = "codex"

// Capabilities is the Codex capability declaration: the existing Codex hook
// integration exposes session boundaries and selected edit starts; it does
// not expose user prompts, assistant messages, every tool completion, or
// retrospective visible history, so complete capture is never claimed.
func Capabilities() capability.Declaration {
	return capability.Declaration{
		Agent:           AgentName,
		CompleteCapture: false,
		Summary:         "session boundaries and selected edit starts only; complete Codex session capture is not claimed",
		Fields: []capability.Field{
			{Name: "session_boundaries", Available: true, Note: "session start and end hooks"},
			{Name: "selected_edit_starts", Available: true, Note: "the start of selected edit tools"},
			{Name: "user_prompts", Available: false, Note: "not exposed by the Codex hook integration"},
			{Name: "assistant_messages", Available: false, Note: "not exposed by the Codex hook integration"},
			{Name: "tool_completions", Available: false, Note: "not every tool completion is exposed"},
			{Name: "retrospective_history", Available: false, Note: "no visible history import for Codex"},
			{Name: "provider_usage", Available: false, Note: "no transcript reader for Codex"},
		},
	}
}
