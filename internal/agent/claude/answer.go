package claude

import "encoding/json"

// BlockPrompt is Claude Code's blocking answer to a UserPromptSubmit hook:
// printed on stdout with exit status 0, it stops the prompt from being
// processed (and erases it from the context) and shows reason to the user.
func BlockPrompt(reason string) []byte {
	b, _ := json.Marshal(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}{"block", reason})
	return append(b, '\n')
}
