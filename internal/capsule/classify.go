package capsule

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"time"
)

// Status values of a run, exactly as result.json spells them.
const (
	StatusPassed   = "passed"    // command succeeded and the policy outcome was allow
	StatusReview   = "review"    // command succeeded with review evidence or warnings
	StatusDenied   = "denied"    // command succeeded but at least one outcome was deny
	StatusBlocked  = "blocked"   // command policy denied launch
	StatusFailed   = "failed"    // the subprocess returned non-zero (or died of a signal)
	StatusTimedOut = "timed_out" // runtime timeout elapsed
	StatusError    = "error"     // agentdiff could not launch the command
)

// Change kinds.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)

// Recovery describes whether verified recovery evidence exists for a change.
type Recovery struct {
	Available bool   `json:"available"`
	Method    string `json:"method"` // restore_backup, remove_created, recreate_dir, restore_mode, none
	Reason    string `json:"reason,omitempty"`
}

// Change is one classified change.
type Change struct {
	Path string `json:"path"`
	// PathRaw holds Path byte-exact when it is not valid UTF-8 (names.go).
	PathRaw    []byte     `json:"path_raw,omitempty"`
	Change     string     `json:"change"` // created, modified, deleted
	Type       string     `json:"type"`   // type after the run (before for deleted)
	BeforeType string     `json:"before_type,omitempty"`
	Aspects    []string   `json:"aspects,omitempty"` // for modified: type, content, mode, target
	Decision   Decision   `json:"decision"`
	Provenance Provenance `json:"provenance"`
	Recovery   Recovery   `json:"recovery"`
}

// LimitViolation is one exceeded limit.
type LimitViolation struct {
	Limit  string `json:"limit"`
	Value  int64  `json:"value"`
	Max    int64  `json:"max"`
	Detail string `json:"detail,omitempty"`
}

// Warning is an observation warning.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Result is result.json and the --format json output.
type Result struct {
	SchemaVersion       int              `json:"schema_version"`
	RunID               string           `json:"run_id"`
	Status              string           `json:"status"`
	SafetyOutcome       Decision         `json:"safety_outcome"`
	CommandDecision     CommandDecision  `json:"command_decision"`
	Changes             []Change         `json:"changes"`
	LimitViolations     []LimitViolation `json:"limit_violations"`
	ObservationWarnings []Warning        `json:"observation_warnings"`
	// MachineObservations are facts about the machine during the run that
	// are not attributed to the command (listening sockets of other
	// processes): reported, never a reason for review or blast radius.
	MachineObservations []Warning      `json:"machine_observations,omitempty"`
	BlastRadius         BlastRadius    `json:"blast_radius"`
	Runtime             RuntimeSummary `json:"runtime"`
	ExecutionError      *string        `json:"execution_error"`
}

// RuntimeSummary is the runtime part of result.json (runtime.json has the detail).
type RuntimeSummary struct {
	Launched    bool       `json:"launched"`
	Exit        *ExitState `json:"exit"`
	DurationMS  int64      `json:"duration_ms"`
	Descendants int        `json:"descendants_cleaned_up"`
	PortsOpened []string   `json:"ports_opened"`
	PortsClosed []string   `json:"ports_closed"`
}

