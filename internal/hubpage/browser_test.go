package hubpage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/browsertest"
	"github.com/chromedp/chromedp"
)

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// BrowserSignIn signs in through the form, as a person does, and checks
// that no secret is left in the address.
func browserSignIn(t *testing.T, ctx context.Context, base, secret string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", secret),
		chromedp.Submit("#signin"),
		chromedp.WaitVisible("header nav"),
	)
	if loc := run(t, ctx, chromedp.Location()); strings.Contains(loc, "ascm_") || !strings.HasSuffix(loc, "/works") {
		t.Fatalf("after sign-in the address is %s", loc)
	}
}

// TestBrowserPages: in Chromium, sign in, read the Works, the Work's
// timeline with hostile names rendered as text (no element made, no script
// ran), the settings and the body view; a forged POST is refused; a
// read-only sign-in has no state-changing control.
func TestBrowserPages(t *testing.T) {
	f := newFixture(t)
	ctx := browsertest.New(t, 90*time.Second)
	do(t, ctx, "sign-in page", chromedp.Navigate(f.srv.URL+"/works"), chromedp.WaitVisible("#token"))
	if msg := run(t, ctx, chromedp.Text("#message")); !strings.Contains(msg, "Sign in to continue") {
		t.Fatalf("an unsigned visit to /works shows %q", msg)
	}
	browsertest.Screenshot(t, ctx, "signin")
	browserSignIn(t, ctx, f.srv.URL, f.rw)
	browsertest.Screenshot(t, ctx, "works")
	do(t, ctx, "an unknown work", chromedp.Navigate(f.srv.URL+"/works/wrk_nope"), chromedp.WaitVisible("#message"))
	if msg := run(t, ctx, chromedp.Text("#message")); !strings.Contains(msg, `no work "wrk_nope"`) {
		t.Fatalf("unknown work page %q", msg)
	}
	browsertest.Screenshot(t, ctx, "error")
	do(t, ctx, "back", chromedp.Navigate(f.srv.URL+"/works"), chromedp.WaitVisible("#works"))

	do(t, ctx, "open the work", chromedp.Click("#works a"), chromedp.WaitVisible("#summary"))
	summary := run(t, ctx, chromedp.Text("#summary"))
	files := run(t, ctx, chromedp.Text("tr.call td.files"))
	tool := run(t, ctx, chromedp.Text("tr.call td.tool"))
	imgs := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
	scripts := run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('script').length`))
	browsertest.Screenshot(t, ctx, "work")
	if summary != "2 calls, 1 failed; 1 created, 1 modified, 1 deleted" {
		t.Fatalf("summary %q", summary)
	}
	if !strings.Contains(files, hostilePath) || tool != hostileTool || imgs != 0 || scripts != 0 {
		t.Fatalf("hostile names: files %q tool %q, %d img, %d script elements", files, tool, imgs, scripts)
	}

	do(t, ctx, "settings", chromedp.Navigate(f.srv.URL+"/settings"), chromedp.WaitVisible("#retention"))
	retention := run(t, ctx, chromedp.Text("#retention"))
	browsertest.Screenshot(t, ctx, "settings")
	if !strings.Contains(retention, "kept 9 days on 127.0.0.1:") {
		t.Fatalf("retention %q", retention)
	}

	do(t, ctx, "body", chromedp.Navigate(f.srv.URL+"/works/"+f.work+"/bodies/"+f.bodyDigest), chromedp.WaitVisible("#body"))
	body := run(t, ctx, chromedp.Text("#body"))
	scripts = run(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('script').length`))
	browsertest.Screenshot(t, ctx, "body")
	if body != bodyText || scripts != 0 {
		t.Fatalf("body view %q, %d scripts", body, scripts)
	}

	// A same-origin POST without the session's token is refused (403);
	// the page's own form carries it and deletes the body.
	do(t, ctx, "settings", chromedp.Navigate(f.srv.URL+"/settings"), chromedp.WaitVisible("#retention"))
	status := run(t, ctx, chromedp.Evaluate[int](`fetch(document.querySelector('form.delete').action, {method: 'POST', body: new URLSearchParams({csrf: 'forged'})}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Fatalf("a forged POST answered %d", status)
	}
	do(t, ctx, "delete through the page", chromedp.Click("form.delete button"), chromedp.WaitNotPresent("form.delete"))

	// Read-only: a fresh browser profile signed in with the read-only token.
	ro := browsertest.New(t, 60*time.Second)
	browserSignIn(t, ro, f.srv.URL, f.ro)
	do(t, ro, "read-only settings", chromedp.Navigate(f.srv.URL+"/settings"), chromedp.WaitVisible("#readonly"))
	marker := run(t, ro, chromedp.Text("#readonly"))
	forms := run(t, ro, chromedp.Evaluate[int](`document.querySelectorAll('main form, main button').length`))
	browsertest.Screenshot(t, ro, "settings-read-only")
	if marker != "read-only" || forms != 0 {
		t.Fatalf("read-only page: marker %q, %d forms or buttons", marker, forms)
	}
}
