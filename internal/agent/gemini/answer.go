package gemini

import "github.com/agentscm/agentscm/internal/agent"

// BlockPrompt is Gemini CLI's blocking answer to a BeforeAgent hook (the
// prompt submission): `{"decision":"deny","reason":…}` on stdout with exit
// status 0 blocks the turn and discards the prompt (it does not enter the
// history); the reason is shown.
func BlockPrompt(reason string) []byte { return agent.BlockAnswer("deny", reason) }
