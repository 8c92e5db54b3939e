package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func clientCommand() *Command {
	return &Command{
		Name:    "client",
		Summary: "connect checkouts to a Hub (or to the embedded local store)",
		Sub: []*Command{
			{Name: "setup", Summary: "connect a checkout to a Hub repository, or --local to the embedded store", Run: runClientSetup},
			{Name: "status", Summary: "show client connections; --check asks each Hub who we are", Run: runClientStatus},
			{Name: "remove", Summary: "remove a checkout's client connection", Run: runClientRemove},
		},
	}
}

// checkTimeout bounds one whoami call of client status --check.
const checkTimeout = 5 * time.Second

// connectionView is a connection as status prints it: never the token.
type connectionView struct {
	Root       string     `json:"root"`
	Kind       string     `json:"kind"`
	Hub        string     `json:"hub"`
	Repository string     `json:"repository"`
	WorktreeID string     `json:"worktree_id"`
	Human      string     `json:"human,omitempty"`
	Data       string     `json:"data,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	HubCheck   *hubCheck  `json:"hub_check,omitempty"`
	Replaced   *replacedC `json:"replaced,omitempty"`
	// CaptureModeLowered is set when the change lowered the checkout's
	// shared-conversation capture to metadata-only.
	CaptureModeLowered bool `json:"capture_mode_lowered,omitempty"`
}

// loweredNote is the line that tells the user sharing stopped.
const loweredNote = "  capture mode lowered from shared-conversation to metadata-only: conversation bodies no longer leave this machine;\n" +
	"  to share again, confirm with change-capture set-mode --root %s --mode shared-conversation\n"

type replacedC struct {
	Hub        string `json:"hub"`
	Repository string `json:"repository"`
}

// hubCheck is the result of client status --check: whoami through the
// connection. SharedConversationRetentionDays is present only when valid.
type hubCheck struct {
	Valid                           bool      `json:"valid"`
	CheckedAt                       time.Time `json:"checked_at"`
	Human                           string    `json:"human,omitempty"`
	Repository                      string    `json:"repository,omitempty"`
	Scope                           string    `json:"scope,omitempty"`
	SharedConversationRetentionDays int       `json:"shared_conversation_retention_days,omitempty"`
	// SharedConversationRetention is the seed's sentence: "kept N days on
	// <hub>", or "kept for as long as the Hub operator sets (30 days
	// unless changed)" when the number is unknown.
	SharedConversationRetention string `json:"shared_conversation_retention"`
	Error                       string `json:"error,omitempty"`
}

func viewOf(c connections.Connection) connectionView {
	return connectionView{Root: c.Root, Kind: c.Kind, Hub: c.Hub, Repository: c.Repository, WorktreeID: c.WorktreeID,
		Human: c.Human, Data: c.Data, CreatedAt: c.CreatedAt}
}

func configDir(env *Env) (string, error) { return binding.ConfigDir(env.Getenv) }

// canonicalRoot resolves a --root (relative to the working directory when
// not absolute) to the canonical checkout root.
func canonicalRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("--root: %w", err)
	}
	return connections.CanonicalRoot(abs)
}

// repositoryName names the repository of a checkout for --local: the
// directory holding the Git common directory (so every worktree of a
// repository shares it), else the checkout's own name.
func repositoryName(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--path-format=absolute", "--git-common-dir")
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	out, err := cmd.Output()
	if err == nil {
		common := strings.TrimSpace(string(out))
		if filepath.Base(common) == ".git" {
			return filepath.Base(filepath.Dir(common))
		}
		if name := strings.TrimSuffix(filepath.Base(common), ".git"); name != "" && name != "." && name != "/" {
			return name
		}
	}
	return filepath.Base(root)
}

func runClientSetup(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm client setup", "[--root PATH] (--hub URL --repository NAME --token-file PATH | --local [--repository NAME]) [--format text|json]",
		`Connect a checkout to a Hub repository. With --hub the token in --token-file
is checked with GET /v1/hub/whoami first and kept in the connections file
(mode 0600). With --local the checkout uses the embedded Hub under the user's
config directory (SQLite, in-process, no server), creating the local human and
the repository (named after the checkout's repository unless --repository is
given), so one command sets a solo user up. A new connection gets a random
worktree id; reconnecting the same Hub and repository keeps it.`)
	rootF := fs.String("root", "", rootHelp)
	hubURL := fs.String("hub", "", "the Hub's base URL, e.g. https://hub.example:8420")
	repo := fs.String("repository", "", "the Hub repository")
	tokenFile := fs.String("token-file", "", "file holding the bearer token (first line)")
	local := fs.Bool("local", false, "use the embedded local Hub")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *local == (*hubURL != "") {
		return usagef("give either --hub URL --repository NAME --token-file PATH, or --local")
	}
	if !*local && (*repo == "" || *tokenFile == "") {
		return usagef("--hub needs --repository and --token-file")
	}
	if *local && *tokenFile != "" {
		return usagef("--local takes no --token-file")
	}
	root, err := canonicalRoot(*rootF)
	if err != nil {
		return err
	}
	dir, err := configDir(env)
	if err != nil {
		return err
	}
	var c connections.Connection
	var prev *connections.Connection
	if *local {
		name := *repo
		if name == "" {
			name = repositoryName(ctx, root)
		}
		if !api.ValidName(name) {
			return fmt.Errorf("cannot name a repository after %q; pass --repository NAME", name)
		}
		c, prev, err = client.SetupLocal(ctx, dir, root, name, env.Now())
	} else {
		var tok string
		tok, err = client.ReadToken(*tokenFile)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, prev, err = client.SetupHub(cctx, dir, root, *hubURL, *repo, tok, env.Now())
	}
	var unchecked *client.UncheckedError
	if errors.As(err, &unchecked) {
		fmt.Fprintf(env.Stderr, "warning: %v\n", err)
		err = nil
	}
	if err != nil {
		return err
	}
	// What waited for a connection (changelog increments, spooled
	// events) is delivered now, not at the next hook.
	defer kickCheckout(env, c.Root)
	v := viewOf(c)
	if u, err := url.Parse(c.Hub); err == nil && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		fmt.Fprintf(env.Stderr, "warning: %s is plain http: the token travels unencrypted; put the Hub behind https\n", c.Hub)
	}
	if prev != nil && (prev.Hub != c.Hub || prev.Repository != c.Repository) {
		v.Replaced = &replacedC{Hub: prev.Hub, Repository: prev.Repository}
		// A replaced connection never carries sharing over.
		lowered, err := binding.LowerForConnectionChange(capture.StateDir{Dir: dir}, c.Root)
		if err != nil {
			return fmt.Errorf("connection replaced, but lowering the capture mode failed: %w", err)
		}
		v.CaptureModeLowered = lowered
	}
	if *format == "json" {
		return writeJSON(env.Stdout, v)
	}
	fmt.Fprintf(env.Stdout, "connected %s\n  hub:         %s\n  repository:  %s\n  worktree id: %s\n", c.Root, c.Hub, c.Repository, c.WorktreeID)
	if v.Replaced != nil {
		fmt.Fprintf(env.Stdout, "  replaced the connection to repository %s on %s\n", prev.Repository, prev.Hub)
	}
	if v.CaptureModeLowered {
		fmt.Fprintf(env.Stdout, loweredNote, c.Root)
	}
	fmt.Fprintf(env.Stdout, "next: agentscm work start --root %s\n", c.Root)
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func runClientStatus(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm client status", "[--root PATH] [--check] [--format text|json]",
		`Show the client connection of a checkout, or every connection. --check asks
each connection's Hub GET /v1/hub/whoami (at most 5 s each) and reports the
answer as hub_check, with shared_conversation_retention_days when it is valid;
the command then exits 1 if any check failed.`)
	rootF := fs.String("root", "", "path of a checkout (default: every connection)")
	check := fs.Bool("check", false, "check each connection with its Hub")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	dir, err := configDir(env)
	if err != nil {
		return err
	}
	f, err := connections.Load(dir)
	if err != nil {
		return err
	}
	conns := f.Connections
	if *rootF != "" {
		root, err := canonicalRoot(*rootF)
		if err != nil {
			return err
		}
		c, ok := f.Find(root)
		if !ok {
			return connections.ErrNoConnection
		}
		conns = []connections.Connection{c}
	}
	views := []connectionView{}
	failed := 0
	for _, c := range conns {
		v := viewOf(c)
		if *check {
			v.HubCheck = checkConnection(ctx, env, c)
			if !v.HubCheck.Valid {
				failed++
			}
		}
		views = append(views, v)
	}
	if *format == "json" {
		if err := writeJSON(env.Stdout, map[string]any{"connections": views}); err != nil {
			return err
		}
	} else {
		if len(views) == 0 {
			fmt.Fprintln(env.Stdout, "no client connections; run agentscm client setup --root PATH --local")
		}
		for _, v := range views {
			fmt.Fprintf(env.Stdout, "%s\n  hub:         %s\n  repository:  %s\n  worktree id: %s\n", v.Root, v.Hub, v.Repository, v.WorktreeID)
			if c := v.HubCheck; c != nil {
				if c.Valid {
					fmt.Fprintf(env.Stdout, "  hub check:   ok (%s, %s); shared conversations %s\n", c.Human, c.Scope, c.SharedConversationRetention)
				} else {
					fmt.Fprintf(env.Stdout, "  hub check:   FAILED: %s\n  shared conversations %s\n", c.Error, c.SharedConversationRetention)
				}
			}
		}
	}
	if failed > 0 {
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}

func checkConnection(ctx context.Context, env *Env, c connections.Connection) *hubCheck {
	hc := &hubCheck{CheckedAt: env.Now().UTC(), SharedConversationRetention: retentionUnknown}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	conn, err := client.Open(cctx, c, client.Options{})
	if err != nil {
		hc.Error = err.Error()
		return hc
	}
	defer conn.Close()
	who, err := conn.Whoami(cctx)
	if err != nil {
		hc.Error = err.Error()
		return hc
	}
	if who.Repository != c.Repository && !who.Admin {
		hc.Error = fmt.Sprintf("the token is for repository %q, not %q", who.Repository, c.Repository)
		return hc
	}
	if err := client.CheckRepository(cctx, conn, c.Hub, c.Repository); err != nil {
		hc.Error = err.Error()
		return hc
	}
	hc.Valid, hc.Human, hc.Repository, hc.Scope = true, who.Human, c.Repository, who.Scope
	hc.SharedConversationRetentionDays = who.SharedConversationRetentionDays
	hc.SharedConversationRetention = retentionWording(who.SharedConversationRetentionDays, c.Hub)
	return hc
}

func runClientRemove(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm client remove", "[--root PATH] [--format text|json]",
		`Remove a checkout's client connection. Nothing on the Hub is deleted.
The root is matched as given when the checkout no longer exists.`)
	rootF := fs.String("root", "", rootHelp)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	given, err := filepath.Abs(*rootF)
	if err != nil {
		return err
	}
	root, err := connections.CanonicalRoot(given)
	if err != nil {
		root = given // a deleted checkout: match the path as saved
	}
	dir, err := configDir(env)
	if err != nil {
		return err
	}
	c, err := connections.Remove(dir, root)
	if errors.Is(err, connections.ErrNoConnection) && root != given {
		c, err = connections.Remove(dir, given)
	}
	if err != nil {
		return err
	}
	// A removed connection lowers a shared-conversation binding to
	// metadata-only, so reconnecting never resumes sharing unconfirmed.
	lowered, err := binding.LowerForConnectionChange(capture.StateDir{Dir: dir}, c.Root)
	if err != nil {
		return fmt.Errorf("connection removed, but lowering the capture mode failed: %w", err)
	}
	v := viewOf(c)
	v.CaptureModeLowered = lowered
	if *format == "json" {
		return writeJSON(env.Stdout, v)
	}
	fmt.Fprintf(env.Stdout, "removed the connection of %s to repository %s on %s\n", c.Root, c.Repository, c.Hub)
	if lowered {
		fmt.Fprintf(env.Stdout, loweredNote, c.Root)
	}
	return nil
}
