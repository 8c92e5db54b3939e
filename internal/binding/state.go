package binding

import (
	"context"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

// Registry reads and writes the capture config (capture.json: the
// bindings) in one config directory.
type Registry struct{ Dir string }

// State is a config directory as the binding operations see it: the
// capture config (Bindings) and the capture layer's private per-spool
// state kept beside it, which enabling, disabling, moving and reading a
// binding keep in step. capture.StateDir implements it.
type State interface {
	// Bindings is the capture config of the directory.
	Bindings() Registry
	// PrepareSpool writes the hook's spool summary of spoolDir so that
	// the first hooks can use the intake; best effort.
	PrepareSpool(ctx context.Context, spoolDir string)
	// NoteDisabled records that capture into spoolDir was turned off at
	// at, so a re-enable can name the window.
	NoteDisabled(spoolDir string, at time.Time) error
	// SpoolStateDirs lists the private per-spool state directories kept
	// under the config directory by names derived from the spool's path
	// and id: a move renames each of them.
	SpoolStateDirs(spoolDir, spoolID string) []string
	// SummaryPath is the hook's spool summary file of spoolDir.
	SummaryPath(spoolDir string) string
	// Refusals reads the envelopes of spoolDir the Hub permanently
	// refused.
	Refusals(spoolDir string) (RefusalReport, error)
}

// Refusal is a permanently refused envelope as the capture ledger records
// it: listed by change-capture status, and made visible on the Hub by a
// capture_interrupted gap (reason hub_refused:<reason>) over the refused
// record's place in its stream.
type Refusal struct {
	SpoolSeq uint64     `json:"spool_seq"`
	Digest   string     `json:"digest"`
	Kind     event.Kind `json:"kind"`
	Session  string     `json:"session,omitempty"`
	Reason   string     `json:"reason"`
	Detail   string     `json:"detail,omitempty"`
	At       time.Time  `json:"at"`
	// Gap is true when a hub_refused gap record was appended for it.
	Gap bool `json:"gap"`
}

// RefusalReport is what a spool's ledger lists of refused envelopes.
type RefusalReport struct {
	Total    int       `json:"total"`
	Omitted  int64     `json:"omitted"`
	Refusals []Refusal `json:"refusals"`
}
