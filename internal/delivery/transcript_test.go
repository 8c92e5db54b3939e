package delivery

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// withHistoryRoot sets the binding's Claude history root and capture mode
// and returns the project directory the transcript goes in.
func (f *fixture) withHistoryRoot(t *testing.T, mode string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "projects")
	proj := filepath.Join(root, "-repo")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	err := f.store.Bindings().Update(func(c *binding.Config) (bool, error) {
		c.Bindings[0].ClaudeHistoryRoot = root
		c.Bindings[0].CaptureMode = mode
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return proj
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func assistant(id, block string, in, out int) string {
	return fmt.Sprintf(`{"type":"assistant","sessionId":"native-1","timestamp":"2026-11-29T21:15:49.785Z","message":{"id":%q,"model":"claude-opus-5-5","role":"assistant","stop_reason":"tool_use","content":[%s],"usage":{"input_tokens":%d,"output_tokens":%d,"cache_creation_input_tokens":2,"cache_read_input_tokens":1}}}`+"\n", id, block, in, out)
}

const thinkingSecret = "THINK-8f2e-never-retained"

func TestTranscriptUsageReachesHub(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	proj := f.withHistoryRoot(t, event.ModeLocalConversation)
	tr := filepath.Join(proj, "native-1.jsonl")
	appendFile(t, tr, `{"type":"user","sessionId":"native-1","message":{"role":"user","content":"hi"}}`+"\n")
	f.hook(t, f.payload("SessionStart", `,"source":"startup","transcript_path":"/etc/passwd"`))
	appendFile(t, tr, assistant("msg_1", `{"type":"thinking","thinking":"`+thinkingSecret+`"}`, 100, 10))
	appendFile(t, tr, assistant("msg_1", `{"type":"text","text":"visible answer"}`, 100, 10))
	appendFile(t, tr, assistant("msg_1", `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}`, 100, 10))
	r := f.hook(t, f.payload("PostToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_1","permission_mode":"default","effort":{"level":"medium"}`))
	if r.Failed != 0 {
		t.Fatalf("%+v", r)
	}
	appendFile(t, tr, assistant("msg_2", `{"type":"text","text":"done"}`, 200, 20))
	// A repeated read of the same message and a cumulative record.
	appendFile(t, tr, `{"type":"cost-state","sessionId":"native-1","modelUsage":{"claude-opus-5-5":{"inputTokens":300,"outputTokens":30}}}`+"\n")
	f.hook(t, f.payload("Stop", ""))
	f.hook(t, f.payload("Stop", ""))
	rec := f.record(t, work)
	u := rec.Usage
	if u.Records != 2 || u.InputTokens != 300 || u.OutputTokens != 30 || u.CacheCreationInputTokens != 4 || u.CacheReadInputTokens != 2 {
		t.Fatalf("usage totals = %+v", u)
	}
	if len(u.SessionCumulative) != 1 || *u.SessionCumulative[0].InputTokens != 300 || u.SessionCumulative[0].CacheReadInputTokens != nil {
		t.Fatalf("cumulative = %+v", u.SessionCumulative)
	}
	var texts int
	for _, e := range rec.Events {
		if e.Kind == string(event.MessageDisplay) && e.HookEvent == "transcript" {
			texts++
		}
	}
	if texts != 0 {
		t.Fatalf("assistant text fragments on the Hub = %d, want 0 (kept locally): %+v", texts, rec.Events)
	}

	// Local-conversation bodies: the visible assistant text is in the
	// spool, the thinking block nowhere (spool nor private state).
	found := map[string]bool{}
	for _, dir := range []string{f.spool, f.cfg} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, s := range []string{thinkingSecret, "visible answer"} {
				if bytes.Contains(b, []byte(s)) {
					found[s] = true
				}
			}
			return nil
		})
	}
	if found[thinkingSecret] || !found["visible answer"] {
		t.Fatalf("found = %v", found)
	}
	// The setup the hook exposed was retained locally, with its unobserved
	// components listed.
	var setups []string
	filepath.WalkDir(f.cfg, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "setup-") {
			b, _ := os.ReadFile(p)
			setups = append(setups, string(b))
		}
		return nil
	})
	if len(setups) != 1 || !strings.Contains(setups[0], `"permission_mode":"default","effort":"medium","unobserved":["model",`) {
		t.Fatalf("setup artifacts = %v", setups)
	}
	// The Hub holds its identity and the observed values, once, never as a
	// complete setup.
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_2","permission_mode":"default","effort":{"level":"medium"}`))
	rec = f.record(t, work)
	if len(rec.Setups) != 1 {
		t.Fatalf("setups on the Hub = %+v", rec.Setups)
	}
	st := rec.Setups[0]
	if st.PermissionMode != "default" || st.Effort != "medium" || st.Model != "" || !slices.Contains(st.Unobserved, "model") || !slices.Contains(st.Unobserved, "system_prompt") {
		t.Fatalf("setup = %+v", st)
	}
	if sum := sha256.Sum256([]byte(setups[0])); st.Artifact != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("artifact identity %s does not name the local artifact", st.Artifact)
	}
	// A changed setup is recorded, each distinct one once per session.
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_3","permission_mode":"plan","effort":{"level":"medium"}`))
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_4","permission_mode":"default","effort":{"level":"medium"}`))
	f.hook(t, f.payload("PreToolUse", `,"tool_name":"Bash","tool_use_id":"toolu_5","permission_mode":"plan","effort":{"level":"medium"}`))
	rec = f.record(t, work)
	modes := []string{}
	for _, s := range rec.Setups {
		modes = append(modes, s.PermissionMode)
	}
	if slices.Sort(modes); !slices.Equal(modes, []string{"default", "plan"}) {
		t.Fatalf("setups on the Hub = %+v", rec.Setups)
	}
	// The setup travels with the hook's own event: no record of its own.
	sp, _ := spool.Open(f.spool)
	all, _ := sp.Events()
	with := 0
	for _, r := range all {
		if r.Setup != nil {
			with++
			if r.Kind != event.ToolStart && r.Kind != event.ToolFinish {
				t.Fatalf("setup on %+v", r)
			}
		}
	}
	if with != 5 { // the PostToolUse and the four PreToolUse hooks
		t.Fatalf("%d events carry a setup, want 5", with)
	}
}

func TestTranscriptMetadataOnlyKeepsNoBodies(t *testing.T) {
	f := newFixture(t)
	f.startWork(t)
	proj := f.withHistoryRoot(t, event.ModeMetadataOnly)
	tr := filepath.Join(proj, "native-1.jsonl")
	f.hook(t, f.payload("SessionStart", `,"source":"startup"`))
	appendFile(t, tr, assistant("msg_1", `{"type":"text","text":"SECRET-ANSWER"}`, 1, 1))
	f.hook(t, f.payload("Stop", ""))
	sp, err := spool.Open(f.spool)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := sp.Events()
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, string(r.Kind))
		if r.BodyRef != nil {
			t.Fatalf("metadata-only kept a body: %+v", r)
		}
	}
	if strings.Join(kinds, ",") != "session_start,turn_end,usage" {
		t.Fatalf("kinds = %v", kinds)
	}
}

func TestRunningSessionNotAttributed(t *testing.T) {
	f := newFixture(t)
	work := f.startWork(t)
	proj := f.withHistoryRoot(t, event.ModeMetadataOnly)
	tr := filepath.Join(proj, "native-1.jsonl")
	// The session ran before: its old usage is not attributed to the
	// current Work.
	appendFile(t, tr, assistant("msg_old", `{"type":"text","text":"x"}`, 1000, 1000))
	f.hook(t, f.payload("UserPromptSubmit", `,"prompt":"p"`))
	f.hook(t, f.payload("Stop", ""))
	appendFile(t, tr, assistant("msg_new", `{"type":"text","text":"y"}`, 5, 6))
	f.hook(t, f.payload("Stop", ""))
	if u := f.record(t, work).Usage; u.Records != 1 || u.InputTokens != 5 {
		t.Fatalf("usage = %+v", u)
	}
}