// diff compares two manifests. A change is a difference in type, content
// (sha256), symlink target or mode; size and mtime alone are not changes
// (mtime-only touches are not reported), and a directory's mtime never is.
func diff(before, after *Manifest) []Change {
	bi, ai := before.index(), after.index()
	var out []Change
	for i := range after.Entries {
		a := &after.Entries[i]
		if c, ok := classify(bi[a.Path], a); ok {
			out = append(out, c)
		}
	}
	for _, b := range before.Entries {
		if ai[b.Path] == nil {
			out = append(out, Change{Path: b.Path, Change: Deleted, Type: b.Type})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// classify compares one path's before entry (nil: absent) with its after entry.
func classify(b, a *ManifestEntry) (Change, bool) {
	if b == nil {
		return Change{Path: a.Path, Change: Created, Type: a.Type}, true
	}
	var aspects []string
	if a.Type != b.Type {
		aspects = append(aspects, "type")
	} else {
		if a.SHA256 != b.SHA256 || (a.Type == "other" && a.Size != b.Size) {
			aspects = append(aspects, "content")
		}
		if a.Target != b.Target {
			aspects = append(aspects, "target")
		}
	}
	if a.Mode != b.Mode && a.Type != "symlink" {
		aspects = append(aspects, "mode")
	}
	if len(aspects) == 0 {
		return Change{}, false
	}
	return Change{Path: a.Path, Change: Modified, Type: a.Type, BeforeType: b.Type, Aspects: aspects}, true
}

// classifyDelta is diff over an after manifest held as changes to the
// before manifest; bi and ai map the changed paths to their entries.
func classifyDelta(as *afterState) ([]Change, map[string]*ManifestEntry, map[string]*ManifestEntry) {
	bi := make(map[string]*ManifestEntry, len(as.changes)+len(as.removed))
	ai := make(map[string]*ManifestEntry, len(as.changes))
	var out []Change
	for _, c := range as.changes {
		if ch, ok := classify(c.before, c.after); ok {
			out = append(out, ch)
			ai[c.after.Path] = c.after
			if c.before != nil {
				bi[c.before.Path] = c.before
			}
		}
	}
	for _, b := range as.removed {
		out = append(out, Change{Path: b.Path, Change: Deleted, Type: b.Type})
		bi[b.Path] = b
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, bi, ai
}

// recoveryFor says what rollback could do for c given the manifests and
// which before-state objects verified after the run.
func recoveryFor(c Change, b, a *ManifestEntry, verified map[string]bool) Recovery {
	isSym := (b != nil && b.Type == "symlink") || (a != nil && a.Type == "symlink")
	if isSym {
		return Recovery{Method: "none", Reason: "symlinks are recorded, not recoverable"}
	}
	if (b != nil && b.Type == "other") || (a != nil && a.Type == "other") {
		return Recovery{Method: "none", Reason: "special files are recorded, not recoverable"}
	}
	switch c.Change {
	case Created:
		return Recovery{Available: true, Method: "remove_created"}
	case Deleted, Modified:
		if b.Type == "dir" {
			if c.Change == Modified && a.Type == "dir" {
				return Recovery{Available: true, Method: "restore_mode"}
			}
			return Recovery{Available: true, Method: "recreate_dir"}
		}
		if c.Change == Modified && a.Type == "file" && b.SHA256 == a.SHA256 {
			return Recovery{Available: true, Method: "restore_mode"}
		}
		if !b.Backup {
			return Recovery{Method: "none", Reason: "no backup: file exceeded the backup bounds"}
		}
		if !verified[b.SHA256] {
			return Recovery{Method: "none", Reason: "backup failed verification after the run"}
		}
		return Recovery{Available: true, Method: "restore_backup"}
	}
	return Recovery{Method: "none"}
}

// unbackedWarnings names the changed files (modified or deleted regular
// files whose content changed) that have no before-state backup, by reason.
// An unchanged file without a backup is no reason to warn: nothing of it
// needs recovering, and before.json counts it under backup_skipped.
func unbackedWarnings(changes []Change, before map[string]*ManifestEntry, bounds BackupBounds) []Warning {
	n := map[string]int{}
	for _, c := range changes {
		b := before[c.Path]
		if b == nil || b.Type != "file" || b.Backup || c.Change == Created {
			continue
		}
		if c.Change == Modified && !containsStr(c.Aspects, "content") && !containsStr(c.Aspects, "type") {
			continue
		}
		reason := "budget_exhausted"
		if b.Size > bounds.MaxFileBytes {
			reason = "too_large"
		}
		n[reason]++
	}
	var out []Warning
	for _, reason := range []string{"too_large", "budget_exhausted"} {
		if n[reason] > 0 {
			out = append(out, Warning{Code: "backup_" + reason, Message: fmt.Sprintf("%d changed regular files have no before-state backup (%s)", n[reason], strings.ReplaceAll(reason, "_", " "))})
		}
	}
	return out
}

// BlastRadius is the documented deterministic score.
type BlastRadius struct {
	FormulaVersion int         `json:"formula_version"`
	Score          int64       `json:"score"`
	Level          string      `json:"level"`
	Components     []Component `json:"components"`
}

// Component is one term of the score: points = count * weight.
type Component struct {
	Name   string `json:"name"`
	Count  int64  `json:"count"`
	Weight int64  `json:"weight"`
	Points int64  `json:"points"`
}

// Blast radius weights (formula version 1); see docs/agentdiff.md.
const (
	WeightCreated         = 1
	WeightModified        = 2
	WeightDeleted         = 4
	WeightReview          = 2
	WeightDeny            = 10
	WeightUnrecoverable   = 3
	WeightBytesLog2       = 1
	WeightLimitViolation  = 10
	WeightDescendant      = 2
	WeightPortOpened      = 5
	WeightCapsuleTampered = 25
)

// blastRadius computes the score. bytesWritten contributes
// bits.Len64(bytes/4096) points: 1 point per doubling above 4 KiB.
func blastRadius(changes []Change, bytesWritten int64, violations, descendants, portsOpened, tampered int) BlastRadius {
	var created, modified, deleted, review, deny, unrec int64
	for _, c := range changes {
		switch c.Change {
		case Created:
			created++
		case Modified:
			modified++
		case Deleted:
			deleted++
		}
		switch c.Decision {
		case Review:
			review++
		case Deny:
			deny++
		}
		if !c.Recovery.Available {
			unrec++
		}
	}
	comp := []Component{
		{Name: "files_created", Count: created, Weight: WeightCreated},
		{Name: "files_modified", Count: modified, Weight: WeightModified},
		{Name: "files_deleted", Count: deleted, Weight: WeightDeleted},
		{Name: "review_decisions", Count: review, Weight: WeightReview},
		{Name: "deny_decisions", Count: deny, Weight: WeightDeny},
		{Name: "unrecoverable_changes", Count: unrec, Weight: WeightUnrecoverable},
		{Name: "bytes_written_log2_4k", Count: int64(bits.Len64(uint64(max(bytesWritten, 0)) / 4096)), Weight: WeightBytesLog2},
		{Name: "limit_violations", Count: int64(violations), Weight: WeightLimitViolation},
		{Name: "descendants_killed", Count: int64(descendants), Weight: WeightDescendant},
		{Name: "listening_ports_opened", Count: int64(portsOpened), Weight: WeightPortOpened},
		{Name: "capsule_tampering", Count: int64(tampered), Weight: WeightCapsuleTampered},
	}
	var score int64
	for i := range comp {
		comp[i].Points = comp[i].Count * comp[i].Weight
		score += comp[i].Points
	}
	return BlastRadius{FormulaVersion: 1, Score: score, Level: level(score), Components: comp}
}

func level(score int64) string {
	switch {
	case score == 0:
		return "none"
	case score < 10:
		return "low"
	case score < 50:
		return "medium"
	case score < 200:
		return "high"
	}
	return "critical"
}

// checkLimits compares counts with the policy limits.
func checkLimits(l Limits, changes []Change, bytesWritten int64, dur time.Duration) []LimitViolation {
	out := []LimitViolation{}
	var deleted int64
	for _, c := range changes {
		if c.Change == Deleted {
			deleted++
		}
	}
	if l.MaxFilesChanged > 0 && int64(len(changes)) > l.MaxFilesChanged {
		out = append(out, LimitViolation{Limit: "max_files_changed", Value: int64(len(changes)), Max: l.MaxFilesChanged})
	}
	if l.MaxFilesDeleted > 0 && deleted > l.MaxFilesDeleted {
		out = append(out, LimitViolation{Limit: "max_files_deleted", Value: deleted, Max: l.MaxFilesDeleted})
	}
	if l.MaxBytesWritten > 0 && bytesWritten > l.MaxBytesWritten {
		out = append(out, LimitViolation{Limit: "max_bytes_written", Value: bytesWritten, Max: l.MaxBytesWritten,
			Detail: "sum of the post-run sizes of created and content-modified regular files"})
	}
	if l.MaxDuration > 0 && dur > time.Duration(l.MaxDuration) {
		out = append(out, LimitViolation{Limit: "max_duration", Value: dur.Milliseconds(), Max: time.Duration(l.MaxDuration).Milliseconds(),
			Detail: fmt.Sprintf("ran %s, limit %s (milliseconds)", dur.Round(time.Millisecond), time.Duration(l.MaxDuration))})
	}
	return out
}

// bytesWritten sums post-run sizes of created and content-modified files
// (ai maps the changed paths to their after entries).
func bytesWritten(changes []Change, ai map[string]*ManifestEntry) int64 {
	var n int64
	for _, c := range changes {
		if c.Change == Deleted {
			continue
		}
		a := ai[c.Path]
		if a == nil || a.Type != "file" {
			continue
		}
		if c.Change == Created || containsStr(c.Aspects, "content") || containsStr(c.Aspects, "type") {
			n += a.Size
		}
	}
	return n
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// finalStatus maps the run to exactly one status.
func finalStatus(blocked bool, execErr error, exit *ExitState, outcome Decision, warnings int) string {
	switch {
	case blocked:
		return StatusBlocked
	case execErr != nil:
		return StatusError
	case exit != nil && exit.TimedOut:
		return StatusTimedOut
	case exit == nil || !exit.Exited || exit.ExitCode != 0:
		return StatusFailed
	case outcome == Deny:
		return StatusDenied
	case outcome == Review || warnings > 0:
		return StatusReview
	}
	return StatusPassed
}
