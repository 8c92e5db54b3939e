package codex

import "github.com/agentscm/agentscm/internal/agent"

// BlockPrompt is Codex CLI's blocking answer to a UserPromptSubmit hook:
// Codex reads Claude Code's form (`{"decision":"block","reason":…}` on
// stdout, exit status 0; the reason must not be empty) and stops the turn
// before the prompt reaches the model, showing the reason.
func BlockPrompt(reason string) []byte { return agent.BlockAnswer("block", reason) }
