package gemini

import "encoding/json"

// BlockPrompt is Gemini CLI's blocking answer to a BeforeAgent hook (the
// prompt submission): `{"decision":"deny","reason":…}` on stdout with exit
// status 0 blocks the turn and discards the prompt (it does not enter the
// history); the reason is shown.
func BlockPrompt(reason string) []byte {
	b, _ := json.Marshal(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}{"deny", reason})
	return append(b, '\n')
}
