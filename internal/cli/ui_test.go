package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestUIBadAddrExit2(t *testing.T) {
	for _, addr := range []string{"localhost:0", "0.0.0.0:0", "[::]:0", "10.0.0.1:80", "127.0.0.1", "127.0.0.1:x"} {
		var out, errb bytes.Buffer
		env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }, Now: time.Now}
		if code := Main(context.Background(), env, []string{"ui", "--addr", addr}); code != ExitUsage {
			t.Errorf("--addr %s: exit %d, want %d; stderr %s", addr, code, ExitUsage, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("--addr %s printed %q", addr, out.String())
		}
	}
}

// TestUIServesUntilCancelled starts agentscm ui in-process, signs in with
// the printed URL and stops it through its context.
func TestUIServesUntilCancelled(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errb, Now: time.Now,
		Getenv: func(k string) string {
			if k == "HOME" {
				return dir
			}
			return ""
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Main(ctx, env, []string{"ui", "--format", "json"}); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the URL: %v; stderr %s", err, errb.String())
	}
	go io.Copy(io.Discard, pr)
	var printed struct{ URL, Addr string }
	if err := json.Unmarshal([]byte(line), &printed); err != nil || !strings.HasPrefix(printed.URL, "http://127.0.0.1:") || !strings.Contains(printed.URL, "/signin?secret=") {
		t.Fatalf("printed %q: %v", line, err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Get(printed.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("sign-in: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Errorf("exit %d after cancel; stderr %s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentscm ui did not stop when its context ended")
	}
}
