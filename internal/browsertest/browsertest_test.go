package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestRendersAndClicks drives a real Chromium against a loopback server: the
// page renders, a click runs its script, and a screenshot is written.
func TestRendersAndClicks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>t</title><h1 id="h">hello &lt;b&gt;</h1>
<button id="b" onclick="document.getElementById('out').textContent='clicked'">go</button><p id="out"></p>`)
	}))
	defer srv.Close()
	ctx := New(t, 60*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	h, err := chromedp.Run(ctx, chromedp.Text("#h"))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#b")); err != nil {
		t.Fatal(err)
	}
	out, err := chromedp.Run(ctx, chromedp.Text("#out"))
	if err != nil {
		t.Fatal(err)
	}
	if h != "hello <b>" || out != "clicked" {
		t.Fatalf("h=%q out=%q", h, out)
	}
	p := Screenshot(t, ctx, "hello page")
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Fatalf("screenshot %s: %v (%d bytes)", p, err, len(b))
	}
}
