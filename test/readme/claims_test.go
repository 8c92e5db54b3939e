package readme

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// claims are the checks of the README's sentences about exit statuses and
// stdout (see words_test.go): each runs the binaries in a fresh sandbox.
var claims = []claim{
	{"agentscm's exit status (also in `agentscm --help`)", checkExitTable},
	{"always exit 0 and print nothing on", checkHooksStdout},
	{"from the child's real exit status", checkRecipeStatus},
	{"`change-capture run-recipe` exits with the recipe's own status", checkRecipeStatus},
	{"exits 7 naming the generation now", func(t *testing.T, bin string) { exit7(newSandbox(t, bin)) }},
	{"it is refused with exit status 6 and the list of those paths", func(t *testing.T, bin string) { exit6Changed(newSandbox(t, bin)) }},
	{"a rewind that would change it refuses (exit 6) unless `--discard-outside-edits`", func(t *testing.T, bin string) { exit6Outside(t, newSandbox(t, bin)) }},
	{"each problem with its fix; exit 1 when one is found", func(t *testing.T, bin string) {
		s := newSandbox(t, bin)
		if r := s.expect(s.checkout, "agentscm doctor", "", 1, nil); !strings.Contains(r.stdout, "problem(s) found") || !strings.Contains(r.stdout, "fix: agentscm enable") {
			t.Errorf("doctor of a checkout that is not set up: %q", r.stdout)
		}
		s.must(s.checkout, "agentscm enable >/dev/null")
		if r := s.expect(s.checkout, "agentscm doctor", "", 0, nil); !strings.Contains(r.stdout, "no problems found") {
			t.Errorf("doctor after enable: %q", r.stdout)
		}
	}},
	{"a rewind from the Hub lists them (exit 8)", func(t *testing.T, bin string) {
		s := newSandbox(t, bin)
		s.must(s.checkout, "agentscm client setup --root \"$PWD\" --local >/dev/null && agentscm changelog enable --no-transcript-root >/dev/null")
		var w struct {
			ID string `json:"id"`
		}
		json.Unmarshal([]byte(s.must(s.checkout, "agentscm work start --title t --format json")), &w)
		s.must(s.checkout, "echo TOKEN=s3cret > .env && echo a > a.txt")
		p := fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_1"}`, s.checkout)
		s.expect(s.checkout, "agentscm changelog hook-claude", p, 0, regexp.MustCompile(`^$`))
		s.waitDeliverers() // the increment reaches the Hub in the hook's background deliverer
		fresh := filepath.Join(s.dir, "fresh")
		r := s.expect(s.dir, "agentscm changelog apply --root '"+fresh+"' --to 0 --from-hub --work "+w.ID, "", 8, nil)
		if !strings.Contains(r.stderr, ".env") {
			t.Errorf("apply --from-hub does not list the secret file: %q", r.stderr)
		}
		if _, err := os.Stat(filepath.Join(fresh, ".env")); err == nil {
			t.Errorf("the secret file left the machine")
		}
		if b, _ := os.ReadFile(filepath.Join(fresh, "a.txt")); string(b) != "a\n" {
			t.Errorf("a.txt after the apply: %q", b)
		}
	}},
	{"save refuses a file inside a capture root (exit 2)", func(t *testing.T, bin string) {
		s := newSandbox(t, bin)
		s.must(s.checkout, "agentscm changelog enable >/dev/null")
		r := s.expect(s.checkout, "agentscm snapshot save --file \"$PWD/inside.tgz\"", "", 2, regexp.MustCompile(`^$`))
		if _, err := os.Stat(filepath.Join(s.checkout, "inside.tgz")); err == nil || !strings.Contains(r.stderr, "inside the capture root") {
			t.Errorf("snapshot save inside the root: %q (file written: %v)", r.stderr, err == nil)
		}
	}},
}

// exitRows reads the exit status table under the README's "agentscm's exit
// status" sentence (or docs/reference.md's, where it may move).
func exitRows(t *testing.T) map[string]string {
	t.Helper()
	row := regexp.MustCompile(`(?m)^\| ([0-9]+) \| (.+) \|$`)
	rows := map[string]string{}
	for _, f := range []string{"../../README.md", "../../docs/reference.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range row.FindAllStringSubmatch(string(b), -1) {
			rows[m[1]] = m[2]
		}
	}
	return rows
}

