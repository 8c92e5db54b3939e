// Command sessionbench measures a whole Claude Code session with agentscm's
// hooks on against the same session with no hooks (issue 18 item 5): the
// real Claude Code CLI (the e2e suite's pinned install in
// ~/.cache/agentscm-e2e) against the e2e suite's scripted Messages API
// (test/e2e/scriptedapi), one prompt whose turn makes -calls tool calls in
// a row (Write of a new file, then Bash reading it back, alternately).
//
// Two checkouts: "on" is set up as a user would (client setup --local,
// change-capture configure, which installs the agentscm-hook hooks, a
// current Work, changelog enable, which makes the entries of the
// changelog's events run both parts in one process, `agentscm-hook
// change-capture hook-claude --changelog`); "off" is the same git checkout
// with no agentscm hooks. The sessions run in interleaved pairs (off, then on), each a new `claude -p`
// process in its own checkout state; the figure is the wall time of the
// claude process, so the detached background deliverers (off the agent's
// critical path by design) are waited for after each "on" session and not
// counted, but reported. The budget is on/off <= 1.10x (median of the pair
// ratios).
//
//	go run ./bench/sessionbench -pairs 5 -calls 20
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

func main() {
	pairs := flag.Int("pairs", 5, "interleaved (off, on) session pairs (at least 5 for the budget)")
	calls := flag.Int("calls", 20, "tool calls per session")
	claude := flag.String("claude", "", "the claude CLI (default: the e2e suite's pinned install under ~/.cache/agentscm-e2e)")
	keep := flag.Bool("keep", false, "keep the checkouts (their path is printed) for a look at the hooks")
	on := flag.String("on", "capture,changelog", "what the hooks-on checkout runs: capture,changelog (the budget's setup), capture (no changelog), or true (the same hook entries running /bin/true: Claude Code's own cost of running hooks)")
	flag.Parse()
	if err := run(*pairs, *calls, *claude, *keep, *on); err != nil {
		fmt.Fprintln(os.Stderr, "sessionbench:", err)
		os.Exit(1)
	}
}

type checkout struct {
	label, dir, root, home, config string
}

func (c *checkout) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "ANTHROPIC_") || strings.HasPrefix(k, "CLAUDE") || k == "HOME" || k == "XDG_CONFIG_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+c.home, "XDG_CONFIG_HOME="+c.config)
}

func (c *checkout) cmd(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = c.root, c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %v\n%s", name, args, err, out)
	}
	return nil
}

func newCheckout(work, label string) (*checkout, error) {
	d := filepath.Join(work, label)
	c := &checkout{label: label, dir: d, root: filepath.Join(d, "repo"), home: filepath.Join(d, "home"), config: filepath.Join(d, "config")}
	for _, p := range []string{c.root, c.home} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(c.root, "README.md"), []byte("session benchmark checkout\n"), 0o644); err != nil {
		return nil, err
	}
	for _, a := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "."},
		{"-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "commit", "-qm", "init"},
	} {
		if err := c.cmd("git", a...); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func findClaude() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	m, _ := filepath.Glob(filepath.Join(home, ".cache", "agentscm-e2e", "claude-code-*", "node_modules", ".bin", "claude"))
	if len(m) == 0 {
		return "", fmt.Errorf("no Claude Code CLI under ~/.cache/agentscm-e2e (run an e2e test once, or pass -claude)")
	}
	slices.Sort(m)
	return m[len(m)-1], nil
}

// turn is the scripted turn of session n: calls tool calls, one per reply,
// alternately writing a new file and reading it back with Bash.
func turn(marker, root string, calls int) scriptedapi.Turn {
	t := scriptedapi.Turn{Marker: marker, FinalText: "All done."}
	for i := range calls {
		name := filepath.Join(root, fmt.Sprintf("%s-%02d.txt", strings.ToLower(marker), i/2))
		if i%2 == 0 {
			t.Steps = append(t.Steps, []scriptedapi.ToolCall{{Name: "Write", Input: map[string]any{"file_path": name, "content": fmt.Sprintf("line %d\n", i)}}})
		} else {
			t.Steps = append(t.Steps, []scriptedapi.ToolCall{{Name: "Bash", Input: map[string]any{"command": "cat " + name, "description": "read it back"}}})
		}
	}
	return t
}

