package cli

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/objects/s3"
	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/sqlite"
)

// The environment variables a Hub's stores may come from, so that a
// password need not be in argv.
const (
	envHubStore   = "AGENTSCM_HUB_STORE"
	envHubObjects = "AGENTSCM_HUB_OBJECTS"
)

// maxDSNFile bounds a --store-file.
const maxDSNFile = 4096

// hubBackend is where a Hub keeps its records and its objects: the
// embedded SQLite store and object directory in --data DIR, or PostgreSQL
// (--store) and an object directory or S3 bucket (--objects). The choice is
// made here, in the command tree, so agentscm-hook never links pgx or
// minio-go.
type hubBackend struct {
	data, store, storeFile, objects *string
}

const hubBackendHelp = `Records: the SQLite store in --data DIR (the default), or PostgreSQL with
--store postgres://USER@HOST:PORT/DB (or --store-file FILE holding the DSN,
or $AGENTSCM_HUB_STORE, so a password need not be in argv; pgxpool
parameters such as pool_max_conns=16 are honoured). Objects: DIR/objects, or
--objects /ABS/DIR, or --objects s3://BUCKET/PREFIX (or $AGENTSCM_HUB_OBJECTS)
with AWS_ENDPOINT_URL, AWS_REGION and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
or the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE).
Several hub serve processes may share one PostgreSQL database and one bucket.`

func addHubBackendFlags(fs *flag.FlagSet) *hubBackend {
	return &hubBackend{
		data:      fs.String("data", "", "Hub data directory (the SQLite store and objects; required without --store and --objects)"),
		store:     fs.String("store", "", "PostgreSQL DSN postgres://... of the Hub's records (default: SQLite in --data)"),
		storeFile: fs.String("store-file", "", "file holding the PostgreSQL DSN (instead of --store)"),
		objects:   fs.String("objects", "", "object store: an absolute directory or s3://BUCKET/PREFIX (default: DATA/objects)"),
	}
}

// resolved is a hubBackend with its defaults and environment applied.
type resolvedBackend struct {
	data, dsn, objects string
}

func (b *hubBackend) resolve(env *Env) (resolvedBackend, error) {
	r := resolvedBackend{data: *b.data, dsn: *b.store, objects: *b.objects}
	if r.data != "" && !filepath.IsAbs(r.data) {
		return r, usagef("--data must be an absolute directory")
	}
	if r.dsn != "" && *b.storeFile != "" {
		return r, usagef("give --store or --store-file, not both")
	}
	if *b.storeFile != "" {
		if !filepath.IsAbs(*b.storeFile) {
			return r, usagef("--store-file must be an absolute path")
		}
		raw, err := fsutil.ReadFileNoFollow(*b.storeFile, maxDSNFile)
		if err != nil {
			return r, fmt.Errorf("--store-file: %w", err)
		}
		if r.dsn = strings.TrimSpace(string(raw)); r.dsn == "" {
			return r, usagef("--store-file %s is empty", *b.storeFile)
		}
	}
	if r.dsn == "" && env.Getenv != nil {
		r.dsn = env.Getenv(envHubStore)
	}
	if r.objects == "" && env.Getenv != nil {
		r.objects = env.Getenv(envHubObjects)
	}
	if r.dsn != "" && !strings.HasPrefix(r.dsn, "postgres://") && !strings.HasPrefix(r.dsn, "postgresql://") {
		return r, usagef("the store must be a PostgreSQL DSN postgres://... (the default SQLite store is --data DIR)")
	}
	if r.dsn == "" && r.data == "" {
		return r, usagef("--data must be an absolute directory (or give --store and --objects)")
	}
	if r.objects == "" && r.data == "" {
		return r, usagef("--objects is required with --store when there is no --data")
	}
	if r.objects != "" && !strings.HasPrefix(r.objects, "s3://") && !filepath.IsAbs(r.objects) {
		return r, usagef("--objects must be an absolute directory or s3://BUCKET/PREFIX")
	}
	return r, nil
}

// describe names the stores for a log line, never with a password.
func (r resolvedBackend) describe() string {
	rec := "SQLite in " + r.data
	if r.dsn != "" {
		rec = "PostgreSQL " + redactDSN(r.dsn)
	}
	obj := filepath.Join(r.data, "objects")
	if r.objects != "" {
		obj = r.objects
	}
	return rec + ", objects in " + obj
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return u.Host + u.Path
}

// warnArgvPassword says once that a password given in argv is visible to
// every user of the machine.
func (b *hubBackend) warnArgvPassword(env *Env) {
	if u, err := url.Parse(*b.store); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok && env.Stderr != nil {
			fmt.Fprintf(env.Stderr, "agentscm: warning: the --store DSN carries a password, visible in the process list; use --store-file or $%s\n", envHubStore)
		}
	}
}

// open opens the Hub on the resolved stores.
func (b *hubBackend) open(ctx context.Context, env *Env, cfg hub.Config) (*hub.Service, string, error) {
	r, err := b.resolve(env)
	if err != nil {
		return nil, "", err
	}
	b.warnArgvPassword(env)
	if r.dsn == "" && r.objects == "" {
		svc, err := hub.Open(ctx, r.data, cfg) // the embedded layout, unchanged
		return svc, r.describe(), err
	}
	st, obj, err := r.openStores(ctx, env)
	if err != nil {
		return nil, "", err
	}
	svc, err := hub.New(st, obj, cfg)
	if err != nil {
		st.Close()
		return nil, "", err
	}
	return svc, r.describe(), nil
}