// checkExitTable: agentscm --help prints the README's table, and each
// documented status is what the command it names returns.
func checkExitTable(t *testing.T, bin string) {
	rows := exitRows(t)
	if len(rows) == 0 {
		t.Fatal("no exit status table found")
	}
	s := newSandbox(t, bin)
	help := s.expect(s.dir, "agentscm --help", "", 0, nil).stdout
	for code, meaning := range rows {
		if !strings.Contains(help, "  "+code+"  "+meaning+"\n") {
			t.Errorf("agentscm --help does not say %q for exit status %s", meaning, code)
		}
	}
	checks := map[string]func(*sandbox){
		"0": func(s *sandbox) { s.expect(s.dir, "agentscm status --help", "", 0, nil) },
		"1": func(s *sandbox) {
			s.expect(s.checkout, "agentscm work start --title x", "", 1, regexp.MustCompile(`^$`))
		},
		"2": func(s *sandbox) {
			s.expect(s.dir, "agentscm --no-such-flag", "", 2, nil)
			s.expect(s.dir, "agentscm no-such-command", "", 2, nil)
		},
		"4": func(s *sandbox) {
			s.must(s.checkout, "agentscm changelog enable >/dev/null && echo junk > ../junk.tgz")
			s.expect(s.checkout, "agentscm snapshot load --file ../junk.tgz", "", 4, nil)
		},
		"5": func(s *sandbox) {
			s.must(s.checkout, "agentscm changelog enable >/dev/null && agentscm changelog capture >/dev/null")
			prompt(s, "changelog hook-claude", "s1", 0)
			r := s.expect(s.checkout, "agentscm rewind --to 0", "", 5, nil)
			if !strings.Contains(r.stderr, "an agent turn is running: session s1") {
				t.Errorf("exit 5 does not name the turn: %q", r.stderr)
			}
		},
		"6": exit6Changed,
		"7": exit7,
		"8": func(s *sandbox) {
			s.must(s.checkout, "agentscm changelog enable >/dev/null")
			for i := 1; i <= 3; i++ {
				s.must(s.checkout, fmt.Sprintf("echo %d > f.txt && agentscm changelog capture >/dev/null", i))
			}
			r := s.expect(s.checkout, "agentscm revert --call 1", "", 8, nil)
			if !strings.Contains(r.stdout, "conflict left alone") {
				t.Errorf("revert exit 8 without its conflict: %q", r.stdout)
			}
		},
	}
	for code := range rows {
		check, ok := checks[code]
		if !ok {
			t.Errorf("exit status %s is documented but this test has no command that returns it: add one", code)
			continue
		}
		t.Run("exit "+code, func(t *testing.T) { check(newSandbox(t, bin)) })
	}
}

func exit6Changed(s *sandbox) {
	s.must(s.checkout, "agentscm changelog enable >/dev/null && echo 1 > f.txt && agentscm changelog capture >/dev/null && echo 2 > f.txt && agentscm changelog capture >/dev/null && echo mine > f.txt")
	r := s.expect(s.checkout, "agentscm rewind --to 0", "", 6, nil)
	if !strings.Contains(r.stderr, filepath.Join(s.checkout, "f.txt")) {
		s.t.Errorf("exit 6 does not list the changed path: %q", r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(s.checkout, "f.txt")); string(b) != "mine\n" {
		s.t.Errorf("the refused rewind changed f.txt to %q", b)
	}
}

func exit6Outside(t *testing.T, s *sandbox) {
	s.must(s.checkout, "agentscm changelog enable >/dev/null && echo 1 > f.txt && agentscm changelog capture >/dev/null")
	s.must(s.checkout, "echo outside > f.txt")
	prompt(s, "changelog hook-claude", "s1", 0) // finds the outside work
	stop := fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"Stop"}`, s.checkout)
	s.expect(s.checkout, "agentscm changelog hook-claude", stop, 0, nil)
	r := s.expect(s.checkout, "agentscm rewind --to 0", "", 6, nil)
	if !strings.Contains(r.stderr, "work done outside the agent") || !strings.Contains(r.stderr, "--discard-outside-edits") {
		t.Errorf("exit 6 without the outside work: %q", r.stderr)
	}
	s.expect(s.checkout, "agentscm rewind --to 0 --discard-outside-edits", "", 0, nil)
}

func exit7(s *sandbox) {
	s.must(s.checkout, "agentscm client setup --root \"$PWD\" --local >/dev/null")
	var w struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(s.must(s.checkout, "agentscm work start --title t --format json")), &w)
	r := s.expect(s.checkout, "agentscm work takeover --work-id "+w.ID+" --expect-generation 7", "", 7, nil)
	if !strings.Contains(r.stderr, "was not changed: it is at generation 1 now") {
		s.t.Errorf("exit 7 does not name the generation now: %q", r.stderr)
	}
}

// prompt runs the prompt hook of session through cmd and checks it exits
// 0 with empty stdout.
func prompt(s *sandbox, cmd, session string, _ int) result {
	s.t.Helper()
	p := fmt.Sprintf(`{"session_id":%q,"cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"x"}`, session, s.checkout)
	return s.expect(s.checkout, "agentscm "+cmd, p, 0, regexp.MustCompile(`^$`))
}

// checkHooksStdout: every hook entry point exits 0 with nothing on stdout,
// also on a payload it cannot read (one warning line on stderr), except the
// two answers the host reads: the SessionStart guidance of registered
// recipes, and the prompt refusal while another session's turn runs.
func checkHooksStdout(t *testing.T, bin string) {
	s := newSandbox(t, bin)
	s.must(s.checkout, "agentscm change-capture enable --root \"$PWD\" --local >/dev/null && agentscm changelog enable >/dev/null && agentscm work start --title t >/dev/null")
	empty := regexp.MustCompile(`^$`)
	events := []string{
		`{"session_id":"s1","cwd":%q,"hook_event_name":"SessionStart","source":"startup"}`,
		`{"session_id":"s1","cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"p"}`,
		`{"session_id":"s1","cwd":%q,"hook_event_name":"PreToolUse","tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"a"}}`,
		`{"session_id":"s1","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"a"},"tool_response":{}}`,
		`{"session_id":"s1","cwd":%q,"hook_event_name":"Stop"}`,
	}
	for _, hook := range []string{"agentscm change-capture hook-claude", "agentscm changelog hook-claude", "agentscm-hook change-capture hook-claude --changelog",
		"agentscm change-capture hook-codex", "agentscm change-capture hook-gemini"} {
		for _, ev := range events {
			s.expect(s.checkout, hook, fmt.Sprintf(ev, s.checkout), 0, empty)
		}
		r := s.expect(s.checkout, hook, "this is not a payload", 0, empty)
		if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); r.stderr == "" || n != 0 {
			t.Errorf("%s on a bad payload: stderr %q, want one warning line", hook, r.stderr)
		}
	}
	// The prompt of a second session while the first one's turn runs is
	// refused with the host's blocking answer on stdout (after the wait).
	s.expect(s.checkout, "agentscm changelog hook-claude", fmt.Sprintf(events[1], s.checkout), 0, empty)
	p2 := fmt.Sprintf(`{"session_id":"s2","cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"p"}`, s.checkout)
	r := s.expect(s.checkout, "agentscm changelog hook-claude", p2, 0, nil)
	var answer map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &answer); err != nil || answer["decision"] != "block" {
		t.Errorf("the refused prompt's stdout is not the blocking answer: %q", r.stdout)
	}
	// SessionStart with registered recipes prints the guidance.
	g := recipeSandbox(t, bin, 0)
	if !strings.Contains(g.guidance, "run-recipe --id rec") {
		t.Errorf("SessionStart with a registered recipe printed %q, want the run-recipe guidance", g.guidance)
	}
}