type result struct {
	wall time.Duration
	// drain is how long the "on" session's background deliverers still
	// ran after claude exited (not part of wall).
	drain time.Duration
}

func session(ctx context.Context, claude string, api *scriptedapi.Server, c *checkout, marker string, calls int, hooks bool) (result, error) {
	api.SetTurns(turn(marker, c.root, calls))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, claude, "--output-format", "json", "--allowedTools", "Write,Edit,Bash,Read", "-p", "Please run "+marker+".")
	cmd.Dir = c.root
	cmd.Env = append(c.env(),
		"ANTHROPIC_BASE_URL="+api.URL,
		"ANTHROPIC_API_KEY=sk-ant-bench-dummy-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	var r result
	r.wall = time.Since(t0)
	if hooks {
		t1 := time.Now()
		wctx, wcancel := context.WithTimeout(context.Background(), 90*time.Second)
		werr := capture.StateDir{Dir: filepath.Join(c.config, "agentscm")}.WaitDeliverers(wctx)
		wcancel()
		r.drain = time.Since(t1)
		if werr != nil {
			return r, werr
		}
	}
	if err != nil {
		return r, fmt.Errorf("claude: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	var out struct {
		IsError  bool `json:"is_error"`
		NumTurns int  `json:"num_turns"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.IsError {
		return r, fmt.Errorf("claude reported an error (%v): %s\n%s", err, stdout.String(), stderr.String())
	}
	// Every call ran: the last file exists in the checkout.
	last := filepath.Join(c.root, fmt.Sprintf("%s-%02d.txt", strings.ToLower(marker), (calls-1)/2))
	if _, err := os.Stat(last); err != nil {
		return r, fmt.Errorf("the session did not run its tool calls (%v); output: %s", err, stdout.String())
	}
	return r, nil
}

func run(pairs, calls int, claude string, keep bool, mode string) error {
	switch mode {
	case "capture,changelog", "capture", "true", "http", "empty", "true1":
	default:
		return fmt.Errorf("-on %q: want capture,changelog, capture, true, true1, http or empty", mode)
	}
	if claude == "" {
		var err error
		if claude, err = findClaude(); err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "sessionbench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("# checkouts kept in %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-trimpath", "-o", bin+string(filepath.Separator),
		"github.com/agentscm/agentscm/cmd/agentscm", "github.com/agentscm/agentscm/cmd/agentscm-hook", "github.com/agentscm/agentscm/cmd/agentscm-hook-intake")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v\n%s", err, out)
	}
	agentscm := filepath.Join(bin, "agentscm")
	off, err := newCheckout(work, "off")
	if err != nil {
		return err
	}
	on, err := newCheckout(work, "on")
	if err != nil {
		return err
	}
	setup := [][]string{
		{"client", "setup", "--root", on.root, "--local"},
		{"change-capture", "configure", "--root", on.root, "--spool", filepath.Join(on.dir, "spool")},
		{"work", "start", "--root", on.root, "--title", "session benchmark"},
	}
	if mode != "capture" {
		setup = append(setup, []string{"changelog", "enable", "--root", on.root})
	}
	for _, a := range setup {
		if err := on.cmd(agentscm, a...); err != nil {
			return err
		}
	}
	sp := filepath.Join(on.root, ".claude", "settings.local.json")
	settings, _ := os.ReadFile(sp)
	if !strings.Contains(string(settings), "agentscm-hook") || (mode != "capture" && !strings.Contains(string(settings), "changelog hook-claude") && !strings.Contains(string(settings), "hook-claude --changelog")) {
		return fmt.Errorf("the on checkout lacks the capture or changelog hooks:\n%s", settings)
	}
	if mode == "empty" || mode == "true1" {
		// The same settings file without hook entries (empty), or with one
		// /bin/true entry per hook event (true1).
		var st map[string]any
		if err := json.Unmarshal(settings, &st); err != nil {
			return err
		}
		if mode == "empty" {
			st["hooks"] = map[string]any{}
		} else {
			hooks, _ := st["hooks"].(map[string]any)
			for ev := range hooks {
				hooks[ev] = []any{map[string]any{"hooks": []any{map[string]any{"type": "command", "command": "/bin/true"}}}}
			}
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(sp, b, 0o644); err != nil {
			return err
		}
	}
	if mode == "true" || mode == "http" {
		// The same hook entries, each running /bin/true (true) or posting
		// to a loopback server that answers 204 at once (http).
		hookURL := ""
		var posts atomic.Int64
		defer func() {
			if mode == "http" {
				fmt.Printf("http hook posts received: %d\n", posts.Load())
			}
		}()
		if mode == "http" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				posts.Add(1)
				w.WriteHeader(http.StatusNoContent)
			})}
			go srv.Serve(ln)
			defer srv.Close()
			hookURL = "http://" + ln.Addr().String() + "/hook"
		}
		var st map[string]any
		if err := json.Unmarshal(settings, &st); err != nil {
			return err
		}
		hooks, _ := st["hooks"].(map[string]any)
		for _, groups := range hooks {
			for _, g := range groups.([]any) {
				for _, h := range g.(map[string]any)["hooks"].([]any) {
					if hookURL != "" {
						hm := h.(map[string]any)
						delete(hm, "command")
						hm["type"], hm["url"] = "http", hookURL
					} else {
						h.(map[string]any)["command"] = "/bin/true"
					}
				}
			}
		}
		b, _ := json.MarshalIndent(st, "", "  ")
		if err := os.WriteFile(sp, b, 0o644); err != nil {
			return err
		}
	}
	api, err := scriptedapi.Start()
	if err != nil {
		return err
	}
	defer api.Close()
	ctx := context.Background()
	fmt.Printf("# go run ./bench/sessionbench -pairs %d -calls %d -on %s, %s, claude %s\n", pairs, calls, mode, time.Now().UTC().Format("2006-01-02 15:04:05 UTC"), claude)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("# load average at start: %s", b)
	}
	// One warm-up pair (node's and the CLI's first start, page cache).
	if _, err := session(ctx, claude, api, off, "SBWARMOFF", calls, false); err != nil {
		return err
	}
	if _, err := session(ctx, claude, api, on, "SBWARMON", calls, true); err != nil {
		return err
	}
	var ratios []float64
	var offs, ons []time.Duration
	for p := range pairs {
		a, err := session(ctx, claude, api, off, fmt.Sprintf("SBOFF%d", p), calls, false)
		if err != nil {
			return err
		}
		b, err := session(ctx, claude, api, on, fmt.Sprintf("SBON%d", p), calls, true)
		if err != nil {
			return err
		}
		r := b.wall.Seconds() / a.wall.Seconds()
		ratios, offs, ons = append(ratios, r), append(offs, a.wall), append(ons, b.wall)
		fmt.Printf("pair %d: hooks off %.2f s, hooks on %.2f s (deliverers ran %.2f s more), ratio %.2fx, +%.0f ms per tool call\n",
			p+1, a.wall.Seconds(), b.wall.Seconds(), b.drain.Seconds(), r, float64((b.wall-a.wall).Milliseconds())/float64(calls))
	}
	// The hooks did run: the spool holds the sessions' events.
	insp := exec.Command(agentscm, "change-capture", "events", "--spool", filepath.Join(on.dir, "spool"), "--format", "json")
	insp.Env = on.env()
	out, err := insp.Output()
	if err != nil {
		return fmt.Errorf("change-capture events: %w", err)
	}
	var rep struct {
		Events int `json:"events"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return fmt.Errorf("change-capture events: %w", err)
	}
	if want := (pairs + 1) * calls; (mode == "capture" || mode == "capture,changelog") && rep.Events < want {
		return fmt.Errorf("the hooks-on spool holds %d events, want at least %d: the hooks did not run", rep.Events, want)
	}
	fmt.Printf("hooks-on spool: %d events captured over %d sessions\n", rep.Events, pairs+1)
	slices.Sort(ratios)
	slices.Sort(offs)
	slices.Sort(ons)
	med := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		med = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	fmt.Printf("median: hooks off %.2f s, hooks on %.2f s, median pair ratio %.2fx (budget <= 1.10x)\n",
		offs[len(offs)/2].Seconds(), ons[len(ons)/2].Seconds(), med)
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("# load average at end: %s", b)
	}
	return nil
}
