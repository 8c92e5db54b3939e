//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// The session's conversation, each part findable on its own: the prompt,
// a tool input that is neither written to the workspace nor echoed, a tool
// output and a failing command's output that appear only once the command
// ran (their inputs compute them), and a GitHub token in the prompt and in
// a tool output.
const (
	privPrompt = "PRIVPROMPT-c41d"
	privInput  = "PRIVINPUT-9e27"
	privOutput = "PRIVOUTPUT-3f80" // printed by `printf 'PRIV%s' OUTPUT-3f80`
	privError  = "PRIVERROR-77b1"  // printed by a failing command, likewise
	privToken  = "ghp_" + "Zx81Qw72Er63Ty54Ui45Op36As27Df18Gh09"
)

// The secret files' markers: in the checkout before the session (.env.local,
// id_rsa, a Claude settings file with a token in its env block) and in a
// file the agent writes (.env.production, its marker computed by the
// command so that it is in no tool input).
const (
	secEnvLocal = "ENVLOCAL-SECRET-1a2b"
	secRSA      = "RSAKEY-SECRET-3c4d"
	secSettings = "SETTINGSTOKEN-5e6f"
	secEnvProd  = "ENVPROD-SECRET-7a8b" // printed by `printf 'ENVPROD%s' -SECRET-7a8b`
)

// secretFiles are the secret files of the privacy tests, as rewinds from
// the Hub list them.
var secretFiles = []string{".claude/settings.local.json", ".env.local", ".env.production", "id_rsa"}

// hubBytes returns every byte that reached the Hub: each file of its data
// directory (object directory, SQLite database and its WAL and shared
// memory), gzip objects also decompressed, and its log output.
func hubBytes(t *testing.T, data string, log []byte) map[string][]byte {
	t.Helper()
	if hubBackendServes(t, data) {
		return hubBackendBytes(t, data, log) // hubbackend_test.go
	}
	out := map[string][]byte{"hub serve output": log}
	err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err // a socket (the changelog watcher's) holds no bytes
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = b
		if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
			if gz, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
				if plain, err := io.ReadAll(gz); err == nil {
					out[p+" (gunzipped)"] = plain
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startHubLogged is startHub keeping the server's whole output.
func (c *checkout) startHubLogged(data string) (url string, stop func() []byte) {
	c.t.Helper()
	cmd := exec.Command(h.agentscm, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	cmd.Env = c.env()
	var mu sync.Mutex
	var log bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	lines := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		first := true
		for sc.Scan() {
			mu.Lock()
			log.Write(sc.Bytes())
			log.WriteByte('\n')
			mu.Unlock()
			if first && strings.HasPrefix(sc.Text(), "listening on ") {
				lines <- strings.TrimPrefix(sc.Text(), "listening on ")
				first = false
			}
		}
	}()
	var once sync.Once
	stop = func() []byte {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			pw.Close()
			<-done
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]byte(nil), log.Bytes()...)
	}
	c.t.Cleanup(func() { stop() })
	select {
	case url = <-lines:
		return url, stop
	case <-time.After(30 * time.Second):
		c.t.Fatalf("hub serve did not start: %s", stop())
	}
	return "", nil
}

