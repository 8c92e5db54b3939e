package agent

import "encoding/json"

// BlockAnswer is a hook's blocking answer in the shape the hosts read on
// stdout (exit status 0): {"decision": decision, "reason": reason}.
func BlockAnswer(decision, reason string) []byte {
	b, _ := json.Marshal(struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}{decision, reason})
	return append(b, '\n')
}
