package hookrun

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hookcore"
)

// The parts keep the messages their own hooks gave before the pipeline
// (the "agentscm: warning: " prefix is ClaudeHook's, once per line).
func TestPartMessages(t *testing.T) {
	inc := &changelog.Increment{Position: 7}
	for _, tc := range []struct {
		name string
		res  *changelog.HookResult
		err  error
		want string
	}{
		{"failed", nil, errors.New("boom\nsecond line"), "changelog hook failed: boom second line"},
		{"ignored", &changelog.HookResult{Ignored: true}, nil, ""},
		{"stored, no remote", &changelog.HookResult{Increment: inc}, nil, ""},
		{"full increment", &changelog.HookResult{Increment: &changelog.Increment{Position: 3, Warning: "state lost"}}, nil, "changelog increment 3: state lost"},
		{"hub down", &changelog.HookResult{Increment: inc, Upload: &changelog.UploadOutcome{Err: "dial refused", Pending: 2}}, nil,
			"changelog increment 7 stored locally; 2 positions wait for the Hub: dial refused"},
		{"no work", &changelog.HookResult{Increment: inc, Upload: &changelog.UploadOutcome{LocalOnly: "no current Work"}}, nil,
			"changelog increment 7 kept locally only: no current Work"},
		{"refused", &changelog.HookResult{Increment: inc, Upload: &changelog.UploadOutcome{Refused: []int{7}, RefusedReason: "grant"}}, nil,
			"changelog increment 7 stored locally; the Hub refused it (grant), so the next uploaded increment carries its writes"},
		{"uploaded", &changelog.HookResult{Increment: inc, Upload: &changelog.UploadOutcome{Uploaded: []int{7}}}, nil, ""},
	} {
		if got := changelogWarning(tc.res, tc.err); got != tc.want {
			t.Errorf("%s: changelogWarning = %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		res  *capture.HookResult
		err  error
		want string
	}{
		{"failed", nil, errors.New("no spool"), "capture hook failed: no spool"},
		{"conflict", nil, fmt.Errorf("%w: PreToolUse x", capture.ErrOccurrenceConflict), "occurrence conflict: PreToolUse x"},
		{"failed with capacity", &capture.HookResult{Warning: "80% used"}, errors.New("no spool"), "capture hook failed: no spool; 80% used"},
		{"delivery pending", &capture.HookResult{DeliveryErr: errors.New("hub down")}, nil, "event retained locally, delivery pending: hub down"},
		{"capacity only", &capture.HookResult{Warning: "80% used"}, nil, "80% used"},
		{"quiet", &capture.HookResult{}, nil, ""},
	} {
		if got := hookcore.CaptureWarning(tc.res, tc.err); got != tc.want {
			t.Errorf("%s: captureWarning = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A stale turn set aside by a prompt and a failed lease renewal are said
// once each.
func TestTurnMessages(t *testing.T) {
	st := changelog.TurnStatus{Turn: changelog.Turn{SessionID: "s9", Agent: "codex"}, Stale: "its agent process 7 (codex) is gone"}
	if got := changelogWarning(&changelog.HookResult{SetAside: []changelog.TurnStatus{st}}, nil); !strings.Contains(got, "set aside the stale turn of session s9 (codex, since") || !strings.Contains(got, "is gone") {
		t.Fatalf("set aside: %q", got)
	}
	got := changelogWarning(&changelog.HookResult{Increment: &changelog.Increment{Position: 2}, TurnWarning: "renew the turn's lease: disk full"}, nil)
	if got != "changelog: renew the turn's lease: disk full" {
		t.Fatalf("renewal: %q", got)
	}
}