// TestChangelogPrivacyAcrossModes: with the real CLI and a served Hub, in
// each capture mode, every byte that reached the Hub is searched for the
// session's prompt, tool input and outputs: absent in metadata-only and
// local-conversation mode (while the local changelog holds them), and in
// shared-conversation mode present only redacted (the token only as
// [REDACTED:github_token]). The secret files (.env.local, id_rsa, a Claude
// settings file with a token, and a .env.production the agent writes) never
// reach the Hub in any mode: changelog enable says so before the first
// upload, and an apply from the Hub onto a fresh directory restores the
// ordinary files, lists the secret ones and exits 8 (partial).
func TestChangelogPrivacyAcrossModes(t *testing.T) {
	for _, mode := range []string{event.ModeMetadataOnly, event.ModeLocalConversation, event.ModeSharedConversation} {
		t.Run(mode, func(t *testing.T) {
			c := newCheckout(t)
			data := filepath.Join(c.dir, "hubdata")
			tok := filepath.Join(c.dir, "alice.token")
			c.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
			c.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
			c.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tok)
			url, stop := c.startHubLogged(data)
			c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
			// The secret files, beside an ordinary one, before capture is
			// set up (the settings file already exists, so setup leaves it
			// out of the local exclude).
			c.write(".env.local", "DATABASE_URL="+secEnvLocal+"\n")
			c.write("id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n"+secRSA+"\n")
			c.write(".env.example", "DATABASE_URL=\n")
			c.write("ordinary.txt", "ordinary\n")
			if err := os.MkdirAll(filepath.Join(c.root, ".claude"), 0o755); err != nil {
				t.Fatal(err)
			}
			c.write(".claude/settings.local.json", `{"env":{"PRIV_SETTINGS_TOKEN":"`+secSettings+`"}}`+"\n")
			c.agentscm("change-capture", "configure", "--root", c.root, "--spool", c.spool, "--capture-mode", mode)
			work := c.startWork("privacy " + mode)
			var en struct {
				Upload struct {
					Connected   bool   `json:"connected"`
					Hub         string `json:"hub"`
					Transcripts string `json:"transcripts"`
					First       *struct {
						Files    int   `json:"files"`
						Bytes    int64 `json:"bytes"`
						Withheld []struct {
							Path string `json:"path"`
						} `json:"withheld"`
					} `json:"first_increment"`
				} `json:"upload"`
			}
			if err := json.Unmarshal([]byte(c.agentscm("changelog", "enable", "--root", c.root, "--format", "json")), &en); err != nil {
				t.Fatal(err)
			}
			wantForm := "withheld"
			if mode == event.ModeSharedConversation {
				wantForm = "redacted"
			}
			if !en.Upload.Connected || en.Upload.Hub != url || en.Upload.Transcripts != wantForm {
				t.Fatalf("changelog enable says %+v, want transcripts %s to %s", en.Upload, wantForm, url)
			}
			// Said before the first upload: what it sends and what it
			// withholds.
			if f := en.Upload.First; f == nil || f.Files < 4 || f.Bytes <= 0 || fmt.Sprint(f.Withheld) != "[{.claude/settings.local.json} {.env.local} {id_rsa}]" {
				t.Fatalf("changelog enable's first increment: %+v", en.Upload.First)
			}
			if text := c.agentscm("changelog", "enable", "--root", c.root); !strings.Contains(text, "first upload: the first increment will upload") || !strings.Contains(text, "to "+url) ||
				!strings.Contains(text, "3 secret files") || !strings.Contains(text, ".env.local") {
				t.Fatalf("changelog enable does not say what the first increment uploads and withholds:\n%s", text)
			}
			api, err := scriptedapi.Start(scriptedapi.Turn{Marker: "SCENARIO-PRIV", Steps: [][]scriptedapi.ToolCall{
				{bash("printf 'PRIV%s\\n' OUTPUT-3f80; printf 'ghp_%s\\n' Zx81Qw72Er63Ty54Ui45Op36As27Df18Gh09 # " + privInput)},
				{write(filepath.Join(c.root, "neutral.txt"), "neutral\n")},
				{bash("printf 'API_KEY=ENVPROD%s\\n' -SECRET-7a8b > .env.production")},
				{bash("printf 'PRIV%s\\n' ERROR-77b1 >&2; exit 3")},
				{bash("echo done > done.txt")},
				// Claude Code may flush a call's result line to the
				// transcript after the next call's hook ran: one more call
				// makes sure the failing call's output is in an increment.
				{bash("echo more > more.txt")},
			}, FinalText: "ok"})
			if err != nil {
				t.Fatal(err)
			}
			defer api.Close()
			c.runClaude(api, "-p", "Please run SCENARIO-PRIV now. "+privPrompt+" token "+privToken)
			list := c.changelogList()
			if len(list) != 6 {
				t.Fatalf("%d increments, want 6: %+v", len(list), list)
			}
			// The local changelog holds the secret files and, but in
			// metadata-only mode, the conversation (so the search below can
			// find them when they leak). In metadata-only mode nothing
			// under the client's config directory holds the conversation.
			local := hubBytes(t, c.changelogDir(), nil)
			conversation := []string{privPrompt, privInput, privOutput, privError}
			for _, s := range append([]string{secEnvLocal, secRSA, secSettings, secEnvProd}, conversation...) {
				if !anyHolds(local, s) && (mode != event.ModeMetadataOnly || !slices.Contains(conversation, s)) {
					t.Fatalf("the local changelog does not hold %q: the test would not see a leak", s)
				}
			}
			if mode == event.ModeMetadataOnly {
				config := hubBytes(t, c.config, nil)
				for _, s := range append(conversation, "SCENARIO-PRIV") {
					if anyHolds(config, s) {
						t.Errorf("metadata-only mode: %q is kept under the config directory in %s", s, where(config, s))
					}
				}
			}
			// Another machine (a fresh root with its own connection and
			// HOME): apply --from-hub --resume-conversation restores the
			// files; outside shared mode it says the conversation was not
			// shared (exit 8: partial), in shared mode it resumes the
			// redacted copy.
			b := filepath.Join(c.dir, "fresh-b")
			if err := os.MkdirAll(b, 0o755); err != nil {
				t.Fatal(err)
			}
			c.agentscm("client", "setup", "--root", b, "--hub", url, "--repository", "proj", "--token-file", tok)
			var ap struct {
				Shared  bool   `json:"conversation_shared"`
				Note    string `json:"conversation_note"`
				Resumed *struct {
					Transcript string `json:"transcript"`
				} `json:"resumed"`
			}
			apply := []string{"changelog", "apply", "--root", b, "--to", "4", "--from-hub", "--work", work, "--resume-conversation", "--format", "json"}
			var out string
			if mode == event.ModeSharedConversation {
				out = c.applySecretsWithheld(apply...)
			} else {
				// The transcript root was withheld from the Hub: listed,
				// and the apply is partial (exit 8).
				out = c.applyWithheld(apply...)
				if !strings.Contains(out, `"partial": true`) || !strings.Contains(out, `"withheld": true`) {
					t.Fatalf("%s mode: apply --from-hub --format json does not list the withheld root:\n%s", mode, out)
				}
			}
			if err := json.Unmarshal([]byte(out), &ap); err != nil {
				t.Fatal(err)
			}
			checkSecretsListed(t, out)
			for _, f := range []string{"neutral.txt", "done.txt", "ordinary.txt", ".env.example"} {
				if !exists(t, filepath.Join(b, f)) {
					t.Fatalf("apply --from-hub did not restore %s", f)
				}
			}
			for _, f := range secretFiles {
				if exists(t, filepath.Join(b, f)) {
					t.Fatalf("apply --from-hub restored the secret file %s", f)
				}
			}
			if mode != event.ModeSharedConversation {
				if ap.Shared || !strings.Contains(ap.Note, "not shared") || ap.Resumed != nil {
					t.Fatalf("%s mode: apply --from-hub --resume-conversation: %+v", mode, ap)
				}
			} else {
				if !ap.Shared || ap.Resumed == nil {
					t.Fatalf("shared mode: apply --from-hub --resume-conversation: %+v", ap)
				}
				tb, err := os.ReadFile(ap.Resumed.Transcript)
				if err != nil || !bytes.Contains(tb, []byte(privPrompt)) || bytes.Contains(tb, []byte(privToken)) || !bytes.Contains(tb, []byte("[REDACTED:github_token]")) {
					t.Fatalf("shared mode: the resumed transcript is not the redacted conversation (%v):\n%.2000s", err, tb)
				}
			}
			logs := stop()
			got := hubBytes(t, data, logs)
			if len(got) < 3 {
				t.Fatalf("the Hub stored almost nothing: %v", keys(got))
			}
			// Every increment reached the Hub.
			objects := 0
			for p, b := range got {
				if strings.HasSuffix(p, "(gunzipped)") && bytes.Contains(b, []byte(".agentscm-changelog-meta/meta.json")) {
					objects++
				}
			}
			if objects < 6 {
				t.Fatalf("%d increments in the Hub's objects, want 6", objects)
			}
			if anyHolds(got, privToken) {
				t.Errorf("the token reached the Hub in %s", where(got, privToken))
			}
			for _, s := range []string{secEnvLocal, secRSA, secSettings, secEnvProd} {
				if anyHolds(got, s) {
					t.Errorf("%s mode: the secret file's %q reached the Hub in %s", mode, s, where(got, s))
				}
			}
			if mode != event.ModeSharedConversation {
				for _, s := range []string{privPrompt, privInput, privOutput, privError, "SCENARIO-PRIV"} {
					if anyHolds(got, s) {
						t.Errorf("%s mode: %q reached the Hub in %s", mode, s, where(got, s))
					}
				}
				if mode == event.ModeMetadataOnly {
					resumeFromAgentTranscript(t, c)
				}
				return
			}
			// Shared: the conversation is there, redacted, in the
			// changelog's transcript copies.
			var transcript []byte
			for p, b := range got {
				if strings.HasSuffix(p, "(gunzipped)") && bytes.Contains(b, []byte(`"sessionId"`)) && bytes.Contains(b, []byte(privPrompt)) {
					transcript = b
				}
			}
			if transcript == nil {
				t.Fatal("shared mode: no increment on the Hub holds the transcript")
			}
			if !bytes.Contains(transcript, []byte("[REDACTED:github_token]")) {
				t.Fatalf("shared mode: the uploaded transcript has no redaction marker")
			}
			for _, s := range []string{privPrompt, privInput, privOutput} {
				if !anyHolds(got, s) {
					t.Errorf("shared mode: %q never reached the Hub", s)
				}
			}
		})
	}
}

