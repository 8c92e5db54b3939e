//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentscm/agentscm/internal/browsertest"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/test/e2e/scriptedapi"
)

// TestLocalPageTurnsSharingOn: a person who ran a Claude Code session in a
// metadata-only checkout opens agentscm ui in headless Chromium, turns
// sharing on through the confirmation panel, and the next real Claude Code
// session's bodies reach the real hub serve; the first session's never do.
func TestLocalPageTurnsSharingOn(t *testing.T) {
	c := newCheckout(t)
	data := filepath.Join(c.dir, "hubdata")
	c.agentscm("hub", "admin", "human", "create", "--data", data, "--name", "alice")
	c.agentscm("hub", "admin", "repository", "create", "--data", data, "--name", "proj")
	tok := filepath.Join(c.dir, "alice.token")
	c.agentscm("hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tok)
	url, stop := c.startHubWith(data, "127.0.0.1:0", nil, "--shared-conversation-retention-days", "5")
	defer stop()
	c.agentscm("client", "setup", "--root", c.root, "--hub", url, "--repository", "proj", "--token-file", tok)
	c.agentscm("change-capture", "enable", "--root", c.root)
	var w api.Work
	if err := json.Unmarshal([]byte(c.agentscm("work", "start", "--root", c.root, "--title", "local page", "--format", "json")), &w); err != nil {
		t.Fatal(err)
	}
	sapi, err := scriptedapi.Start(convTurn("SCENARIO-LOCALUI-ONE"), convTurn("SCENARIO-LOCALUI-TWO"))
	if err != nil {
		t.Fatal(err)
	}
	defer sapi.Close()
	const before, after = "LOCALUI-BEFORE-5d1c", "LOCALUI-AFTER-93be"
	c.runClaude(sapi, "-p", "Please run SCENARIO-LOCALUI-ONE now. "+before)
	if l := c.bodies(c.root, w.ID); len(l.Bodies) != 0 {
		t.Fatalf("a metadata-only session shared bodies: %+v", l)
	}

	// agentscm ui, as the person starts it.
	cmd := exec.Command(h.agentscm, "ui", "--format", "json")
	cmd.Env = c.env()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("agentscm ui: %v", err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("agentscm ui did not stop on SIGINT")
		}
	}()
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
	}()
	var printed struct{ URL, Addr string }
	select {
	case l := <-line:
		if err := json.Unmarshal([]byte(l), &printed); err != nil {
			t.Fatalf("agentscm ui printed %q: %v", l, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agentscm ui printed no URL")
	}

	ctx := browsertest.New(t, 2*time.Minute)
	sec := func(rest string) chromedp.CSS {
		return chromedp.CSS(fmt.Sprintf(`section[data-root=%q] %s`, c.root, rest))
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(printed.URL), chromedp.WaitVisible(sec(".state"))); err != nil {
		t.Fatal(err)
	}
	if s, _ := chromedp.Run(ctx, chromedp.Text(sec(".state"))); s != "Metadata only" {
		t.Fatalf("state %q", s)
	}
	if err := chromedp.Do(ctx, chromedp.Click(sec(`form[action="/v1/local/capture/share"] button`)), chromedp.WaitVisible(sec(".panel"))); err != nil {
		t.Fatal(err)
	}
	panel, _ := chromedp.Run(ctx, chromedp.Text(sec(".panel")))
	for _, want := range []string{"Confirm: share conversations with proj on " + url, "kept 5 days on " + url} {
		if !strings.Contains(panel, want) {
			t.Errorf("panel lacks %q:\n%s", want, panel)
		}
	}
	browsertest.Screenshot(t, ctx, "panel")
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.body.setAttribute("data-stale", "1")`),
		chromedp.Click(sec(".confirm-button")), chromedp.WaitVisible(chromedp.CSS("body:not([data-stale]) .flash-ok"))); err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, ctx, "shared")
	var st struct {
		Mode string `json:"capture_mode"`
	}
	if err := json.Unmarshal([]byte(c.agentscm("change-capture", "status", "--root", c.root, "--format", "json")), &st); err != nil || st.Mode != "shared-conversation" {
		t.Fatalf("after Confirm: mode %q %v", st.Mode, err)
	}

	// The next session is shared.
	c.runClaude(sapi, "-p", "Please run SCENARIO-LOCALUI-TWO now. "+after)
	l := c.bodies(c.root, w.ID)
	if len(l.Bodies) == 0 {
		t.Fatal("no body was shared after Confirm")
	}
	found := false
	for _, b := range l.Bodies {
		if b.State != api.BodyAvailable {
			t.Errorf("body %s is %s, not uploaded", b.Digest, b.State)
			continue
		}
		text := c.agentscm("change-capture", "conversation", "--root", c.root, "--work-id", w.ID, "--digest", b.Digest)
		if strings.Contains(text, before) {
			t.Errorf("a body of the session before Confirm reached the Hub: %s", b.Digest)
		}
		found = found || strings.Contains(text, after)
	}
	if !found {
		t.Errorf("no shared body holds the second session's prompt: %+v", l)
	}
}