type recipeBox struct {
	*sandbox
	guidance, command string
}

// recipeSandbox registers a recipe exiting with code, starts a session
// (whose SessionStart prints the guidance) and runs the PreToolUse hook of
// the guided Bash call.
func recipeSandbox(t *testing.T, bin string, code int) recipeBox {
	s := newSandbox(t, bin)
	def := filepath.Join(s.dir, "rec.json")
	os.WriteFile(def, fmt.Appendf(nil, `{"id":"rec","argv":["/bin/sh","-c","exit %d"],"coverage":"complete","timeout_seconds":30,"max_output_bytes":1048576}`, code), 0o600)
	s.must(s.checkout, "agentscm client setup --root \"$PWD\" --local >/dev/null")
	s.must(s.checkout, fmt.Sprintf("agentscm change-capture configure --root \"$PWD\" --spool %s --recipe-file %s >/dev/null", filepath.Join(s.dir, "spool"), def))
	s.must(s.checkout, "agentscm work start --title t >/dev/null")
	r := s.expect(s.checkout, "agentscm change-capture hook-claude", fmt.Sprintf(`{"session_id":"native-1","cwd":%q,"hook_event_name":"SessionStart","source":"startup"}`, s.checkout), 0, nil)
	box := recipeBox{sandbox: s, guidance: r.stdout}
	var out struct {
		HookSpecificOutput struct {
			AdditionalContext string `json:"additionalContext"`
		} `json:"hookSpecificOutput"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("SessionStart stdout is not the host's JSON answer: %v %q", err, r.stdout)
	}
	for _, l := range strings.Split(out.HookSpecificOutput.AdditionalContext, "\n") {
		if _, cmd, ok := strings.Cut(l, "(timeout 30 s): "); ok && strings.HasPrefix(l, "- recipe rec") {
			box.command = cmd
		}
	}
	if box.command == "" {
		t.Fatalf("no run-recipe command in the guidance %q", out.HookSpecificOutput.AdditionalContext)
	}
	pre, _ := json.Marshal(map[string]any{"session_id": "native-1", "cwd": s.checkout, "hook_event_name": "PreToolUse",
		"tool_name": "Bash", "tool_use_id": "toolu_1", "tool_input": map[string]string{"command": box.command}})
	s.expect(s.checkout, "agentscm change-capture hook-claude", string(pre), 0, regexp.MustCompile(`^$`))
	return box
}

// checkRecipeStatus: run-recipe exits with the recipe child's own status,
// and records passed or failed from it.
func checkRecipeStatus(t *testing.T, bin string) {
	for _, code := range []int{0, 3} {
		b := recipeSandbox(t, bin, code)
		r := b.expect(b.checkout, "CLAUDECODE=1 CLAUDE_CODE_SESSION_ID=native-1 "+b.command, "", code, nil)
		want := "verification passed"
		if code != 0 {
			want = fmt.Sprintf("verification failed (result failed, exit %d)", code)
		}
		if !strings.Contains(r.stderr+r.stdout, want) {
			t.Errorf("run-recipe of a child exiting %d: %q, want %q", code, r.stderr+r.stdout, want)
		}
	}
}
