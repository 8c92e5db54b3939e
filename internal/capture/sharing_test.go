package capture

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
)

// ConversationSharing shares only for an enabled shared-conversation
// binding of the connected repository and Hub, and only a session observed
// to start in that mode; it writes nothing.
func TestConversationSharing(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "repo")
	cases := []struct {
		name       string
		mode       string // "" for no binding
		enabled    bool
		started    string // the mode the session was observed to start in ("" none)
		hub, repo  string
		wantMode   string
		wantShare  bool
		wantReason string
	}{
		{"no binding", "", false, "", "", "", event.ModeMetadataOnly, false, "no enabled capture binding"},
		{"disabled", event.ModeSharedConversation, false, event.ModeSharedConversation, "", "", event.ModeMetadataOnly, false, "no enabled capture binding"},
		{"metadata-only", event.ModeMetadataOnly, true, event.ModeMetadataOnly, "", "", event.ModeMetadataOnly, false, "metadata-only mode"},
		{"local", event.ModeLocalConversation, true, event.ModeLocalConversation, "", "", event.ModeLocalConversation, false, "local-conversation mode"},
		{"shared", event.ModeSharedConversation, true, event.ModeSharedConversation, "https://hub", "proj", event.ModeSharedConversation, true, ""},
		{"started local", event.ModeSharedConversation, true, event.ModeLocalConversation, "", "", event.ModeSharedConversation, false, "sharing starts with the next session"},
		{"start not observed", event.ModeSharedConversation, true, "", "", "", event.ModeSharedConversation, false, "was not observed"},
		{"other hub", event.ModeSharedConversation, true, event.ModeSharedConversation, "https://other", "proj", event.ModeSharedConversation, false, "saved for"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := StateDir{Dir: filepath.Join(dir, "cfg", tc.name)}
			spool := filepath.Join(dir, "spool", tc.name)
			if tc.mode != "" {
				err := s.Bindings().Update(func(c *binding.Config) (bool, error) {
					c.Bindings = append(c.Bindings, binding.Binding{Root: root, Spool: spool, CaptureMode: tc.mode, Enabled: tc.enabled, Hub: "https://hub", Repository: "proj"})
					return true, nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if tc.started != "" {
				if _, err := s.Observe(&binding.Binding{Spool: spool, CaptureMode: tc.started}, "sess", "SessionStart", "startup"); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.ConversationSharing(root, "sess", tc.hub, tc.repo)
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tc.wantMode || got.Share != tc.wantShare || !strings.Contains(got.Reason, tc.wantReason) {
				t.Fatalf("case %d: %+v, want mode %s share %v reason %q", i, got, tc.wantMode, tc.wantShare, tc.wantReason)
			}
		})
	}
}
