package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// hostileIncrement is a well-formed increment at position pos whose metadata
// the Hub accepts but whose member climbs out of the checkout with "..".
func hostileIncrement(t *testing.T, root string, pos int) []byte {
	t.Helper()
	meta, _ := json.Marshal(incmeta.Meta{Version: 1, Position: pos, SessionID: "native-1", Kind: changelog.KindCall, CreatedAt: time.Now().UTC(),
		Roots: []incmeta.Root{{Name: "checkout", Path: root, Prefix: strings.TrimPrefix(root, "/"), Exists: true}}, RemovedRoots: []string{}})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, Format: tar.FormatGNU}); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add(incmeta.Member, meta)
	add(strings.TrimPrefix(root, "/")+"/../../escaped.txt", []byte("evil"))
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// files lists a tree's regular files and their contents, leaving out .git
// and the Claude settings (whose capture hooks differ by design).
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".git" || rel == ".claude" {
			return filepath.SkipDir
		}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Three tool calls on a checkout connected to the embedded Hub go to its
// current Work; apply --from-hub --to 1 onto a fresh directory reproduces
// the checkout after call 1.
func TestChangelogApplyFromHub(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
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
	// The checkout shares no conversation (metadata-only), so the Hub's
	// increments withhold its transcript root: every apply --from-hub
	// lists it and is partial (exit 8).
	fromHub := func(args ...string) string {
		t.Helper()
		r := runMain(t, env, "", args...)
		if r.code != ExitPartial || !strings.Contains(r.stderr, "the rewind is partial") || !strings.Contains(r.stderr, changelog.TranscriptRootName+": withheld from the Hub") {
			t.Fatalf("%v: %d, want %d listing the withheld %s:\n%s", args, r.code, ExitPartial, changelog.TranscriptRootName, r.stderr)
		}
		return r.stdout
	}
	must("client", "setup", "--root", a, "--local", "--repository", "proj")
	var w api.Work
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--changelog-max-objects", "50", "--format", "json")), &w)
	must("changelog", "enable", "--root", a)
	call := func(i int, rel, content string) {
		t.Helper()
		os.WriteFile(filepath.Join(a, rel), []byte(content), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		r := runMain(t, env, p, "changelog", "hook-claude")
		if r.code != 0 || r.stdout != "" || r.stderr != "" {
			t.Fatalf("hook %d: %d %q %q", i, r.code, r.stdout, r.stderr)
		}
	}
	call(0, "one.txt", "1")
	call(1, "two.txt", "2")
	after1 := files(t, a)
	os.Remove(filepath.Join(a, "one.txt"))
	call(2, "three.txt", "3")

	var list api.IncrementList
	if err := json.Unmarshal([]byte(must("changelog", "list", "--root", a, "--from-hub", "--format", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.WorkID != w.ID || len(list.Increments) != 3 || list.Grant.MaxObjects != 50 || list.Used.Objects != 3 {
		t.Fatalf("hub list %+v", list)
	}
	if out := must("work", "grant", "--root", a); !strings.Contains(out, "3 of 50 objects") {
		t.Fatalf("work grant: %s", out)
	}

	// B: a fresh directory connected to the same repository.
	os.MkdirAll(b, 0o755)
	must("client", "setup", "--root", b, "--local", "--repository", "proj")
	r := runMain(t, env, "", "changelog", "apply", "--root", b, "--to", "1", "--from-hub")
	if r.code != 1 || !strings.Contains(r.stderr, "has no current work on the Hub; pass --work ID") {
		t.Fatalf("without --work and no current work: %d %s", r.code, r.stderr)
	}
	out := fromHub("changelog", "apply", "--root", b, "--to", "1", "--from-hub", "--work", w.ID)
	if !strings.Contains(out, "digests verified") {
		t.Fatalf("apply: %s", out)
	}
	if got := files(t, b); fmt.Sprint(got) != fmt.Sprint(after1) {
		t.Fatalf("B after apply --from-hub --to 1: %v, want %v", got, after1)
	}
	// Its dry run says the apply would be partial, and lists the root.
	// The Claude settings file the hooks were installed in is a secret
	// file: withheld too.
	if out := must("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID, "--dry-run"); !strings.Contains(out, fmt.Sprintf("it would be partial (exit status %d): 2 paths cannot be restored:\n  %s: withheld from the Hub", ExitPartial, changelog.TranscriptRootName)) ||
		!strings.Contains(out, filepath.Join(b, ".claude", "settings.local.json")+": a secret file (.claude/settings*.json), withheld from the Hub") {
		t.Fatalf("apply --from-hub --dry-run:\n%s", out)
	}
	if out := must("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID, "--dry-run", "--format", "json"); !strings.Contains(out, `"partial": true`) || !strings.Contains(out, `"withheld": true`) {
		t.Fatalf("apply --from-hub --dry-run --format json:\n%s", out)
	}
	// The apply into the fresh B left a changelog: a second apply into B
	// works and is undoable (issue 28 item 6), back to the first's result.
	var second struct {
		Undo         int  `json:"undo_position"`
		Partial      bool `json:"partial"`
		Unrestorable []struct {
			Root     string `json:"root"`
			Path     string `json:"path"`
			Withheld bool   `json:"withheld"`
		} `json:"unrestorable"`
	}
	if err := json.Unmarshal([]byte(fromHub("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID, "--format", "json")), &second); err != nil {
		t.Fatal(err)
	}
	// The transcript root, and the Claude settings file (a secret file).
	if !second.Partial || len(second.Unrestorable) != 2 || second.Unrestorable[0].Root != changelog.TranscriptRootName || !second.Unrestorable[0].Withheld ||
		second.Unrestorable[1].Path != ".claude/settings.local.json" || !second.Unrestorable[1].Withheld {
		t.Fatalf("apply --format json does not list the withheld root as partial: %+v", second)
	}
	if got := files(t, b); fmt.Sprint(got) != fmt.Sprint(files(t, a)) {
		t.Fatalf("B after the second apply --to 2: %v", got)
	}
	must("changelog", "apply", "--root", b, "--to", fmt.Sprint(second.Undo))
	if got := files(t, b); fmt.Sprint(got) != fmt.Sprint(after1) {
		t.Fatalf("B after undoing the second apply: %v, want %v", got, after1)
	}
	// The first apply is undoable too: its undo point is the empty B.
	if out := must("changelog", "list", "--root", b); !strings.Contains(out, "pre-apply") {
		t.Fatalf("B's changelog:\n%s", out)
	}
	must("changelog", "apply", "--root", b, "--to", "0")
	if got := files(t, b); len(got) != 0 {
		t.Fatalf("B after undoing the first apply: %v", got)
	}
	// A file changed in B since its newest capture is refused with
	// status 6 unless --force.
	fromHub("changelog", "apply", "--root", b, "--to", "1", "--from-hub", "--work", w.ID)
	os.WriteFile(filepath.Join(b, "one.txt"), []byte("mine"), 0o644)
	r = runMain(t, env, "", "changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID)
	if r.code != ExitChangedSinceCapture || !strings.Contains(r.stderr, filepath.Join(b, "one.txt")) {
		t.Fatalf("apply over uncaptured files: %d %s", r.code, r.stderr)
	}
	out = fromHub("changelog", "apply", "--root", b, "--to", "2", "--from-hub", "--work", w.ID, "--force")
	if got := files(t, b); fmt.Sprint(got) != fmt.Sprint(files(t, a)) || !strings.Contains(out, "undo with") {
		t.Fatalf("B after apply --to 2: %v (%s)", got, out)
	}
	r = runMain(t, env, "", "changelog", "apply", "--root", b, "--to", "7", "--from-hub", "--work", w.ID)
	if r.code != 1 || !strings.Contains(r.stderr, "holds positions 0..2, not all of 0..7") {
		t.Fatalf("apply past the last position: %d %s", r.code, r.stderr)
	}

	// A hostile increment the Hub stored (its metadata is fine) is refused
	// by the apply with status 4, and nothing is written.
	var w2 api.Work
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--format", "json")), &w2)
	cfg := filepath.Join(env["HOME"], ".config", "agentscm")
	cc, err := connections.Lookup(cfg, a)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.Open(context.Background(), cc, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evil := hostileIncrement(t, a, 0)
	sum := sha256.Sum256(evil)
	_, err = conn.UploadIncrement(context.Background(), cc.WorktreeID, api.IncrementUpload{Position: 0, Session: "native-1", Digest: hex.EncodeToString(sum[:])}, evil)
	conn.Close()
	if err != nil {
		t.Fatalf("upload the hostile increment: %v", err)
	}
	fresh := filepath.Join(base, "c")
	os.MkdirAll(fresh, 0o755)
	must("client", "setup", "--root", fresh, "--local", "--repository", "proj")
	r = runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "0", "--from-hub", "--work", w2.ID)
	if _, serr := os.Stat(filepath.Join(base, "escaped.txt")); r.code != ExitUnreadableArchive || !strings.Contains(r.stderr, `".." component`) || serr == nil {
		t.Fatalf("hostile increment: %d %s (escaped file: %v)", r.code, r.stderr, serr)
	}
	if got := files(t, fresh); len(got) != 0 {
		t.Fatalf("the refused apply wrote %v", got)
	}
}

// A refused upload warns and keeps its local position; a new Work's grant
// applies at once (the cached grant of the old Work is dropped) and the new
// Work gets the checkout's whole sequence, oldest first.
func TestChangelogHookGrantAndNewWork(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
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
	must("work", "start", "--root", a, "--changelog-max-objects", "1")
	must("changelog", "enable", "--root", a)
	call := func(i int) run {
		t.Helper()
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d.txt", i)), []byte(fmt.Sprint(i)), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		r := runMain(t, env, p, "changelog", "hook-claude")
		if r.code != 0 || r.stdout != "" {
			t.Fatalf("hook %d: %d %q", i, r.code, r.stdout)
		}
		return r
	}
	if r := call(0); r.stderr != "" {
		t.Fatalf("first call warned: %s", r.stderr)
	}
	if r := call(1); !strings.Contains(r.stderr, "stored locally; the Hub refused it") || !strings.Contains(r.stderr, "objects: 1 used + 1 requested > 1 granted") {
		t.Fatalf("second call over the grant: %q", r.stderr)
	}
	type entry struct {
		Position int
		Files    int
		Changes  *incmeta.Changes     `json:"changes"`
		Hub      *changelog.HubStatus `json:"hub"`
	}
	var local struct {
		Increments []entry `json:"increments"`
	}
	json.Unmarshal([]byte(must("changelog", "list", "--root", a, "--format", "json")), &local)
	if len(local.Increments) != 2 || local.Increments[1].Hub == nil || local.Increments[1].Hub.State != "refused" || local.Increments[0].Hub.State != "uploaded" {
		t.Fatalf("local increments after the refusal: %+v", local)
	}
	if ch := local.Increments[1].Changes; ch == nil || fmt.Sprint(ch.Created) != "[f1.txt]" || ch.Bytes != 1 {
		t.Fatalf("call 1's changes: %+v", ch)
	}
	if out := must("changelog", "list", "--root", a); !strings.Contains(out, "refused") || !strings.Contains(out, "+ f1.txt") {
		t.Fatalf("list text:\n%s", out)
	}
	// A new Work: its grant applies at once and it gets the checkout's
	// whole sequence, each position on its own.
	var w2 api.Work
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--format", "json")), &w2)
	if r := call(2); r.stderr != "" {
		t.Fatalf("first call in the new Work: %q", r.stderr)
	}
	json.Unmarshal([]byte(must("changelog", "list", "--root", a, "--format", "json")), &local)
	if len(local.Increments) != 3 {
		t.Fatalf("local increments: %+v", local)
	}
	for _, in := range local.Increments {
		if in.Hub == nil || in.Hub.State != "uploaded" || in.Hub.WorkID != w2.ID {
			t.Fatalf("position %d on the Hub: %+v", in.Position, in.Hub)
		}
	}
	var hub api.IncrementList
	json.Unmarshal([]byte(must("changelog", "list", "--root", a, "--from-hub", "--format", "json")), &hub)
	if hub.WorkID != w2.ID || len(hub.Increments) != 3 || hub.Grant != api.DefaultGrant() {
		t.Fatalf("new Work on the Hub: %+v", hub)
	}
}

// On a fresh machine the transcript restored at call N lacks call N's
// result (the hook captured it before Claude Code wrote the result); apply
// --from-hub --resume-conversation reads the result from the first later
// increment that stores the session's transcript. Without a later increment
// the conversation resumes without the result, and the output says so.
func TestChangelogApplyFromHubResumesWithResult(t *testing.T) {
	testApplyFromHubResume(t, true)
}

// In metadata-only mode (no capture binding) the transcripts never reach
// the Hub: apply --from-hub --resume-conversation restores the files, says
// plainly that the conversation was not shared and exits 0.
func TestChangelogApplyFromHubConversationNotShared(t *testing.T) {
	testApplyFromHubResume(t, false)
}

func testApplyFromHubResume(t *testing.T, shared bool) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
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
	if shared {
		// Shared-conversation mode, and a session observed to start in it.
		must("change-capture", "configure", "--root", a, "--spool", filepath.Join(base, "spool"), "--capture-mode", "shared-conversation")
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"SessionStart","source":"startup"}`, a)
		if r := runMain(t, env, p, "change-capture", "hook-claude"); r.code != 0 || r.stderr != "" {
			t.Fatalf("SessionStart: %+v", r)
		}
	}
	en := must("changelog", "enable", "--root", a)
	if shared != strings.Contains(en, "claude-transcript uploaded REDACTED") || shared == strings.Contains(en, "claude-transcript NOT uploaded") || !strings.Contains(en, "repository proj on local") {
		t.Fatalf("changelog enable (shared %v) does not say what it uploads:\n%s", shared, en)
	}
	project := changelog.ClaudeProjectDir(env["HOME"], a)
	os.MkdirAll(project, 0o700)
	appendLine := func(line string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(project, "native-1.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line + "\n")
		f.Close()
	}
	resultLine := func(i int) string {
		return fmt.Sprintf(`{"type":"user","sessionId":"native-1","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":"RESULT-%d"}]}}`, i, i)
	}
	appendLine(`{"type":"user","sessionId":"native-1","message":{"role":"user","content":"go"}}`)
	// Claude Code writes call i's tool_use, runs it, runs PostToolUse, and
	// only then appends its tool_result.
	for i := range 3 {
		appendLine(fmt.Sprintf(`{"type":"assistant","sessionId":"native-1","message":{"role":"assistant","content":[{"type":"tool_use","id":"toolu_%d","name":"Write","input":{}}]}}`, i))
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d.txt", i)), []byte(fmt.Sprint(i)), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 || r.stderr != "" {
			t.Fatalf("hook %d: %d %q", i, r.code, r.stderr)
		}
		appendLine(resultLine(i))
	}

	apply := func(name string, to int, format string) (string, string) {
		t.Helper()
		dst := filepath.Join(base, name)
		os.MkdirAll(dst, 0o755)
		must("client", "setup", "--root", dst, "--local", "--repository", "proj")
		if ents, _ := os.ReadDir(changelog.ClaudeProjectDir(env["HOME"], dst)); len(ents) != 0 {
			t.Fatalf("the project directory of %s is not empty: %v", dst, ents)
		}
		args := []string{"changelog", "apply", "--root", dst, "--to", fmt.Sprint(to), "--from-hub", "--work", w.ID, "--resume-conversation", "--format", format}
		if shared {
			// The Claude settings file is a secret file, withheld: the
			// apply is partial (exit 8) for it alone.
			r := runMain(t, env, "", args...)
			if r.code != ExitPartial || !strings.Contains(r.stderr, "settings.local.json: a secret file") || strings.Contains(r.stderr, changelog.TranscriptRootName+": withheld") {
				t.Fatalf("%v: %d, want %d listing the settings file alone:\n%s", args, r.code, ExitPartial, r.stderr)
			}
			return r.stdout, dst
		}
		// Metadata-only: the transcript root is withheld from the Hub, so
		// the apply is partial (exit 8) and lists it.
		r := runMain(t, env, "", args...)
		if r.code != ExitPartial || !strings.Contains(r.stderr, changelog.TranscriptRootName+": withheld from the Hub") {
			t.Fatalf("%v: %d, want %d listing the withheld %s:\n%s", args, r.code, ExitPartial, changelog.TranscriptRootName, r.stderr)
		}
		if format == "json" && (!strings.Contains(r.stdout, `"partial": true`) || !strings.Contains(r.stdout, `"withheld": true`)) {
			t.Fatalf("%v: the JSON does not say partial and withheld:\n%s", args, r.stdout)
		}
		return r.stdout, dst
	}
	var res struct {
		From     *int               `json:"result_from_position"`
		Note     string             `json:"result_note"`
		Resumed  *changelog.Resumed `json:"resumed"`
		Shared   *bool              `json:"conversation_shared"`
		ConvNote string             `json:"conversation_note"`
	}
	out, dst := apply("b", 1, "json")
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !shared {
		if res.Shared == nil || *res.Shared || !strings.Contains(res.ConvNote, "not shared") || !strings.Contains(res.ConvNote, "metadata-only") || res.Resumed != nil {
			t.Fatalf("apply --to 1 of a metadata-only checkout: %s", out)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "f1.txt")); err != nil || string(b) != "1" {
			t.Fatalf("the files were not restored: %q %v", b, err)
		}
		if ents, _ := os.ReadDir(changelog.ClaudeProjectDir(env["HOME"], dst)); len(ents) != 0 {
			t.Fatalf("a transcript arrived from the Hub: %v", ents)
		}
		out, _ = apply("c", 2, "text")
		if !strings.Contains(out, "the conversation was not shared") || strings.Contains(out, "claude --resume") {
			t.Fatalf("apply --to 2 (text): %s", out)
		}
		return
	}
	if res.Shared == nil || !*res.Shared {
		t.Fatalf("apply --to 1 of a shared checkout: %s", out)
	}
	if res.Resumed == nil || !res.Resumed.IncludesResult || res.From == nil || *res.From != 2 || res.Note != "" {
		t.Fatalf("apply --to 1: %s", out)
	}
	if filepath.Dir(res.Resumed.Transcript) != changelog.ClaudeProjectDir(env["HOME"], dst) {
		t.Fatalf("resumed transcript %s is not in the project directory of %s", res.Resumed.Transcript, dst)
	}
	// The rewound transcript itself still ends at call 1's tool_use.
	if live, _ := os.ReadFile(filepath.Join(filepath.Dir(res.Resumed.Transcript), "native-1.jsonl")); strings.Contains(string(live), "RESULT-1") || !strings.Contains(string(live), "toolu_1") {
		t.Fatalf("rewound transcript:\n%s", live)
	}
	b, _ := os.ReadFile(res.Resumed.Transcript)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := strings.ReplaceAll(resultLine(1), "native-1", res.Resumed.SessionID)
	var got, wantV any
	json.Unmarshal([]byte(lines[len(lines)-1]), &got)
	json.Unmarshal([]byte(want), &wantV)
	if len(lines) != 5 || fmt.Sprint(got) != fmt.Sprint(wantV) || strings.Contains(string(b), "toolu_2") {
		t.Fatalf("resumed transcript does not end with call 1's tool_result:\n%s", b)
	}

	// The last call: no later increment holds its result.
	out, _ = apply("c", 2, "text")
	if !strings.Contains(out, "no later increment of work "+w.ID+" stores call 2's result") || !strings.Contains(out, "claude --resume ") {
		t.Fatalf("apply --to 2: %s", out)
	}

	// A hostile later increment is refused: a warning, and the
	// conversation resumes without the result.
	cc, err := connections.Lookup(filepath.Join(env["HOME"], ".config", "agentscm"), a)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.Open(context.Background(), cc, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	evil := hostileIncrement(t, a, 3)
	sum := sha256.Sum256(evil)
	_, err = conn.UploadIncrement(context.Background(), cc.WorktreeID, api.IncrementUpload{Position: 3, Session: "native-1", Digest: hex.EncodeToString(sum[:])}, evil)
	conn.Close()
	if err != nil {
		t.Fatalf("upload the hostile increment: %v", err)
	}
	d := filepath.Join(base, "d")
	os.MkdirAll(d, 0o755)
	must("client", "setup", "--root", d, "--local", "--repository", "proj")
	r := runMain(t, env, "", "changelog", "apply", "--root", d, "--to", "2", "--from-hub", "--work", w.ID, "--resume-conversation", "--format", "json")
	res.From, res.Note, res.Resumed = nil, "", nil
	json.Unmarshal([]byte(r.stdout), &res)
	// Exit 8: the Claude settings file is a secret file, withheld.
	if r.code != ExitPartial || !strings.Contains(r.stderr, "warning: reading call 2's result from the later increments") || !strings.Contains(r.stderr, `".." component`) ||
		res.Resumed == nil || res.Resumed.IncludesResult || res.From != nil || !strings.Contains(res.Note, "could not be read") {
		t.Fatalf("hostile later increment: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// A position the grant refused is merged on the Hub into the next uploaded
// increment: list says so on both sides, apply --from-hub of the carrier
// reproduces the checkout, and apply --from-hub of the merged position
// says which increment carries it.
func TestChangelogApplyFromHubMerged(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
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
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--changelog-max-objects", "1", "--format", "json")), &w)
	must("changelog", "enable", "--root", a, "--no-transcript-root")
	call := func(i int) run {
		t.Helper()
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d.txt", i)), []byte(fmt.Sprint(i)), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		return runMain(t, env, p, "changelog", "hook-claude")
	}
	call(0)
	call(1)
	must("work", "grant", "--root", a, "--max-objects", "10")
	if r := call(2); r.stderr != "" {
		t.Fatalf("call after raising the grant: %q", r.stderr)
	}
	out := must("changelog", "list", "--root", a)
	if !strings.Contains(out, "merged into 2") || !strings.Contains(out, "objects: 1 used + 1 requested > 1 granted") {
		t.Fatalf("list does not say position 1 was merged and why:\n%s", out)
	}
	if out := must("changelog", "list", "--root", a, "--from-hub"); !strings.Contains(out, "carries positions 1..1") {
		t.Fatalf("list --from-hub:\n%s", out)
	}
	fresh := filepath.Join(base, "fresh")
	os.MkdirAll(fresh, 0o755)
	must("client", "setup", "--root", fresh, "--local", "--repository", "proj")
	r := runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "1", "--from-hub", "--work", w.ID)
	if r.code == 0 || !strings.Contains(r.stderr, "position 1 has no increment of its own on the Hub") || !strings.Contains(r.stderr, "increment 2 carries positions 1..2") {
		t.Fatalf("apply --from-hub of a merged position: %d %s", r.code, r.stderr)
	}
	// Partial: the Claude settings file is a secret file, withheld.
	r = runMain(t, env, "", "changelog", "apply", "--root", fresh, "--to", "2", "--from-hub", "--work", w.ID)
	if r.code != ExitPartial || !strings.Contains(r.stderr, "settings.local.json: a secret file") {
		t.Fatalf("apply --from-hub of the carrier: %d %s", r.code, r.stderr)
	}
	out = r.stdout
	if !strings.Contains(out, "positions 1..1 came merged") {
		t.Fatalf("apply --from-hub of the carrier: %s", out)
	}
	want, got := files(t, a), files(t, fresh)
	delete(want, ".claude")
	delete(got, ".claude")
	if fmt.Sprint(want) != fmt.Sprint(got) || got["f1.txt"] != "1" {
		t.Fatalf("fresh after apply --from-hub --to 2: %v, checkout %v", got, want)
	}

	// A fresh directory without a connection (issue 19): with --work the
	// apply connects it to the Hub repository holding the Work; without,
	// it says the exact command to run.
	bare := filepath.Join(base, "bare")
	r = runMain(t, env, "", "changelog", "apply", "--root", bare, "--to", "2", "--from-hub")
	if r.code != 1 || !strings.Contains(r.stderr, "agentscm client setup --root "+bare+" --hub URL --repository NAME --token-file PATH") {
		t.Fatalf("apply --from-hub without a connection or --work: %d %s", r.code, r.stderr)
	}
	r = runMain(t, env, "", "changelog", "apply", "--root", bare, "--to", "2", "--from-hub", "--work", w.ID)
	if r.code != ExitPartial || !strings.Contains(r.stderr, "connected "+bare+" to repository proj on local (the Hub holding work "+w.ID) || !strings.Contains(r.stderr, "settings.local.json: a secret file") {
		t.Fatalf("apply --from-hub onto a bare directory: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if got := files(t, bare); got["f1.txt"] != "1" {
		t.Fatalf("bare after apply --from-hub --to 2: %v", got)
	}
}

// changelog upload catches up the positions stored while the checkout had
// no Work, in order, and says what it did.
func TestChangelogUploadCommand(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
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
	if r := runMain(t, env, "", "changelog", "upload", "--root", a); r.code == 0 || !strings.Contains(r.stderr, "no changelog") {
		t.Fatalf("upload without a changelog: %d %s", r.code, r.stderr)
	}
	must("changelog", "enable", "--root", a, "--no-transcript-root")
	if r := runMain(t, env, "", "changelog", "upload", "--root", a); r.code == 0 || !strings.Contains(r.stderr, "no client connection") {
		t.Fatalf("upload without a connection: %d %s", r.code, r.stderr)
	}
	must("client", "setup", "--root", a, "--local", "--repository", "proj")
	for i := range 2 {
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d.txt", i)), []byte("x"), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 || !strings.Contains(r.stderr, "kept locally only") {
			t.Fatalf("hook %d without a Work: %d %q", i, r.code, r.stderr)
		}
	}
	if out := must("changelog", "list", "--root", a); strings.Count(out, "local-only") != 2 {
		t.Fatalf("list without a Work:\n%s", out)
	}
	var w api.Work
	json.Unmarshal([]byte(must("work", "start", "--root", a, "--format", "json")), &w)
	var out changelog.UploadOutcome
	if err := json.Unmarshal([]byte(must("changelog", "upload", "--root", a, "--format", "json")), &out); err != nil || fmt.Sprint(out.Uploaded) != "[0 1]" || out.WorkID != w.ID || out.Pending != 0 {
		t.Fatalf("upload: %+v %v", out, err)
	}
	if s := must("changelog", "upload", "--root", a); !strings.Contains(s, "uploaded nothing; 0 pending") {
		t.Fatalf("second upload: %s", s)
	}
}

// After the grant refused positions 3..5 and work grant raised it,
// changelog upload compares the queue with the Hub's list and uploads what
// the Hub lacks, each position on its own (issue 28 item 6); changelog
// status says what the Hub holds before and after.
func TestChangelogUploadAfterGrantRaised(t *testing.T) {
	t.Run("embedded Hub", func(t *testing.T) { testUploadAfterGrantRaised(t, false) })
	t.Run("HTTP Hub on loopback", func(t *testing.T) { testUploadAfterGrantRaised(t, true) })
}

func testUploadAfterGrantRaised(t *testing.T, served bool) {
	base := t.TempDir()
	env := map[string]string{"HOME": filepath.Join(base, "home")}
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
	if served {
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
		must("client", "setup", "--root", a, "--hub", srv.URL, "--repository", "proj", "--token-file", tok)
	} else {
		must("client", "setup", "--root", a, "--local", "--repository", "proj")
	}
	must("work", "start", "--root", a, "--changelog-max-objects", "3")
	must("changelog", "enable", "--root", a, "--no-transcript-root")
	for i := range 6 {
		os.WriteFile(filepath.Join(a, fmt.Sprintf("f%d.txt", i)), []byte(fmt.Sprint(i)), 0o644)
		p := fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, a, i)
		if r := runMain(t, env, p, "changelog", "hook-claude"); r.code != 0 || (i >= 3) != strings.Contains(r.stderr, "refused") {
			t.Fatalf("hook %d: %d %q", i, r.code, r.stderr)
		}
	}
	hubPositions := func() string {
		var hub api.IncrementList
		json.Unmarshal([]byte(must("changelog", "list", "--root", a, "--from-hub", "--format", "json")), &hub)
		var ps []string
		for _, in := range hub.Increments {
			ps = append(ps, fmt.Sprint(in.Position))
		}
		return strings.Join(ps, ",")
	}
	if got := hubPositions(); got != "0,1,2" {
		t.Fatalf("Hub before the grant change: %s", got)
	}
	if s := must("changelog", "status", "--root", a); !strings.Contains(s, "hub:           holds positions 0..2 of 6") || !strings.Contains(s, "lacks 3..5") {
		t.Fatalf("status before:\n%s", s)
	}
	// Still refused: the upload says so and uploads nothing.
	if r := runMain(t, env, "", "changelog", "upload", "--root", a); !strings.Contains(r.stdout, "refused by the grant") {
		t.Fatalf("upload under the old grant: %d %s %s", r.code, r.stdout, r.stderr)
	}
	must("work", "grant", "--root", a, "--max-objects", "10")
	var out changelog.UploadOutcome
	if err := json.Unmarshal([]byte(must("changelog", "upload", "--root", a, "--format", "json")), &out); err != nil || fmt.Sprint(out.Uploaded) != "[3 4 5]" || out.Pending != 0 || len(out.Refused) != 0 {
		t.Fatalf("upload after the grant change: %+v %v", out, err)
	}
	if got := hubPositions(); got != "0,1,2,3,4,5" {
		t.Fatalf("Hub after the upload: %s", got)
	}
	if s := must("changelog", "status", "--root", a); !strings.Contains(s, "hub:           holds positions 0..5 of 6") || strings.Contains(s, "lacks") {
		t.Fatalf("status after:\n%s", s)
	}
	if s := must("changelog", "upload", "--root", a); !strings.Contains(s, "uploaded nothing; 0 pending") {
		t.Fatalf("second upload: %s", s)
	}
	// A new current Work holds nothing: the next upload, with no new tool
	// call, sends it the whole sequence.
	must("work", "start", "--root", a)
	if s := must("changelog", "status", "--root", a); !strings.Contains(s, "holds none of 6") || !strings.Contains(s, "lacks 0..5") {
		t.Fatalf("status in the new Work:\n%s", s)
	}
	if err := json.Unmarshal([]byte(must("changelog", "upload", "--root", a, "--format", "json")), &out); err != nil || fmt.Sprint(out.Uploaded) != "[0 1 2 3 4 5]" {
		t.Fatalf("upload to the new Work: %+v %v", out, err)
	}
	if got := hubPositions(); got != "0,1,2,3,4,5" {
		t.Fatalf("new Work on the Hub: %s", got)
	}
}
