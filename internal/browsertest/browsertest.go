// Package browsertest starts Debian's headless Chromium for Go tests and
// drives it with chromedp, so pages are checked in a real browser.
//
// Tests call New to get a browser tab context. When no Chromium is found the
// test is skipped, unless AGENTSCM_REQUIRE_CHROMIUM is set (CI sets it), in
// which case it fails. AGENTSCM_CHROMIUM names the binary explicitly.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// ErrNoChromium reports that no Chromium binary was found.
var ErrNoChromium = errors.New("browsertest: no chromium binary found (install Debian's chromium or set AGENTSCM_CHROMIUM)")

// Chromium returns the path of the Chromium binary to drive: AGENTSCM_CHROMIUM
// when set, else the first of chromium, chromium-browser, google-chrome on PATH.
func Chromium() (string, error) {
	if p := os.Getenv("AGENTSCM_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("browsertest: AGENTSCM_CHROMIUM: %w", err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// New starts a headless Chromium for t and returns a tab context bounded by
// timeout; the browser is stopped when the test ends.
func New(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	bin, err := Chromium()
	if err != nil {
		if os.Getenv("AGENTSCM_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("%v (AGENTSCM_REQUIRE_CHROMIUM is set)", err)
		}
		t.Skipf("%v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tctx, tcancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		tcancel()
		cancel()
		acancel()
	})
	// Start the browser now so a start-up failure is reported here.
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("browsertest: start %s: %v", bin, err)
	}
	return tctx
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Screenshot saves a full-page PNG of the current tab as a test artifact and
// logs its path. Artifacts go to AGENTSCM_TEST_ARTIFACTS when set (CI can keep
// them), else under the test's temp dir.
func Screenshot(t testing.TB, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 gives a PNG
	if err != nil {
		t.Fatalf("browsertest: screenshot %s: %v", name, err)
	}
	dir := os.Getenv("AGENTSCM_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, unsafeName.ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	p := filepath.Join(dir, unsafeName.ReplaceAllString(name, "_")+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	t.Logf("screenshot %s: %s", name, p)
	return p
}
