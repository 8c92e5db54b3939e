package capture

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
)

// observeStart defers only the record of a new session's startup
// SessionStart outside shared-conversation mode, and then gives exactly
// the observation and the record Observe gives, whether the deferred write
// runs first or a concurrent hook of the session recorded it before.
func TestObserveStartMatchesObserve(t *testing.T) {
	cases := []struct {
		name          string
		mode          string
		event, source string
		existing      bool // a record exists already (a concurrent or earlier hook)
		wantDeferred  bool
	}{
		{"startup metadata-only", event.ModeMetadataOnly, "SessionStart", "startup", false, true},
		{"startup local", event.ModeLocalConversation, "SessionStart", "startup", false, true},
		{"startup shared is serial", event.ModeSharedConversation, "SessionStart", "startup", false, false},
		{"resume is serial", event.ModeMetadataOnly, "SessionStart", "resume", false, false},
		{"first event not a start", event.ModeMetadataOnly, "UserPromptSubmit", "", false, false},
		{"recorded already", event.ModeMetadataOnly, "SessionStart", "startup", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := &binding.Binding{Spool: filepath.Join(dir, "spool"), CaptureMode: tc.mode}
			serial, deferred := StateDir{Dir: filepath.Join(dir, "serial")}, StateDir{Dir: filepath.Join(dir, "deferred")}
			if tc.existing {
				for _, s := range []StateDir{serial, deferred} {
					if _, err := s.Observe(b, "sess", "UserPromptSubmit", ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			want, err := serial.Observe(b, "sess", tc.event, tc.source)
			if err != nil {
				t.Fatal(err)
			}
			got, write, err := deferred.observeStart(b, "sess", tc.event, tc.source)
			if err != nil {
				t.Fatal(err)
			}
			if (write != nil) != tc.wantDeferred {
				t.Fatalf("deferred write %v, want %v", write != nil, tc.wantDeferred)
			}
			if write != nil {
				if err := write(); err != nil {
					t.Fatal(err)
				}
				// A second writer of the same session (the concurrent
				// hook that lost the race) is not an error.
				if err := write(); err != nil {
					t.Fatalf("second write: %v", err)
				}
			}
			if got != want {
				t.Fatalf("observation %+v, want Observe's %+v", got, want)
			}
			sp, _ := serial.sessionPath(b.Spool, "sess")
			dp, _ := deferred.sessionPath(b.Spool, "sess")
			sb, err1 := os.ReadFile(sp)
			db, err2 := os.ReadFile(dp)
			if err1 != nil || err2 != nil || string(sb) != string(db) {
				t.Fatalf("records differ: %q (%v) against %q (%v)", db, err2, sb, err1)
			}
			// A later event of the session is observed the same way.
			l1, _ := serial.Observe(b, "sess", "PreToolUse", "")
			l2, _ := deferred.Observe(b, "sess", "PreToolUse", "")
			if l1 != l2 || l2.StartedLate {
				t.Fatalf("later event: %+v against %+v", l2, l1)
			}
		})
	}
}
