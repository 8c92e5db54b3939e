package api

import (
	"fmt"
	"net/http"
)

// ReasonBadSessionID (400 bad_request) refines a refused native session id:
// one ValidSessionID refuses.
const ReasonBadSessionID = "bad_session_id"

// SessionIDRule words what ValidSessionID accepts, for messages.
var SessionIDRule = fmt.Sprintf("1 to %d bytes of printable UTF-8 without control characters, '/' or '\\'", MaxIDLen)

// ValidSessionID reports whether s is a native session id the Hub accepts
// (the rule of every name and id, ValidName). Hooks check it before they
// ask the Hub, so an id the Hub would refuse stays local under a named
// reason instead of a generic refusal.
func ValidSessionID(s string) bool { return ValidName(s) }

// CheckSessionID refuses an invalid native session id (field names it) with
// 400 bad_request, reason bad_session_id; nil when ValidSessionID accepts it.
func CheckSessionID(field, s string) *Error {
	if ValidSessionID(s) {
		return nil
	}
	if s == "" {
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Reason: ReasonBadSessionID, Message: field + " is required"}
	}
	shown := s
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Reason: ReasonBadSessionID,
		Message: fmt.Sprintf("%s %q is not a session id the Hub accepts (%s)", field, shown, SessionIDRule)}
}
