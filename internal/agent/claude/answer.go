package claude

import "github.com/agentscm/agentscm/internal/agent"

// BlockPrompt is Claude Code's blocking answer to a UserPromptSubmit hook:
// printed on stdout with exit status 0, it stops the prompt from being
// processed (and erases it from the context) and shows reason to the user.
func BlockPrompt(reason string) []byte { return agent.BlockAnswer("block", reason) }
