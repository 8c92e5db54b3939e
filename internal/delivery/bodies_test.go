package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// secretPrompt carries a credential shape the redaction replaces and a
// marker that shows whether the prompt's text reached the Hub.
const (
	bodyMarker   = "zebra-quartz-marker-4711"
	secretValue  = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	secretPrompt = "please deploy " + bodyMarker + " with GITHUB_TOKEN=" + secretValue
)

func (f *fixture) bodyConn(t *testing.T) client.BodyConn {
	t.Helper()
	conn, err := client.Open(context.Background(), f.conn, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn.(client.BodyConn)
}

// hubBytesContain reports whether any file of the embedded Hub (database,
// WAL, object directory) contains s.
func (f *fixture) hubBytesContain(t *testing.T, s string) []string {
	t.Helper()
	var hits []string
	filepath.Walk(filepath.Join(f.cfg, client.LocalHubDir), func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(s)) {
			hits = append(hits, p)
		}
		return nil
	})
	return hits
}

func (f *fixture) objectCount(t *testing.T) int {
	t.Helper()
	n := 0
	filepath.Walk(filepath.Join(f.cfg, client.LocalHubDir, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n++
		}
		return nil
	})
	return n
}

func (f *fixture) promptSession(t *testing.T, native string) {
	t.Helper()
	pl := func(ev, extra string) string {
		return `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	f.hook(t, pl("SessionStart", `,"source":"startup"`))
	f.hook(t, pl("UserPromptSubmit", `,"prompt":"`+secretPrompt+`"`))
	f.hook(t, pl("Stop", ""))
}

// TestSharedBodiesUploadAfterAcceptance: in shared-conversation mode the
// prompt body is declared with its event, uploaded after the Hub accepted
// it, readable by its author, redacted; the change record has no body.
func TestSharedBodiesUploadAfterAcceptance(t *testing.T) {
	f := newFixtureWith(t, func(o *capture.EnableOptions) { o.Mode = event.ModeSharedConversation })
	work := f.startWork(t)
	f.promptSession(t, "native-shared")
	bc := f.bodyConn(t)
	list, err := bc.ListBodies(context.Background(), work)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Bodies) != 1 || list.Bodies[0].State != api.BodyAvailable || list.Bodies[0].Retention != api.RetentionSharedApproved {
		t.Fatalf("bodies: %+v", list)
	}
	b, err := bc.GetBody(context.Background(), work, list.Bodies[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(bodyMarker)) || bytes.Contains(b, []byte(secretValue)) || !bytes.Contains(b, []byte("[REDACTED:")) {
		t.Fatalf("uploaded body: %s", b)
	}
	if hits := f.hubBytesContain(t, secretValue); len(hits) != 0 {
		t.Fatalf("the unredacted secret reached the Hub: %v", hits)
	}
	rec := f.record(t, work)
	if strings.Contains(fmtRecord(rec), bodyMarker) {
		t.Fatal("the change record carries a body")
	}
}

func fmtRecord(r api.ChangeRecord) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// TestOtherModesUploadNothing: in metadata-only and local-conversation
// mode nothing of a body reaches the Hub: no declaration, no object, and
// not one byte of its text anywhere in the Hub's files.
func TestOtherModesUploadNothing(t *testing.T) {
	for _, mode := range []string{event.ModeMetadataOnly, event.ModeLocalConversation} {
		t.Run(mode, func(t *testing.T) {
			f := newFixtureWith(t, func(o *capture.EnableOptions) { o.Mode = mode })
			work := f.startWork(t)
			f.promptSession(t, "native-"+mode)
			list, err := f.bodyConn(t).ListBodies(context.Background(), work)
			if err != nil || len(list.Bodies) != 0 {
				t.Fatalf("bodies: %+v %v", list, err)
			}
			if n := f.objectCount(t); n != 0 {
				t.Fatalf("%d objects on the Hub", n)
			}
			for _, s := range []string{bodyMarker, secretValue, "please deploy"} {
				if hits := f.hubBytesContain(t, s); len(hits) != 0 {
					t.Fatalf("%q reached the Hub: %v", s, hits)
				}
			}
		})
	}
}

// TestMidSessionSwitchStaysLocal: a session that started in
// local-conversation mode keeps its bodies local after the checkout
// switches to shared-conversation; the next session shares. Switching away
// stops uploads at the next delivery.
func TestMidSessionSwitchStaysLocal(t *testing.T) {
	f := newFixtureWith(t, func(o *capture.EnableOptions) { o.Mode = event.ModeLocalConversation })
	work := f.startWork(t)
	pl := func(native, ev, extra string) string {
		return `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	f.hook(t, pl("s1", "SessionStart", `,"source":"startup"`))
	if _, err := capture.SetCaptureMode(context.Background(), f.store, Connections{f.cfg}, f.root, event.ModeSharedConversation, nil); err != nil {
		t.Fatal(err)
	}
	f.hook(t, pl("s1", "UserPromptSubmit", `,"prompt":"first session `+bodyMarker+`"`))
	bc := f.bodyConn(t)
	if list, _ := bc.ListBodies(context.Background(), work); len(list.Bodies) != 0 {
		t.Fatalf("a session that started local declared bodies: %+v", list)
	}
	if hits := f.hubBytesContain(t, bodyMarker); len(hits) != 0 {
		t.Fatalf("the local session's body reached the Hub: %v", hits)
	}
	f.hook(t, pl("s2", "SessionStart", `,"source":"startup"`))
	f.hook(t, pl("s2", "UserPromptSubmit", `,"prompt":"second session"`))
	list, _ := bc.ListBodies(context.Background(), work)
	if len(list.Bodies) != 1 || list.Bodies[0].State != api.BodyAvailable {
		t.Fatalf("the next session's body: %+v", list)
	}
	// Switching away: the next body is not uploaded.
	if _, err := capture.SetCaptureMode(context.Background(), f.store, Connections{f.cfg}, f.root, event.ModeMetadataOnly, nil); err != nil {
		t.Fatal(err)
	}
	f.hook(t, pl("s2", "UserPromptSubmit", `,"prompt":"after switching away `+bodyMarker+`"`))
	if list, _ := bc.ListBodies(context.Background(), work); len(list.Bodies) != 1 {
		t.Fatalf("after switching away: %+v", list)
	}
	if hits := f.hubBytesContain(t, bodyMarker); len(hits) != 0 {
		t.Fatalf("a body reached the Hub after switching away: %v", hits)
	}
}
