package delivery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
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
	filepath.Walk(filepath.Join(f.cfg, connections.LocalHubDir), func(p string, info os.FileInfo, err error) error {
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
	filepath.Walk(filepath.Join(f.cfg, connections.LocalHubDir, "objects"), func(p string, info os.FileInfo, err error) error {
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
	f := newFixtureWith(t, func(o *binding.EnableOptions) { o.Mode = event.ModeSharedConversation })
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
			f := newFixtureWith(t, func(o *binding.EnableOptions) { o.Mode = mode })
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
	f := newFixtureWith(t, func(o *binding.EnableOptions) { o.Mode = event.ModeLocalConversation })
	work := f.startWork(t)
	pl := func(native, ev, extra string) string {
		return `{"session_id":"` + native + `","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	f.hook(t, pl("s1", "SessionStart", `,"source":"startup"`))
	if _, err := binding.SetCaptureMode(context.Background(), f.store, Connections{f.cfg}, f.root, event.ModeSharedConversation, nil); err != nil {
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
	if _, err := binding.SetCaptureMode(context.Background(), f.store, Connections{f.cfg}, f.root, event.ModeMetadataOnly, nil); err != nil {
		t.Fatal(err)
	}
	f.hook(t, pl("s2", "UserPromptSubmit", `,"prompt":"after switching away `+bodyMarker+`"`))
	if list, _ := bc.ListBodies(context.Background(), work); len(list.Bodies) != 1 {
		t.Fatalf("after switching away: %+v", list)
	}
	if hits := f.hubBytesContain(t, bodyMarker); len(hits) != 0 {
		t.Fatalf("a body reached the Hub after switching away: %v", hits)
	}

	// The object of the shared copy is lost: the read returns it to
	// awaiting upload, and UploadShared (change-capture conversation
	// --upload) uploads it again from the spool, and nothing else: the
	// spool's local bodies stay local.
	if _, err := binding.SetCaptureMode(context.Background(), f.store, Connections{f.cfg}, f.root, event.ModeSharedConversation, nil); err != nil {
		t.Fatal(err)
	}
	d := list.Bodies[0].Digest
	if err := os.Remove(filepath.Join(f.cfg, connections.LocalHubDir, "objects", d[:2], d)); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.GetBody(context.Background(), work, d); err == nil {
		t.Fatal("read a lost object")
	}
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := sp.Events()
	if err != nil {
		t.Fatal(err)
	}
	res, err := UploadShared(context.Background(), bc, f.spool, work, recs)
	if err != nil || res.Shared != 1 || res.Missing != 1 || res.Uploaded != 1 {
		t.Fatalf("upload: %+v %v", res, err)
	}
	if b, err := bc.GetBody(context.Background(), work, d); err != nil || !bytes.Contains(b, []byte("second session")) {
		t.Fatalf("read after the re-upload: %s %v", b, err)
	}
	if hits := f.hubBytesContain(t, bodyMarker); len(hits) != 0 {
		t.Fatalf("a local body reached the Hub: %v", hits)
	}
	if res, err := UploadShared(context.Background(), bc, f.spool, work, recs); err != nil || res.Missing != 0 {
		t.Fatalf("second upload: %+v %v", res, err)
	}
}

// pendingWithBody counts the spool's pending envelopes that declare a
// shared-approved body.
func (f *fixture) pendingWithBody(t *testing.T) int {
	t.Helper()
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	envs, err := sp.Pending(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range envs {
		if d := bodyDeclaration(e.Record); d != nil && d.Retention == api.RetentionSharedApproved {
			n++
		}
	}
	return n
}

// TestBodyUploadFailureKeepsEnvelopePending: the Hub accepts the event but
// its object store fails (an object's fan-out directory is a file): the
// envelope stays pending and the body awaits upload; once the store is
// back, the next hook's delivery once the next attempt is due replays the envelope (a duplicate), uploads
// the body and acknowledges it.
func TestBodyUploadFailureKeepsEnvelopePending(t *testing.T) {
	f := newFixtureWith(t, func(o *binding.EnableOptions) { o.Mode = event.ModeSharedConversation })
	work := f.startWork(t)
	// The object's fan-out directory is a file: the object write fails
	// (a server error) while the database answers.
	prompt := "during the outage " + bodyMarker
	bb, _ := json.Marshal(event.Body{Prompt: prompt})
	sum := sha256.Sum256(bb)
	blocker := filepath.Join(f.cfg, connections.LocalHubDir, "objects", hex.EncodeToString(sum[:])[:2])
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pl := func(ev, extra string) string {
		return `{"session_id":"native-out","cwd":"` + f.root + `","hook_event_name":"` + ev + `"` + extra + `}`
	}
	f.hook(t, pl("SessionStart", `,"source":"startup"`))
	res := f.hook(t, pl("UserPromptSubmit", `,"prompt":"`+prompt+`"`))
	if res.Failed == 0 || res.DeliveryErr == nil {
		t.Fatalf("the failed upload did not fail the delivery: %+v", res)
	}
	bc := f.bodyConn(t)
	list, err := bc.ListBodies(context.Background(), work)
	if err != nil || len(list.Bodies) != 1 || list.Bodies[0].State != api.BodyAwaitingUpload {
		t.Fatalf("bodies during the outage: %+v %v", list, err)
	}
	if n := f.pendingWithBody(t); n != 1 {
		t.Fatalf("%d pending envelopes with a body, want 1", n)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	// The first hook after the next attempt is due (the one retry policy,
	// capture.TransientRetry: no hook attempts before).
	time.Sleep(capture.TransientRetry.First + 50*time.Millisecond)
	f.hook(t, pl("Stop", ""))
	list, _ = bc.ListBodies(context.Background(), work)
	if len(list.Bodies) != 1 || list.Bodies[0].State != api.BodyAvailable {
		t.Fatalf("bodies after the outage: %+v", list)
	}
	if n := f.pendingWithBody(t); n != 0 {
		t.Fatalf("%d pending envelopes with a body after the upload", n)
	}
	b, err := bc.GetBody(context.Background(), work, list.Bodies[0].Digest)
	if err != nil || !bytes.Contains(b, []byte(bodyMarker)) {
		t.Fatalf("body: %s %v", b, err)
	}
}

// TestBodyDeclarations: which records declare a body, and how.
func TestBodyDeclarations(t *testing.T) {
	ref := func(n int64, avail string) *event.ArtifactRef {
		return &event.ArtifactRef{Digest: "sha256:" + strings.Repeat("a", 64), Bytes: n, MediaType: "application/json", Retention: "x", Availability: avail}
	}
	cases := []struct {
		name      string
		rec       event.Record
		retention string // "" = no declaration
		avail     string
	}{
		{"metadata-only", event.Record{CaptureMode: event.ModeMetadataOnly}, "", ""},
		{"local without a body", event.Record{CaptureMode: event.ModeLocalConversation}, "", ""},
		{"local with a body", event.Record{CaptureMode: event.ModeLocalConversation, BodyRef: ref(10, event.AvailabilityRetained)}, "", ""},
		{"shared", event.Record{CaptureMode: event.ModeSharedConversation, BodyRef: ref(10, event.AvailabilityRetained)}, api.RetentionSharedApproved, api.BodyRetained},
		{"shared at the cap", event.Record{CaptureMode: event.ModeSharedConversation, BodyRef: ref(1<<20, event.AvailabilityRetained)}, api.RetentionSharedApproved, api.BodyRetained},
		{"shared over the cap", event.Record{CaptureMode: event.ModeSharedConversation, BodyRef: ref(1<<20+1, event.AvailabilityRetained)}, api.RetentionWorkLocal, api.BodyRetained},
		{"shared, not retained", event.Record{CaptureMode: event.ModeSharedConversation, BodyRef: ref(10, event.AvailabilityMissing)}, api.RetentionSharedApproved, api.BodyMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := bodyDeclaration(tc.rec)
			if tc.retention == "" {
				if d != nil {
					t.Fatalf("declared %+v", d)
				}
				return
			}
			if d == nil || d.Retention != tc.retention || d.Availability != tc.avail || d.Digest != strings.Repeat("a", 64) || d.CaptureMode != event.ModeSharedConversation {
				t.Fatalf("declaration %+v", d)
			}
		})
	}
}
