package event

import "time"

// Action record kinds: the start and finish of an action an execution rule
// makes of a native tool call. They are separate spool records from the
// tool_start/tool_finish lifecycle events of the same call.
const (
	ActionStart  Kind = "action_start"
	ActionFinish Kind = "action_finish"
)

// Action is the typed action fact of an ActionStart or ActionFinish record.
// Start fields are set on both (the finish repeats the start's binding so a
// finish can be mapped on its own); finish fields only on a finish.
type Action struct {
	// ID derives from the observed native session and the provider
	// tool_use_id only.
	ID string `json:"id"`
	// Class, Coverage and ResultSource are the rule bound at start.
	Class        string `json:"class"`
	Coverage     string `json:"coverage"`
	ResultSource string `json:"result_source"`
	// RecipeDigest is the registered recipe's canonical digest on the
	// verification action of a managed run-recipe invocation.
	RecipeDigest string `json:"recipe_digest,omitempty"`
	// SetupDigest is the caller's setup digest bound at start.
	SetupDigest string         `json:"setup_digest,omitempty"`
	Source      *SourceBinding `json:"source,omitempty"`
	// ObservationScope is the spool's random persisted observation scope and
	// ObservationOrder the durable spool-local order of the start in it.
	ObservationScope string    `json:"observation_scope"`
	ObservationOrder int64     `json:"observation_order"`
	StartedAt        time.Time `json:"started_at"`

	// Result is succeeded, failed, incomplete or unknown; Verification is
	// always unknown for an execution rule.
	Result       string `json:"result,omitempty"`
	Verification string `json:"verification,omitempty"`
	// ExitCode is the explicit integer exit code the host reported, if any.
	ExitCode *int `json:"exit_code,omitempty"`
	// Drift compares the source at completion with the start's binding:
	// none_observed, changed or unknown.
	Drift string `json:"drift,omitempty"`
	// CompletionSetupDigest is the setup digest current at completion;
	// Stale is true when it differs from SetupDigest.
	CompletionSetupDigest string    `json:"completion_setup_digest,omitempty"`
	Stale                 bool      `json:"stale,omitempty"`
	FinishedAt            time.Time `json:"finished_at,omitzero"`
	// Output names the retained stdout and stderr of a managed recipe run
	// (local-private artifacts of the spool) on its finish; it stays in the
	// spool and is not part of the Hub's envelope.
	Output *ActionOutput `json:"output,omitempty"`
}

// ActionOutput is the identity of each output stream of a managed run:
// availability retained when its bytes are an artifact of the spool,
// missing when the spool's limits refused them.
type ActionOutput struct {
	Stdout ArtifactRef `json:"stdout"`
	Stderr ArtifactRef `json:"stderr"`
}

// SourceBinding is the source an action started on: the Git HEAD commit,
// its tree and the merge-base with the configured base ref; whether the
// worktree differed from HEAD (tracked changes or non-ignored untracked
// files); and, for a dirty checkout or one whose attributes or settings
// transform working bytes, the identity of a content-addressed manifest of
// the captured working files (internal/source). The manifest and the bytes
// it names stay in the private spool; only this identity is shared.
// Partial is true when something is omitted (Omissions) or capture
// stopped (Stopped).
type SourceBinding struct {
	Head           string `json:"head,omitempty"`
	Tree           string `json:"tree,omitempty"`
	MergeBase      string `json:"merge_base,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
	Dirty          bool   `json:"dirty,omitempty"`
	Partial        bool   `json:"partial,omitempty"`
	// ManifestBytes is the manifest's size; Retained is true when the
	// manifest and every working file it names are in the spool.
	ManifestBytes int64 `json:"manifest_bytes,omitempty"`
	Retained      bool  `json:"retained,omitempty"`
	// Transformed: the checkout's attributes or Git settings can transform
	// materialized bytes, so the worktree (not the tree) is the input.
	Transformed bool `json:"transformed,omitempty"`
	// Omissions are the sorted kinds of what the binding does not cover
	// (source.Omission*).
	Omissions []string `json:"omissions,omitempty"`
	// Stopped names why capture stopped instead of claiming exact source
	// (source.Stop*): no manifest identity then.
	Stopped string `json:"stopped,omitempty"`
}