func (r resolvedBackend) openStores(ctx context.Context, env *Env) (store.Store, objects.Store, error) {
	if r.data != "" {
		if err := fsutil.MkdirPrivate(r.data); err != nil {
			return nil, nil, err
		}
		if err := fsutil.CheckPrivateDir(r.data); err != nil {
			return nil, nil, fmt.Errorf("hub data directory: %w", err)
		}
	}
	var st store.Store
	var err error
	if r.dsn != "" {
		st, err = postgres.Open(ctx, r.dsn)
	} else {
		st, err = sqlite.Open(ctx, r.data)
	}
	if err != nil {
		return nil, nil, err
	}
	obj, err := openObjects(ctx, env, r.objects, r.data)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, obj, nil
}

// openObjects opens an object store named as --objects takes it ("" is
// DATA/objects).
func openObjects(ctx context.Context, env *Env, spec, data string) (objects.Store, error) {
	switch {
	case spec == "":
		return objects.OpenDir(filepath.Join(data, "objects"))
	case strings.HasPrefix(spec, "s3://"):
		c, err := s3.ParseURI(spec)
		if err != nil {
			return nil, err
		}
		getenv := env.Getenv
		if getenv == nil {
			getenv = func(string) string { return "" }
		}
		return s3.Open(ctx, s3.FromEnv(c, getenv))
	default:
		return objects.OpenDir(spec)
	}
}

func runHubMigrate(ctx context.Context, env *Env, args []string) error {
	// "--from sqlite DIR" is the documented form; the flag package sees
	// "--from DIR".
	var rest []string
	for i := 0; i < len(args); i++ {
		if (args[i] == "--from" || args[i] == "-from") && i+1 < len(args) && args[i+1] == "sqlite" {
			rest = append(rest, "--from")
			i++
			continue
		}
		rest = append(rest, args[i])
	}
	fs := newFlags(env, "agentscm hub migrate", "--from sqlite DIR (--to DSN | --store-file FILE) --objects SPEC [--format text|json]",
		`Copy the Hub in the SQLite data directory DIR (the embedded Hub in
<config>/agentscm/hub, or a single-node hub serve --data DIR; stop it, and
capture into it, first: writes after the copy's snapshot stay behind) into
an empty PostgreSQL database and an object store, then verify
that every table has the same number of rows with the same digest on both
sides and that every increment object reads back under its digest. The rows
are copied in one transaction: a failed copy leaves the database empty.

The destination is named as hub serve takes it: --to (or --store) DSN,
--store-file FILE or $AGENTSCM_HUB_STORE, and --objects /ABS/DIR or
s3://BUCKET/PREFIX (or $AGENTSCM_HUB_OBJECTS).`)
	from := fs.String("from", "", "the source: sqlite DIR (DIR is the absolute Hub data directory; required)")
	to := fs.String("to", "", "PostgreSQL DSN postgres://... of the destination")
	dst := &hubBackend{data: new(string), store: fs.String("store", "", "same as --to"), storeFile: fs.String("store-file", "", "file holding the destination DSN"),
		objects: fs.String("objects", "", "destination object store: an absolute directory or s3://BUCKET/PREFIX (required)")}
	format := formatFlag(fs)
	if err := parseFlags(env, fs, rest, false); err != nil {
		return err
	}
	if *from == "" || !filepath.IsAbs(*from) {
		return usagef("--from sqlite DIR needs an absolute Hub data directory")
	}
	if *to != "" {
		if *dst.store != "" {
			return usagef("give --to or --store, not both")
		}
		*dst.store = *to
	}
	r, err := dst.resolve(env)
	if err != nil {
		return err
	}
	dst.warnArgvPassword(env)
	if r.dsn == "" {
		return usagef("the destination needs --to postgres://... (or --store-file or $%s)", envHubStore)
	}
	if r.objects == "" {
		return usagef("the destination needs --objects")
	}
	if err := fsutil.CheckPrivateDir(*from); err != nil {
		return fmt.Errorf("source hub data directory: %w", err)
	}
	srcObj, err := objects.OpenDir(filepath.Join(*from, "objects"))
	if err != nil {
		return err
	}
	pg, err := postgres.Open(ctx, r.dsn)
	if err != nil {
		return err
	}
	defer pg.Close()
	dstObj, err := openObjects(ctx, env, r.objects, "")
	if err != nil {
		return err
	}
	rep, err := postgres.CopyFromSQLite(ctx, *from, pg, srcObj, dstObj)
	if err != nil {
		return fmt.Errorf("hub migrate: %w", err)
	}
	if *format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	for _, t := range rep.Tables {
		fmt.Fprintf(env.Stdout, "%-22s %8d rows  sha256 %s\n", t.Table, t.Rows, t.Digest)
	}
	fmt.Fprintf(env.Stdout, "%-22s %8d (%d bytes)\n", "objects", rep.Objects, rep.ObjectBytes)
	fmt.Fprintf(env.Stdout, "copied %s to %s and verified\n", *from, r.describe())
	return nil
}
