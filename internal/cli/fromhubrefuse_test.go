package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// bombIncrement is a well-formed increment at position 0 holding one file
// of size zero bytes: it compresses to about a thousandth of that.
func bombIncrement(t *testing.T, root string, size int) []byte {
	t.Helper()
	meta, _ := json.Marshal(incmeta.Meta{Version: 1, Position: 0, SessionID: "native-1", Kind: changelog.KindCall, CreatedAt: time.Now().UTC(),
		Roots: []incmeta.Root{{Name: "checkout", Path: root, Prefix: strings.TrimPrefix(root, "/"), Exists: true}}, RemovedRoots: []string{}})
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	add := func(name string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, Format: tar.FormatGNU}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add(incmeta.Member, meta)
	add(strings.TrimPrefix(root, "/")+"/zeros.bin", make([]byte, size))
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// A refused apply --from-hub (a hostile increment, or one that unpacks past
// the Work's grant: exit 4) onto a fresh directory creates nothing: not the
// directory, not a client connection holding the token, not a changelog.
// Increments crafted by a read-write token holder, stored by a real Hub on
// loopback (the bomb before its Work's grant was lowered).
func TestApplyFromHubRefusesBeforeCreatingAnything(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	cfg := filepath.Join(env["HOME"], ".config", "agentscm")
	must := func(args ...string) string {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	data := filepath.Join(base, "hub")
	must("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	must("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	tok := filepath.Join(base, "token")
	must("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tok)
	svc, err := hub.Open(context.Background(), data, hub.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(hub.NewHandler(svc, nil))
	defer srv.Close()
	a := filepath.Join(base, "a")
	os.MkdirAll(a, 0o755)
	if out, err := exec.Command("git", "-C", a, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	must("client", "setup", "--root", a, "--hub", srv.URL, "--repository", "proj", "--token-file", tok)
	// upload stores body as position 0 of a new Work, then sets the
	// Work's byte grant to grantBytes: lowering a grant keeps what is
	// stored (a Hub refuses to store an increment that unpacks past the
	// grant, so the bomb is stored under a larger one, as an older Hub
	// would have stored it).
	upload := func(body []byte, grantBytes string) string {
		t.Helper()
		var w api.Work
		json.Unmarshal([]byte(must("work", "start", "--root", a, "--changelog-max-bytes", "1073741824", "--format", "json")), &w)
		defer must("work", "grant", "--root", a, "--work-id", w.ID, "--max-bytes", grantBytes)
		cc, err := connections.Lookup(cfg, a)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := client.Open(context.Background(), cc, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sum := sha256.Sum256(body)
		if _, err := conn.UploadIncrement(context.Background(), cc.WorktreeID, api.IncrementUpload{Position: 0, Session: "native-1", Digest: hex.EncodeToString(sum[:])}, body); err != nil {
			t.Fatalf("upload: %v", err)
		}
		return w.ID
	}
	bomb := bombIncrement(t, a, 16<<20)
	if len(bomb) > 64<<10 {
		t.Fatalf("the crafted increment is %d bytes", len(bomb))
	}
	cases := []struct {
		name, work, want string
	}{
		{"a member climbing out with ..", upload(hostileIncrement(t, a, 0), "1073741824"), `".." component`},
		{"16 MiB unpacked from a grant of 1 MiB", upload(bomb, "1048576"), "unpacks to more than 1048576 bytes, over the 1048576-byte changelog grant of wrk_"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			connsBefore, _ := os.ReadFile(filepath.Join(cfg, "connections.json"))
			for _, fresh := range []string{
				filepath.Join(base, "missing", string(rune('a'+i)), "deep"), // does not exist
				mkdir(t, filepath.Join(base, "empty", string(rune('a'+i)))), // exists, empty, no connection
			} {
				r := runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "0", "--from-hub", "--work", tc.work)
				if r.code != ExitUnreadableArchive || !strings.Contains(r.stderr, tc.want) {
					t.Fatalf("apply --from-hub onto %s: %d %s, want %d saying %q", fresh, r.code, r.stderr, ExitUnreadableArchive, tc.want)
				}
				if strings.Contains(r.stderr, "connected ") {
					t.Errorf("the refused apply says it connected:\n%s", r.stderr)
				}
				if ents, err := os.ReadDir(fresh); err == nil && len(ents) > 0 || strings.Contains(fresh, "missing") && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused apply created %s (%v, %v)", fresh, ents, err)
				}
				if _, err := connections.Lookup(cfg, fresh); !errors.Is(err, connections.ErrNoConnection) {
					t.Errorf("the refused apply saved a connection for %s: %v", fresh, err)
				}
				if _, err := os.Stat(changelog.DirFor(cfg, fresh)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused apply made a changelog for %s: %v", fresh, err)
				}
			}
			if after, _ := os.ReadFile(filepath.Join(cfg, "connections.json")); !bytes.Equal(after, connsBefore) {
				t.Errorf("the refused apply rewrote the connections file:\n%s\n->\n%s", connsBefore, after)
			}
			if _, err := os.Stat(filepath.Join(base, "escaped.txt")); err == nil {
				t.Errorf("the hostile member was written")
			}
		})
	}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// A dry run of apply --from-hub onto a missing directory creates nothing
// either, and says what it needs.
func TestApplyFromHubDryRunCreatesNothing(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	cfg := filepath.Join(env["HOME"], ".config", "agentscm")
	a := filepath.Join(base, "a")
	os.MkdirAll(a, 0o755)
	if out, err := exec.Command("git", "-C", a, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	must := func(args ...string) string {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	must("client", "setup", "--root", a, "--local", "--repository", "proj")
	var w api.Work
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--format", "json")), &w)
	must("changelog", "enable", "--root", a, "--no-transcript-root")
	os.WriteFile(filepath.Join(a, "one.txt"), []byte("1"), 0o644)
	p := `{"session_id":"native-1","cwd":"` + a + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_0"}`
	if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 {
		t.Fatalf("hook: %d %s", r.code, r.stderr)
	}
	fresh := filepath.Join(base, "missing", "fresh")
	r := runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "0", "--from-hub", "--work", w.ID, "--dry-run")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--dry-run with --from-hub needs a checkout with a changelog") {
		t.Fatalf("dry run onto a missing directory: %d %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dry run created %s: %v", fresh, err)
	}
	if _, err := connections.Lookup(cfg, fresh); !errors.Is(err, connections.ErrNoConnection) {
		t.Errorf("the dry run saved a connection: %v", err)
	}
	// Without --dry-run the same apply creates, connects and restores it.
	r = runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "0", "--from-hub", "--work", w.ID)
	if r.code != 0 && r.code != ExitPartial || !strings.Contains(r.stderr, "connected "+fresh) { // partial: a withheld conversation root
		t.Fatalf("apply onto a missing directory: %d %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, "one.txt")); string(b) != "1" {
		t.Errorf("one.txt after the apply: %q", b)
	}
}

// A local apply of an increment holding a member name no file system can
// hold (a 300-byte component) is refused as hostile, exit 4, before the
// undo point is stored: the changelog keeps its positions and the checkout
// its files.
func TestLocalApplyRefusesLongNameExit4(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	cfg := filepath.Join(env["HOME"], ".config", "agentscm")
	root := filepath.Join(base, "repo")
	os.MkdirAll(root, 0o755)
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	root, _ = filepath.EvalSymlinks(root)
	must := func(args ...string) string {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != 0 {
			t.Fatalf("%v: %d %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	must("changelog", "enable", "--root", root, "--no-transcript-root")
	for i := range 2 {
		os.WriteFile(filepath.Join(root, "f.txt"), []byte(fmt.Sprint(i)), 0o644)
		must("changelog", "capture", "--root", root)
	}
	inc := filepath.Join(changelog.DirFor(cfg, root), "increments", changelog.IncrementName(1))
	meta, err := changelog.ReadMeta(inc)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := json.Marshal(meta)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, m := range []struct{ name, body string }{{incmeta.Member, string(mb)}, {strings.TrimPrefix(root, "/") + "/" + strings.Repeat("n", 300), "x"}} {
		tw.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(len(m.body)), Typeflag: tar.TypeReg, Format: tar.FormatGNU})
		tw.Write([]byte(m.body))
	}
	tw.Close()
	gz.Close()
	if err := os.WriteFile(inc, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	before := must("changelog", "list", "--root", root, "--format", "json")
	r := runMain(t, env, "", "changelog", "apply", "--root", root, "--to", "1")
	if r.code != ExitUnreadableArchive || !strings.Contains(r.stderr, "longer than any file name") || strings.Contains(r.stderr, "undo with") {
		t.Fatalf("apply of the long name: %d %s", r.code, r.stderr)
	}
	if after := must("changelog", "list", "--root", root, "--format", "json"); after != before {
		t.Errorf("the refused apply stored an undo point:\n%s\n->\n%s", before, after)
	}
}
