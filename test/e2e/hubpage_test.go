//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/browsertest"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
	"github.com/chromedp/chromedp"
)

// TestHubPageTimelineOfClaudeSession: one real Claude Code session in a
// checkout connected to a served Hub (capture and changelog on) writes a
// file, edits one and deletes another in a Bash call, and runs a Bash call
// that fails. change-capture show, run inside the checkout without
// --work-id, prints one line per call with its files and result and the
// summary; the Hub page of that hub serve process, opened in Chromium after
// sign-in, shows the same timeline, and its settings list the checkout with
// its sharing unchecked.
func TestHubPageTimelineOfClaudeSession(t *testing.T) {
	c := newCheckout(t)
	// One session key for every hub serve instance (two behind a
	// round-robin proxy under AGENTSCM_E2E_HUB=pg-s3-2), so a sign-in on
	// one is a sign-in on all.
	key := filepath.Join(c.dir, "page.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("0123456789abcdef", 4)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AGENTSCM_HUB_PAGE_KEY_FILE", key)
	url, tok, _ := c.serveHub()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.agentscm("change-capture", "enable", "--root", c.root)
	work := c.startWork("hub page e2e")
	c.agentscm("changelog", "enable", "--root", c.root)
	c.runTurn(
		[]scriptedapi.ToolCall{write(filepath.Join(c.root, "new.txt"), "new\n")},
		[]scriptedapi.ToolCall{bash("echo more >> README.md && rm b.txt")},
		[]scriptedapi.ToolCall{bash("echo failing && exit 3")},
	)

	// The terminal view, from inside the checkout.
	cmd := exec.Command(h.agentscm, "change-capture", "show", "--verbose")
	cmd.Dir, cmd.Env = c.root, c.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("show: %v\n%s", err, out)
	}
	text := string(out)
	for _, re := range []string{
		`(?m)^` + work + `  hub page e2e$`,
		`(?m)^  #\d+ +Write +succeeded position 0  \+new.txt$`,
		`(?m)^  #\d+ +Bash +succeeded position 1  ~README.md -b.txt  \[action unknown\]$`,
		`(?m)^  #\d+ +Bash +failed +position 2  no files changed$`,
		`(?m)^3 calls, 1 failed; 1 created, 1 modified, 1 deleted$`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Fatalf("show lacks %s:\n%s", re, text)
		}
	}
	if os.Getenv("AGENTSCM_E2E_FIXTURES") != "" {
		// Refresh the timeline package's fixtures from this real session.
		dir := os.Getenv("AGENTSCM_E2E_FIXTURES")
		os.WriteFile(filepath.Join(dir, "claude_record.json"), []byte(c.agentscm("change-capture", "show", "--root", c.root, "--record")), 0o644)
		os.WriteFile(filepath.Join(dir, "claude_changelog.json"), []byte(c.agentscm("changelog", "list", "--root", c.root, "--format", "json")), 0o644)
	}
	var tl struct {
		Summary struct{ Text string } `json:"summary"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "show", "--root", c.root, "--format", "json")), &tl); err != nil || tl.Summary.Text != "3 calls, 1 failed; 1 created, 1 modified, 1 deleted" {
		t.Fatalf("show --format json summary %q (%v)", tl.Summary.Text, err)
	}

	// The Hub page of the same hub serve process, in Chromium.
	secret, err := os.ReadFile(tok)
	if err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, 2*time.Minute)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text1 := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	do("sign in", chromedp.Navigate(url+"/"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", strings.TrimSpace(string(secret))), chromedp.Submit("#signin"), chromedp.WaitVisible("#works"))
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); strings.Contains(loc, "ascm_") {
		t.Fatalf("a secret in the address: %s", loc)
	}
	browsertest.Screenshot(t, ctx, "works")
	row := text1("#works tbody tr")
	if !strings.Contains(row, "hub page e2e") || !strings.Contains(row, api.StatePaused) {
		t.Fatalf("works row %q", row)
	}
	do("open the work", chromedp.Click("#works a"), chromedp.WaitVisible("#summary"))
	browsertest.Screenshot(t, ctx, "work")
	if s := text1("#summary"); s != "3 calls, 1 failed; 1 created, 1 modified, 1 deleted" {
		t.Fatalf("page summary %q", s)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('tr.call')].map(r => [...r.cells].map(c => c.innerText.split('\n')[0]).join('|'))`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Write|succeeded|0|+ new.txt", "Bash|succeeded|1|~ README.md", "Bash|failed|2|"}
	if len(rows) != len(want) {
		t.Fatalf("call rows %q", rows)
	}
	for i, r := range rows {
		if _, rest, _ := strings.Cut(r, "|"); !strings.HasPrefix(rest, want[i]) {
			t.Fatalf("call row %d %q, want …%q", i, r, want[i])
		}
	}
	cov := text1("#coverage")
	if !strings.Contains(cov, "identity_uncertain") || !strings.Contains(cov, "carries no id") {
		t.Fatalf("coverage is not explained: %q", cov)
	}

	// Settings -> Conversation sharing: hub serve runs as this user, so it
	// lists this checkout (its connection's token is alice's on this Hub)
	// with its setting, unshared.
	do("settings", chromedp.Navigate(url+"/settings"), chromedp.WaitVisible("#local"))
	browsertest.Screenshot(t, ctx, "settings")
	local := text1("#local tbody")
	if !strings.Contains(local, c.root) || !strings.Contains(local, "Metadata only") {
		t.Fatalf("this computer's checkouts: %q", local)
	}
	if checked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#local input[type=checkbox]').checked`)); err != nil || checked {
		t.Fatalf("the sharing box is checked (%v)", err)
	}
}
