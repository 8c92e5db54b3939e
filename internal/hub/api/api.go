// Package api holds the Hub's wire types: the JSON bodies of the /v1/ routes,
// the typed errors both connections return, and the validation of client
// input. It imports no storage so that the hook can use it cheaply.
package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Work states.
const (
	StateActive   = "active"
	StatePaused   = "paused"
	StateBlocked  = "blocked"
	StateFinished = "finished"
	StateHandover = "handover"
)

// Token scopes.
const (
	ScopeReadWrite = "read-write"
	ScopeReadOnly  = "read-only"
)

// Checkpoint actions accepted by the Work checkpoint route.
const (
	CheckpointPause    = "pause"
	CheckpointResume   = "resume"
	CheckpointBlock    = "block"
	CheckpointFinish   = "finish"
	CheckpointHandover = "handover"
	CheckpointTakeover = "takeover"
	// CheckpointSessionEnd is recorded when a Claude SessionEnd paused the Work;
	// clients cannot request it.
	CheckpointSessionEnd = "session_end"
)

// Error codes carried in Error.Code.
const (
	CodeBadRequest      = "bad_request"
	CodeBadJSON         = "bad_json"
	CodeUnknownField    = "unknown_field"
	CodeTooLarge        = "too_large"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeMethod          = "method_not_allowed"
	CodeConflict        = "conflict"
	CodeInvalidState    = "invalid_state"
	CodeExists          = "exists"
	CodeTargetRefused   = "target_refused"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// Reasons of a target refusal (CodeTargetRefused).
const (
	// ReasonNoCurrentWork: the worktree has no current Work on this Hub.
	ReasonNoCurrentWork = "no_current_work"
	// ReasonWorkNotAccepting: the Work is finished or handed over.
	ReasonWorkNotAccepting = "work_not_accepting"
	// ReasonStaleGeneration: a takeover moved the Work to a newer generation.
	ReasonStaleGeneration = "stale_generation"
	// ReasonUnknownSession: the envelope names a session the Work does not have
	// at that generation.
	ReasonUnknownSession = "unknown_session"
	// ReasonWorktreeMismatch: the native session is bound to another worktree.
	ReasonWorktreeMismatch = "worktree_mismatch"
	// ReasonUnknownWork: the envelope names a Work the repository does not have.
	ReasonUnknownWork = "unknown_work"
	// ReasonGenerationChanged (409 conflict): a checkpoint's
	// expect_generation is not the Work's generation any more (someone
	// took it over meanwhile).
	ReasonGenerationChanged = "generation_changed"
)

// Error is the JSON error of every failed request, and the Go error both
// connections return, so callers branch on Status, Code and Reason alike.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason refines Code, e.g. the reason of a target refusal or a conflict.
	Reason string `json:"reason,omitempty"`
	// Detail carries the numbers of a changelog refusal (grant, positions).
	Detail *ErrorDetail `json:"detail,omitempty"`
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s (%s: %s)", e.Message, e.Code, e.Reason)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// ErrorBody is the JSON body of an error response.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Errorf builds an *Error.
func Errorf(status int, code, format string, a ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, a...)}
}

// Refusef builds a target refusal with a reason.
func Refusef(reason, format string, a ...any) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeTargetRefused, Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// AsError returns the *Error in err's chain, if any.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// IsRefusal reports whether err is a target refusal, and its reason.
func IsRefusal(err error) (string, bool) {
	if e, ok := AsError(err); ok && e.Code == CodeTargetRefused {
		return e.Reason, true
	}
	return "", false
}

// Whoami is the body of GET /v1/hub/whoami.
type Whoami struct {
	Human      string `json:"human"`
	HumanID    string `json:"human_id"`
	Admin      bool   `json:"admin"`
	Repository string `json:"repository"`
	TokenID    string `json:"token_id"`
	Scope      string `json:"scope"`
	// SharedConversationRetentionDays is how long the Hub keeps an uploaded
	// shared body (1 to 3650).
	SharedConversationRetentionDays int `json:"shared_conversation_retention_days"`
	HubVersion                      int `json:"hub_api_version"`
	// Features lists the optional request fields this Hub accepts beyond
	// hub_api_version 1 (FeatureAgent); an older Hub lists none and
	// refuses them as unknown fields.
	Features []string `json:"features,omitempty"`
}

// APIVersion is the version of the /v1/ API this Hub serves.
const APIVersion = 1

// FeatureAgent in Whoami.Features: the Hub accepts an envelope's agent.
const FeatureAgent = "envelope_agent"

// Features is what this Hub lists in Whoami.Features.
func Features() []string { return []string{FeatureAgent} }

// HasFeature reports whether the Hub that answered w accepts feature.
func (w Whoami) HasFeature(feature string) bool {
	for _, f := range w.Features {
		if f == feature {
			return true
		}
	}
	return false
}

