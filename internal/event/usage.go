package event

// Usage scopes. A request-scoped record is one provider request's usage and
// is summed into totals; a session-cumulative record is the host's own
// running total for a whole session, kept apart and never summed.
const (
	UsageScopeRequest           = "request"
	UsageScopeSessionCumulative = "session_cumulative"
)

// Usage is structured provider usage metadata read from a transcript. A nil
// count is unknown (the provider did not report it), never zero.
type Usage struct {
	// Scope is UsageScopeRequest or UsageScopeSessionCumulative.
	Scope string `json:"scope"`
	// MessageID is the provider's message id of a request-scoped record.
	MessageID string `json:"message_id,omitempty"`
	Model     string `json:"model,omitempty"`

	InputTokens              *int64 `json:"input_tokens,omitempty"`
	OutputTokens             *int64 `json:"output_tokens,omitempty"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens,omitempty"`
}

// Setup is the setup observed in native hook metadata. Unobserved lists the
// setup components the hook did not expose, so the record never reads as a
// complete observed setup.
type Setup struct {
	// Artifact is the opaque identity of the retained setup artifact
	// ("sha256:<hex>" of its canonical JSON).
	Artifact       string   `json:"artifact"`
	Model          string   `json:"model,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	Unobserved     []string `json:"unobserved"`
}

// SetupArtifact is the canonical content of a setup artifact: what the hook
// observed and what it did not.
type SetupArtifact struct {
	Model          string   `json:"model,omitempty"`
	PermissionMode string   `json:"permission_mode,omitempty"`
	Effort         string   `json:"effort,omitempty"`
	Unobserved     []string `json:"unobserved"`
}

// ArtifactBody returns the artifact content the Artifact identity hashes.
func (s *Setup) ArtifactBody() SetupArtifact {
	return SetupArtifact{Model: s.Model, PermissionMode: s.PermissionMode, Effort: s.Effort, Unobserved: s.Unobserved}
}
