package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"log"
	"net"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hubpage"
)

func hubCommand() *Command {
	return &Command{
		Name:    "hub",
		Summary: "run a Hub for a team and administer it",
		Sub: []*Command{
			{Name: "serve", Summary: "serve the Hub's HTTP API and the Hub page", Run: runHubServe},
			{Name: "migrate", Summary: "copy an embedded or single-node Hub into PostgreSQL and an object store, verified", Run: runHubMigrate},
			{Name: "admin", Summary: "create humans, repositories and tokens in a Hub's stores", Sub: []*Command{
				{Name: "human", Summary: "humans of the Hub", Sub: []*Command{
					{Name: "create", Summary: "add a human", Run: runHubAdminHumanCreate},
				}},
				{Name: "repository", Summary: "repositories of the Hub", Sub: []*Command{
					{Name: "create", Summary: "add a repository", Run: runHubAdminRepositoryCreate},
				}},
				{Name: "token", Summary: "bearer tokens", Sub: []*Command{
					{Name: "create", Summary: "issue a token bound to a human and a repository (printed once)", Run: runHubAdminTokenCreate},
				}},
				{Name: "list", Summary: "list humans, repositories and tokens (never token secrets)", Run: runHubAdminList},
			}},
		},
	}
}

func runHubServe(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm hub serve", "--listen ADDR (--data DIR | --store DSN --objects SPEC) [--shared-conversation-retention-days N]",
		`Serve the Hub's HTTP JSON API under /v1/ on ADDR (host:port; port 0 picks a
free one) with the SQLite store and object directory in DIR (created 0700).
Every route except GET /v1/hub/health needs a bearer token (agentscm hub admin
token create). The first line on stdout is "listening on http://HOST:PORT".
SIGTERM or SIGINT stops accepting connections and lets in-flight requests
finish (at most 30 s) before exiting 0. Every 10 minutes the Hub expires
shared conversation bodies past their retention and removes their objects.
The Hub page is served at / on the same address: sign in there with a token
to read the Works, each Work's timeline and Settings -> Conversation sharing
(docs/pages.md).

`+hubBackendHelp)
	listen := fs.String("listen", "127.0.0.1:8420", "address to listen on (host:port)")
	backend := addHubBackendFlags(fs)
	days := fs.Int("shared-conversation-retention-days", hub.DefaultRetentionDays, "days the Hub keeps an uploaded shared conversation body (1 to 3650)")
	keyFile := fs.String("page-session-key-file", "", "file (mode 0600, at least 32 random bytes) whose key seals the Hub page's session cookies; give every instance of a multi-instance Hub the same one (default: $"+PageKeyFileEnv+", else a random key per process)")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	pageKey, err := readPageKey(env, *keyFile)
	if err != nil {
		return err
	}
	if _, err := backend.resolve(env); err != nil {
		return err
	}
	if *days < hub.MinRetentionDays || *days > hub.MaxRetentionDays {
		return usagef("--shared-conversation-retention-days must be %d to %d, not %d", hub.MinRetentionDays, hub.MaxRetentionDays, *days)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	svc, where, err := backend.open(ctx, env, hub.Config{RetentionDays: *days, Now: hubClock(env)})
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	logger := log.New(env.Stderr, "agentscm hub: ", log.LstdFlags)
	fmt.Fprintf(env.Stdout, "listening on http://%s\n", ln.Addr())
	logger.Printf("serving %s (shared conversation retention %d days)", where, *days)
	// The retention sweep, every 10 minutes; safe on every instance of a
	// multi-instance Hub (one holds its lease).
	sweepCtx, stopSweep := context.WithCancel(ctx)
	swept := make(chan struct{})
	go func() { defer close(swept); svc.RunSweeper(sweepCtx, hub.SweepInterval, logger.Printf) }()
	defer func() { stopSweep(); <-swept }()
	page, err := hubpage.New(svc, hubpage.Options{Now: hubClock(env), Log: logger, SessionKey: pageKey,
		Local: func(ctx context.Context, p hub.Principal) ([]hubpage.LocalCheckout, error) {
			return localCheckouts(ctx, env, svc, p)
		}})
	if err != nil {
		return err
	}
	if err := hub.Serve(ctx, ln, hubpage.Mount(hub.NewHandler(svc, logger), page), logger); err != nil {
		return err
	}
	logger.Printf("shut down")
	return nil
}

func adminFlags(env *Env, name, synopsis, desc string) (*flag.FlagSet, *hubBackend) {
	fs := newFlags(env, "agentscm hub admin "+name, "(--data DIR | --store DSN --objects SPEC) "+synopsis, desc+`

It works directly on the Hub's stores, as the operator; a running hub serve
on the same stores sees the change at once.

`+hubBackendHelp)
	return fs, addHubBackendFlags(fs)
}

func openHubData(ctx context.Context, env *Env, b *hubBackend) (*hub.Service, error) {
	svc, _, err := b.open(ctx, env, hub.Config{})
	return svc, err
}