// ResolveRequest asks for the exact current target of a native session.
type ResolveRequest struct {
	WorktreeID      string `json:"worktree_id"`
	NativeSessionID string `json:"native_session_id"`
}

// Target is the exact current Work, generation and canonical session of a
// native session: what its envelopes must carry.
type Target struct {
	Repository      string `json:"repository"`
	WorkID          string `json:"work_id"`
	Generation      int64  `json:"generation"`
	Session         string `json:"session"`
	NativeSessionID string `json:"native_session_id"`
	WorktreeID      string `json:"worktree_id"`
	State           string `json:"state"`
}

// StartWorkRequest creates a Work and makes it current for a worktree.
type StartWorkRequest struct {
	Title      string `json:"title"`
	WorktreeID string `json:"worktree_id"`
	// SessionAlias names the canonical session that the first native session
	// on the worktree joins; empty means "default".
	SessionAlias string `json:"session_alias,omitempty"`
	// ChangelogGrant, when set, is the Work's changelog grant; otherwise
	// the default grant applies.
	ChangelogGrant *Grant `json:"changelog_grant,omitempty"`
}

// CheckpointRequest changes a Work's state (pause, resume, block, finish,
// handover, takeover).
type CheckpointRequest struct {
	Action string `json:"action"`
	// WorktreeID is required for takeover: the Work becomes current there.
	WorktreeID string `json:"worktree_id,omitempty"`
	Note       string `json:"note,omitempty"`
	// ExpectGeneration, when set, is the generation the caller saw: the
	// checkpoint is applied only if the Work is still at it, else 409
	// conflict with reason generation_changed (Detail.Generation is the
	// Work's generation now). Checked and applied in one transaction.
	ExpectGeneration *int64 `json:"expect_generation,omitempty"`
}

// Work is a unit of agent work on a repository.
type Work struct {
	ID          string       `json:"id"`
	Repository  string       `json:"repository"`
	Title       string       `json:"title"`
	State       string       `json:"state"`
	Generation  int64        `json:"generation"`
	CreatedBy   string       `json:"created_by"`
	CreatedAt   int64        `json:"created_at"`
	UpdatedAt   int64        `json:"updated_at"`
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	// Worktrees lists the worktrees for which this Work is current, with the
	// generation each points at.
	Worktrees []WorktreeCurrent `json:"worktrees,omitempty"`
}

// WorktreeCurrent says which Work and generation is current for a worktree.
type WorktreeCurrent struct {
	WorktreeID string `json:"worktree_id"`
	WorkID     string `json:"work_id"`
	Generation int64  `json:"generation"`
}

// Checkpoint is one recorded change of a Work's state.
type Checkpoint struct {
	Seq        int64  `json:"seq"`
	Action     string `json:"action"`
	From       string `json:"from"`
	To         string `json:"to"`
	Generation int64  `json:"generation"`
	Human      string `json:"human"`
	WorktreeID string `json:"worktree_id,omitempty"`
	Note       string `json:"note,omitempty"`
	At         int64  `json:"at"`
}

// WorkList is the body of GET .../works.
type WorkList struct {
	Works   []Work `json:"works"`
	Omitted int    `json:"omitted"`
}

// CreateHumanRequest is the admin request to add a human.
type CreateHumanRequest struct {
	Name  string `json:"name"`
	Admin bool   `json:"admin"`
}

// Human is a person known to the Hub.
type Human struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Admin     bool   `json:"admin"`
	CreatedAt int64  `json:"created_at"`
}

// CreateRepositoryRequest is the admin request to add a repository.
type CreateRepositoryRequest struct {
	Name string `json:"name"`
}

// Repository is a repository known to the Hub.
type Repository struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt int64  `json:"created_at"`
}

// CreateTokenRequest is the admin request to issue a token.
type CreateTokenRequest struct {
	Human      string `json:"human"`
	Repository string `json:"repository"`
	Scope      string `json:"scope"`
	Label      string `json:"label,omitempty"`
}

// Token describes an issued token; Secret is set only in the answer that
// created it, never again.
type Token struct {
	ID         string `json:"id"`
	Human      string `json:"human"`
	Repository string `json:"repository"`
	Scope      string `json:"scope"`
	Label      string `json:"label,omitempty"`
	CreatedAt  int64  `json:"created_at"`
	Secret     string `json:"secret,omitempty"`
}

// AdminList is the body of GET /v1/admin/{humans,repositories,tokens}.
type AdminList struct {
	Humans       []Human      `json:"humans,omitempty"`
	Repositories []Repository `json:"repositories,omitempty"`
	Tokens       []Token      `json:"tokens,omitempty"`
}

// CurrentWork is the body of GET .../worktrees/{worktree}: the worktree's
// current Work and the generation the worktree captures at.
type CurrentWork struct {
	WorktreeID string `json:"worktree_id"`
	Generation int64  `json:"generation"`
	Work       Work   `json:"work"`
}