// resumeFromAgentTranscript: in metadata-only mode a rewind with
// --resume-conversation rebuilds the conversation from the agent's own
// transcript (no copy was kept), and says plainly that it no longer can
// once that transcript is gone.
func resumeFromAgentTranscript(t *testing.T, c *checkout) {
	t.Helper()
	var rw struct {
		Source  string `json:"conversation_source"`
		Resumed *struct {
			SessionID  string `json:"session_id"`
			Transcript string `json:"transcript"`
		} `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("rewind", "--root", c.root, "--to", "1", "--resume-conversation", "--format", "json")), &rw); err != nil {
		t.Fatal(err)
	}
	if rw.Source != "agent_transcript" || rw.Resumed == nil {
		t.Fatalf("metadata-only rewind --resume-conversation: %+v", rw)
	}
	tb, err := os.ReadFile(rw.Resumed.Transcript)
	if err != nil || !bytes.Contains(tb, []byte(privPrompt)) || bytes.Contains(tb, []byte(privError)) {
		t.Fatalf("the resumed conversation is not the session cut at call 1 (%v):\n%.2000s", err, tb)
	}
	if exists(t, filepath.Join(c.root, "done.txt")) || !exists(t, filepath.Join(c.root, "neutral.txt")) {
		t.Fatal("the rewind to 1 did not restore call 1's files")
	}
	// The agent's transcript removed: the files still rewind, the
	// conversation cannot be rebuilt, and the command says why.
	session := c.changelogList()[1].Session
	if err := os.Remove(filepath.Join(changelog.ClaudeProjectDir(c.home, c.root), session+".jsonl")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := c.agentscmExit("rewind", "--root", c.root, "--to", "1", "--resume-conversation")
	if code == 0 || !strings.Contains(stderr, "can no longer be resumed") || !strings.Contains(stderr, "was removed") || !strings.Contains(stderr, "metadata-only") {
		t.Fatalf("rewind --resume-conversation after the transcript was removed: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// applySecretsWithheld runs an apply from the Hub that must be partial
// (exit 8) for the secret files alone, and returns its stdout.
func (c *checkout) applySecretsWithheld(args ...string) string {
	c.t.Helper()
	code, stdout, stderr := c.agentscmExit(args...)
	if code != 8 || !strings.Contains(stderr, "the rewind is partial") || !strings.Contains(stderr, "a secret file") {
		c.t.Fatalf("agentscm %v: exit %d, want 8 listing the secret files\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
	}
	return stdout
}

// checkSecretsListed checks that an apply's --format json output lists
// every secret file as withheld, with its digest.
func checkSecretsListed(t *testing.T, out string) {
	t.Helper()
	var res struct {
		Partial      bool `json:"partial"`
		Unrestorable []struct {
			Path     string `json:"path"`
			Withheld bool   `json:"withheld"`
			Digest   string `json:"digest"`
		} `json:"unrestorable"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, u := range res.Unrestorable {
		if u.Path != "" {
			if !u.Withheld || len(u.Digest) != 64 {
				t.Fatalf("unrestorable %+v is not a withheld secret file", u)
			}
			listed = append(listed, u.Path)
		}
	}
	if !res.Partial || strings.Join(listed, " ") != strings.Join(secretFiles, " ") {
		t.Fatalf("apply --from-hub lists %v (partial %v), want the secret files %v:\n%s", listed, res.Partial, secretFiles, out)
	}
}

func (c *checkout) changelogDir() string {
	c.t.Helper()
	var out struct {
		Dir string `json:"dir"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("changelog", "list", "--root", c.root, "--format", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out.Dir
}

func anyHolds(m map[string][]byte, s string) bool { return where(m, s) != "" }

func where(m map[string][]byte, s string) string {
	var in []string
	for p, b := range m {
		if bytes.Contains(b, []byte(s)) {
			in = append(in, p)
		}
	}
	return strings.Join(in, ", ")
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, fmt.Sprintf("%s (%d bytes)", k, len(m[k])))
	}
	return out
}

// TestChangelogUndoKeepsResumedConversation: rewinding with
// --resume-conversation, continuing the resumed conversation and then
// undoing the rewind leaves that conversation resumable (the undo used to
// delete its transcript: "No conversation found").
func TestChangelogUndoKeepsResumedConversation(t *testing.T) {
	c := newCheckout(t)
	c.agentscm("changelog", "enable", "--root", c.root)
	api, err := scriptedapi.Start(
		scriptedapi.Turn{Marker: "SCENARIO-A", Steps: [][]scriptedapi.ToolCall{
			{bash("echo A-RESULT-0 > a0.txt; echo A-RESULT-0")}, {bash("echo A-RESULT-1 > a1.txt; echo A-RESULT-1")},
		}, FinalText: "a done"},
		scriptedapi.Turn{Marker: "SCENARIO-B", Steps: [][]scriptedapi.ToolCall{{bash("echo B > b1.txt")}}, FinalText: "b done"},
		scriptedapi.Turn{Marker: "SCENARIO-C", FinalText: "c done"},
	)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c.runClaude(api, "-p", "Run SCENARIO-A.")
	var out struct {
		Undo    int `json:"undo_position"`
		Resumed *struct {
			SessionID  string `json:"session_id"`
			Transcript string `json:"transcript"`
		} `json:"resumed"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("rewind", "--root", c.root, "--to", "0", "--resume-conversation", "--format", "json")), &out); err != nil {
		t.Fatal(err)
	}
	if out.Resumed == nil {
		t.Fatal("no resumed conversation")
	}
	// The resumed conversation goes on, with a tool call of its own.
	if res := c.runClaude(api, "-p", "--resume", out.Resumed.SessionID, "Run SCENARIO-B."); res.Result != "b done" {
		t.Fatalf("resumed: %q", res.Result)
	}
	c.agentscm("changelog", "apply", "--root", c.root, "--to", fmt.Sprint(out.Undo))
	if !exists(t, filepath.Join(c.root, "a1.txt")) {
		t.Fatal("the undo did not restore a1.txt")
	}
	if !exists(t, out.Resumed.Transcript) {
		t.Fatalf("the undo deleted the resumed conversation's transcript %s", out.Resumed.Transcript)
	}
	if res := c.runClaude(api, "-p", "--resume", out.Resumed.SessionID, "Now SCENARIO-C."); res.Result != "c done" {
		t.Fatalf("resuming after the undo: %q", res.Result)
	}
}