func runHubAdminHumanCreate(ctx context.Context, env *Env, args []string) error {
	fs, data := adminFlags(env, "human create", "--name NAME [--admin] [--format text|json]", "Add a human to the Hub. An admin can read every repository and use the admin routes.")
	name := fs.String("name", "", "the human's unique name (required)")
	admin := fs.Bool("admin", false, "make the human a Hub admin")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *name == "" {
		return usagef("--name is required")
	}
	svc, err := openHubData(ctx, env, data)
	if err != nil {
		return err
	}
	defer svc.Close()
	h, err := svc.CreateHuman(ctx, hub.Operator(), api.CreateHumanRequest{Name: *name, Admin: *admin})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, h)
	}
	fmt.Fprintf(env.Stdout, "human %s created (%s, admin: %t)\n", h.Name, h.ID, h.Admin)
	return nil
}

func runHubAdminRepositoryCreate(ctx context.Context, env *Env, args []string) error {
	fs, data := adminFlags(env, "repository create", "--name NAME [--format text|json]", "Add a repository to the Hub.")
	name := fs.String("name", "", "the repository's unique name (required)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *name == "" {
		return usagef("--name is required")
	}
	svc, err := openHubData(ctx, env, data)
	if err != nil {
		return err
	}
	defer svc.Close()
	r, err := svc.CreateRepository(ctx, hub.Operator(), api.CreateRepositoryRequest{Name: *name})
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, r)
	}
	fmt.Fprintf(env.Stdout, "repository %s created (%s)\n", r.Name, r.ID)
	return nil
}

func runHubAdminTokenCreate(ctx context.Context, env *Env, args []string) error {
	fs, data := adminFlags(env, "token create", "--human NAME --repository NAME [--read-only] [--label TEXT] [--output FILE] [--format text|json]",
		`Issue a bearer token bound to a human and a repository. The Hub keeps only
its SHA-256; the secret is shown once: on stdout, or written to a new file
(mode 0600, never replacing one) with --output.`)
	human := fs.String("human", "", "the human the token acts for (required)")
	repo := fs.String("repository", "", "the repository the token is for (required)")
	ro := fs.Bool("read-only", false, "a read-only token: it can read and never write")
	label := fs.String("label", "", "a label to recognise the token by")
	output := fs.String("output", "", "write the secret to this new file instead of stdout")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *human == "" || *repo == "" {
		return usagef("--human and --repository are required")
	}
	if *output != "" && !filepath.IsAbs(*output) {
		return usagef("--output must be an absolute path")
	}
	svc, err := openHubData(ctx, env, data)
	if err != nil {
		return err
	}
	defer svc.Close()
	scope := api.ScopeReadWrite
	if *ro {
		scope = api.ScopeReadOnly
	}
	if *output != "" {
		if _, err := fsutil.ReadFileNoFollow(*output, 1); !errors.Is(err, iofs.ErrNotExist) {
			return fmt.Errorf("--output %s already exists; choose a new file", *output)
		}
	}
	k, err := svc.CreateToken(ctx, hub.Operator(), api.CreateTokenRequest{Human: *human, Repository: *repo, Scope: scope, Label: *label})
	if err != nil {
		return err
	}
	if *output != "" {
		if err := fsutil.WriteNew(*output, []byte(k.Secret+"\n"), fsutil.FileMode); err != nil {
			return fmt.Errorf("write token (token %s was issued; it is unusable without the secret, issue another): %w", k.ID, err)
		}
		k.Secret = ""
	}
	if *format == "json" {
		return writeJSON(env.Stdout, k)
	}
	if *output != "" {
		fmt.Fprintf(env.Stdout, "token %s (%s, %s for %s) written to %s\n", k.ID, k.Scope, k.Human, k.Repository, *output)
		return nil
	}
	fmt.Fprintf(env.Stderr, "token %s (%s, %s for %s); the secret is shown once:\n", k.ID, k.Scope, k.Human, k.Repository)
	fmt.Fprintln(env.Stdout, k.Secret)
	return nil
}

func runHubAdminList(ctx context.Context, env *Env, args []string) error {
	fs, data := adminFlags(env, "list", "[--format text|json]", "List the Hub's humans, repositories and tokens (never token secrets).")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	svc, err := openHubData(ctx, env, data)
	if err != nil {
		return err
	}
	defer svc.Close()
	var all api.AdminList
	for _, what := range []string{"humans", "repositories", "tokens"} {
		l, err := svc.AdminList(ctx, hub.Operator(), what)
		if err != nil {
			return err
		}
		all.Humans = append(all.Humans, l.Humans...)
		all.Repositories = append(all.Repositories, l.Repositories...)
		all.Tokens = append(all.Tokens, l.Tokens...)
	}
	if *format == "json" {
		return writeJSON(env.Stdout, all)
	}
	fmt.Fprintln(env.Stdout, "humans:")
	for _, h := range all.Humans {
		fmt.Fprintf(env.Stdout, "  %-24s %s admin=%t\n", h.Name, h.ID, h.Admin)
	}
	fmt.Fprintln(env.Stdout, "repositories:")
	for _, r := range all.Repositories {
		fmt.Fprintf(env.Stdout, "  %-24s %s\n", r.Name, r.ID)
	}
	fmt.Fprintln(env.Stdout, "tokens:")
	for _, k := range all.Tokens {
		fmt.Fprintf(env.Stdout, "  %s %-10s %s -> %s %s\n", k.ID, k.Scope, k.Human, k.Repository, k.Label)
	}
	return nil
}
