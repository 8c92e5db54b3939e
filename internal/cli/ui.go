package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/localui"
)

// UIClockFileEnv is an end-to-end test hook honoured only by agentscm ui:
// the file it names holds a number of seconds added to the ui server's
// clock, read again on every clock reading, so a browser test can let a
// confirmation panel's two minutes pass. Never set it otherwise.
const UIClockFileEnv = "AGENTSCM_UI_TEST_CLOCK_FILE"

func uiCommand() *Command {
	return &Command{Name: "ui", Summary: "the local page: each checkout's capture setting and the sharing switch, in a browser", Run: runUI}
}

func runUI(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm ui", "[--addr 127.0.0.1:PORT] [--open] [--format text|json]",
		`Serve the local page for the person at this computer on a loopback address
(127.0.0.1 or ::1 only; a random free port unless --addr names one) and
print its URL. The URL carries a one-time secret: the first visit exchanges
it for a session cookie (HttpOnly, SameSite=Strict) and is redirected to a
URL without it; the link does not work a second time (stop and start
agentscm ui for a new one). Requests whose Host header is not the bound
address:port are refused (DNS rebinding); the session ends after an hour
unused or 12 hours after sign-in.

The page (and GET /v1/local/capture, JSON) lists every checkout that has a
capture binding or a client connection with its state: Not set up, Off,
Metadata only, Local only or Shared with Hub, and how long its Hub keeps
shared conversations. "Share agent conversations with Hub" first shows
what is shared and a confirmation naming the repository and Hub; only its
Confirm turns sharing on (as change-capture enable --mode
shared-conversation with --expect-repository/--expect-hub), so a checkout
reconnected meanwhile is refused. The confirmation expires after two
minutes or when the checkout, its Hub or its mode changes. Turning sharing
off needs no confirmation (as change-capture set-mode --mode metadata-only).

--format json prints {"url": ..., "addr": ...} on one line for scripts.
--open also opens the URL in the default browser. Ctrl-C stops the server.`)
	addr := fs.String("addr", "127.0.0.1:0", "loopback address to listen on (127.0.0.1:PORT or [::1]:PORT; port 0 picks a free one)")
	open := fs.Bool("open", false, "open the URL in the default browser")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if err := localui.CheckAddr(*addr); err != nil {
		return usagef("%v", err)
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		return err
	}
	ln, err := localui.Listen(*addr)
	if err != nil {
		return err
	}
	srv, err := localui.New(localui.Config{
		Store: store, Conns: conns,
		Connected: func() ([]string, error) {
			f, err := connections.Load(store.Dir)
			if err != nil {
				return nil, err
			}
			roots := make([]string, 0, len(f.Connections))
			for _, c := range f.Connections {
				roots = append(roots, c.Root)
			}
			return roots, nil
		},
		Retention:  func(ctx context.Context, root string) (int, error) { return hubRetention(ctx, store.Dir, root) },
		Agent:      func(root string) string { return detectAgent(env, root) },
		Resume:     func(root string) { kickCheckout(env, root) },
		Executable: env.Executable,
		Now:        uiClock(env),
	}, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	if *format == "json" {
		if err := writeJSONLine(env, struct {
			URL  string `json:"url"`
			Addr string `json:"addr"`
		}{srv.URL(), srv.Addr()}); err != nil {
			ln.Close()
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "agentscm ui: open %s\n  (the link works once; Ctrl-C stops the server)\n", srv.URL())
	}
	if *open {
		if err := openBrowser(ctx, srv.URL()); err != nil {
			fmt.Fprintf(env.Stderr, "warning: could not open a browser: %v; open the URL yourself\n", err)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return srv.Serve(ctx, ln)
}

func writeJSONLine(env *Env, v any) error {
	// One line, so a script reads the first line.
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", b)
	return err
}

// hubRetention asks the Hub of root's connection, with the checkout's own
// agent token, how many days it keeps shared conversation bodies.
func hubRetention(ctx context.Context, dir, root string) (int, error) {
	c, err := connections.Lookup(dir, root)
	if err != nil {
		return 0, err
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	who, err := conn.Whoami(ctx)
	if err != nil {
		return 0, err
	}
	return who.SharedConversationRetentionDays, nil
}

// uiClock is the ui server's clock: env.Now, shifted by the seconds in the
// file UIClockFileEnv names (tests only).
func uiClock(env *Env) func() time.Time {
	file := env.Getenv(UIClockFileEnv)
	if file == "" {
		return env.Now
	}
	return func() time.Time {
		b, err := os.ReadFile(file)
		if err != nil {
			return env.Now()
		}
		off, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || off < 0 || off > 100*365*86400 {
			return env.Now()
		}
		return env.Now().Add(time.Duration(off) * time.Second)
	}
}

func openBrowser(ctx context.Context, url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	cmd := exec.CommandContext(ctx, name, url)
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}
