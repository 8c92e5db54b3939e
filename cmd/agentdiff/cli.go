package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentscm/agentscm/internal/capsule"
	"github.com/agentscm/agentscm/internal/cliflag"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Exit codes (stable; documented in docs/agentdiff.md).
const (
	exitOK         = 0
	exitInternal   = 1 // agentdiff itself failed
	exitUsage      = 2
	exitBadPolicy  = 3
	exitReview     = 10
	exitDenied     = 11
	exitBlocked    = 12
	exitFailed     = 13
	exitTimedOut   = 14
	exitLaunchErr  = 15
	exitUnverified = 20 // verify failed, or rollback refused an unverifiable capsule
	exitPartial    = 21 // rollback left conflicts or unrecoverable paths; cleanup left processes
)

// statusExit maps a run status to its exit code under --fail-on.
func statusExit(status, failOn string) int {
	switch status {
	case capsule.StatusPassed:
		return exitOK
	case capsule.StatusReview:
		if failOn == "review" {
			return exitReview
		}
		return exitOK
	case capsule.StatusDenied:
		if failOn == "never" {
			return exitOK
		}
		return exitDenied
	case capsule.StatusBlocked:
		return exitBlocked
	case capsule.StatusFailed:
		return exitFailed
	case capsule.StatusTimedOut:
		return exitTimedOut
	}
	return exitLaunchErr
}

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string
	wd             string
	// onFlags, when set, sees every FlagSet a command creates (completion
	// reads each command's flags through it).
	onFlags func(*flag.FlagSet)
}

func (e *env) getenv(k string) string {
	v := ""
	for _, kv := range e.environ {
		if x, ok := strings.CutPrefix(kv, k+"="); ok {
			v = x
		}
	}
	return v
}

// configDir is where per-user agentdiff state outside any root lives:
// $AGENTDIFF_CONFIG_DIR, else $XDG_CONFIG_HOME/agentdiff, else
// $HOME/.config/agentdiff; "" when none is set (the stat cache is then off).
func (e *env) configDir() string {
	if d := e.getenv("AGENTDIFF_CONFIG_DIR"); d != "" {
		return d
	}
	if d := e.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "agentdiff")
	}
	if d := e.getenv("HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, ".config", "agentdiff")
	}
	return ""
}

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func usagef(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

type command struct {
	name, synopsis, summary string
	run                     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"run", "run [--root PATH] [--policy FILE] [--task TEXT] [--timeout DUR] [--full-listing] [--format summary|json] [--fail-on never|review|deny] -- ARGV...", "run ARGV (no shell) inside an evidence transaction and write its capsule", cmdRun},
		{"verify", "verify [--root PATH] [--format text|json] RUN_ID", "check a capsule against its sealed SHA-256 manifest", cmdVerify},
		{"inspect", "inspect [--root PATH] [--format text|json] RUN_ID", "show a capsule's verification, result and rollbacks", cmdInspect},
		{"runs", "runs [--root PATH] [--limit N] [--format text|json]", "list capsules, newest first", cmdRuns},
		{"rollback", "rollback [--root PATH] [--path P]... [--safe-only] [--format text|json] RUN_ID", "restore before-state of paths whose current state equals the post-run state", cmdRollback},
		{"policy", "policy init|validate|explain PATH", "write, check or explain a version-1 policy file", cmdPolicy},
		{"doctor", "doctor [--root PATH] [--format text|json]", "report what agentdiff can and cannot do here", cmdDoctor},
		{"cleanup", "cleanup [--root PATH] [--grace DUR] [--format text|json] RUN_ID", "signal the processes a run recorded as surviving its cleanup, if still the same processes", cmdCleanup},
	}
}

func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(e.stdout, cliflag.Version("agentdiff"))
		return exitOK
	}
	if len(args) >= 1 && args[0] == "completion" {
		return runCompletion(e, args[1:])
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(e.stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		if err == nil {
			return exitOK
		}
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil && ee.err.Error() != "" {
				fmt.Fprintf(e.stderr, "agentdiff %s: %v\n", c.name, ee.err)
			}
			if ee.code == exitUsage {
				fmt.Fprintf(e.stderr, "Run 'agentdiff %s --help' for usage.\n", c.name)
			}
			return ee.code
		}
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(e.stderr, "agentdiff %s: %v\n", c.name, err)
		if errors.Is(err, capsule.ErrStateSymlink) {
			// A symlinked or replaced .agentdiff, runs/ or capsule
			// directory: the capsule cannot be trusted or written.
			return exitUnverified
		}
		return exitInternal
	}
	fmt.Fprintf(e.stderr, "agentdiff: unknown command %q\n", args[0])
	fmt.Fprintln(e.stderr, "Run 'agentdiff --help' for the list of commands.")
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: agentdiff COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintf(tw, "  %s\t%s\n", "completion", "print a shell completion script (bash, zsh or fish)")
	tw.Flush()
	fmt.Fprintln(w, "\nFlags may come anywhere among a command's arguments; \"--\" ends them (for run,")
	fmt.Fprintln(w, "the first argument that is not a flag starts the command's argv). --version prints the build.")
	fmt.Fprintln(w, "--root defaults to the nearest directory above the working directory that holds")
	fmt.Fprintln(w, ".agentdiff, else the enclosing git worktree's top, else the working directory.")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 agentdiff failed, 2 bad usage, 3 bad policy, 10-15 the run's status")
	fmt.Fprintln(w, "under --fail-on, 20 unverified, 21 partial rollback (docs/agentdiff.md).")
	fmt.Fprintln(w, "\nagentdiff is not a sandbox and enforces nothing on the network; see `agentdiff doctor`.")
}

func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("agentdiff "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	if e.onFlags != nil {
		e.onFlags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: agentdiff %s\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args: flags anywhere among the positional arguments ("--"
// ends them), except for run, whose first positional argument starts the
// wrapped command's argv. A parse error is one line; --root is made
// absolute against the working directory, and an unset --root becomes the
// project enclosing it (projectRoot).
func parse(fs *flag.FlagSet, args []string) error {
	if err := cliflag.Parse(fs, args, fs.Name() != "agentdiff run"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{code: exitUsage, err: err}
	}
	if f := fs.Lookup("root"); f != nil {
		if v, ok := f.Value.(*pathValue); ok && v.p == "" {
			// run starts a project where it runs; doctor checks the
			// machine: both may work in a plain directory.
			p, err := projectRoot(v.wd, fs.Name() == "agentdiff run" || fs.Name() == "agentdiff doctor")
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			v.p = p
		}
	}
	return nil
}

// projectRoot is where agentdiff keeps capsules for the working directory
// wd (cliflag.DefaultRoot): the nearest directory at or above wd holding
// .agentdiff, else the top of the enclosing git worktree; else wd itself
// when orHere, else an error saying to pass --root.
func projectRoot(wd string, orHere bool) (string, error) {
	var bound []string
	if d, ok := cliflag.FindUp(wd, ".agentdiff"); ok {
		bound = append(bound, d)
	}
	root, err := cliflag.DefaultRoot(wd, bound...)
	if err != nil && orHere && wd != "" {
		return wd, nil
	}
	if err != nil {
		return "", fmt.Errorf("--root not given, no .agentdiff at or above the working directory, and %w", err)
	}
	return root, nil
}

func rootFlag(fs *flag.FlagSet, e *env) *string {
	v := &pathValue{wd: e.wd}
	fs.Var(v, "root", "project root, relative to the working directory or absolute (default: the nearest directory holding .agentdiff, else the git worktree's top; run and doctor: else the working directory)")
	return &v.p
}

// pathValue is a path flag made absolute against wd when it is set.
type pathValue struct{ wd, p string }

func (v *pathValue) String() string { return v.p }
func (v *pathValue) Set(s string) error {
	v.p = cliflag.Abs(s, v.wd)
	return nil
}

func formatFlag(fs *flag.FlagSet, def string) *string {
	return fs.String("format", def, "output format")
}

func checkFormat(f string, allowed ...string) error {
	for _, a := range allowed {
		if f == a {
			return nil
		}
	}
	return usagef("--format must be one of %s, not %q", strings.Join(allowed, ", "), f)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func oneRunID(fs *flag.FlagSet) (string, error) {
	if fs.NArg() != 1 {
		return "", usagef("expected exactly one RUN_ID")
	}
	id := fs.Arg(0)
	if !capsule.ValidRunID(id) {
		return "", usagef("%v: %q", capsule.ErrBadRunID, id)
	}
	return id, nil
}

// loadPolicy reads a policy file (bounded, no-follow; YAML when its name
// ends in .yaml or .yml, else JSON) or returns the built-in default. The
// bytes returned are what policy.json records: the file's own for JSON, the
// canonical JSON for YAML.
func loadPolicy(path string) (*capsule.Policy, []byte, string, error) {
	if path == "" {
		p := capsule.DefaultPolicy()
		return p, p.Marshal(), "built-in default", nil
	}
	b, err := fsutil.ReadFileNoFollow(path, capsule.MaxPolicyBytes)
	if err != nil {
		return nil, nil, "", &exitError{code: exitBadPolicy, err: fmt.Errorf("read policy: %w", err)}
	}
	parse := capsule.ParsePolicy
	if capsule.IsYAMLPolicy(path) {
		parse = capsule.ParsePolicyYAML
	}
	p, err := parse(b)
	if err != nil {
		return nil, nil, "", &exitError{code: exitBadPolicy, err: fmt.Errorf("%s: %w", path, err)}
	}
	if capsule.IsYAMLPolicy(path) {
		b = p.Marshal()
	}
	abs, _ := filepath.Abs(path)
	return p, b, abs, nil
}

// projectPolicy is the policy file run reads without --policy: the root's
// agentdiff.yaml when there is one (even a broken one, which is refused,
// never silently replaced by the default), else "" for the built-in.
func projectPolicy(root string) string {
	p := filepath.Join(root, capsule.DefaultPolicyFile)
	if _, err := os.Lstat(p); err == nil {
		return p
	}
	return ""
}

func cmdRun(ctx context.Context, e *env, args []string) error {
	syn := commands()[0].synopsis
	fs := newFlags(e, "run", syn)
	root := rootFlag(fs, e)
	policy := fs.String("policy", "", "version-1 policy file, JSON or YAML (.yaml/.yml) (default: agentdiff.yaml at the root when present, else the built-in default policy)")
	task := fs.String("task", "", "what the command is for (stored redacted)")
	timeout := fs.Duration("timeout", 0, "kill the command's process group after this long (0: no timeout)")
	fullListing := fs.Bool("full-listing", false, "list the whole tree for the after manifest instead of only the directories the inotify watch saw change")
	format := formatFlag(fs, "summary")
	failOn := fs.String("fail-on", "deny", "non-zero exit for: never, review (review or deny), deny")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "summary", "json"); err != nil {
		return err
	}
	if *failOn != "never" && *failOn != "review" && *failOn != "deny" {
		return usagef("--fail-on must be never, review or deny, not %q", *failOn)
	}
	if *timeout < 0 {
		return usagef("--timeout must not be negative")
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usagef("no command: put it after --")
	}
	if *policy == "" {
		*policy = projectPolicy(*root)
	}
	pol, polBytes, src, err := loadPolicy(*policy)
	if err != nil {
		return err
	}
	childOut := e.stdout
	if *format == "json" {
		childOut = e.stderr // keep stdout for the JSON result
	}
	res, dir, err := capsule.Run(ctx, capsule.RunOptions{
		Root: *root, Policy: pol, PolicyBytes: polBytes, PolicySource: src, Task: *task, Argv: argv,
		Timeout: *timeout, FullListing: *fullListing, Env: e.environ, Stdin: e.stdin, Stdout: childOut, Stderr: e.stderr,
		KeyDir: e.configDir(),
	})
	if err != nil {
		if dir != "" {
			return fmt.Errorf("%w (unsealed capsule left at %s)", err, dir)
		}
		return err
	}
	if *format == "json" {
		if err := writeJSON(e.stdout, res); err != nil {
			return err
		}
	} else {
		printResult(e.stdout, res, dir)
	}
	if code := statusExit(res.Status, *failOn); code != exitOK {
		return &exitError{code: code, err: errors.New("")}
	}
	return nil
}

func printResult(w io.Writer, r *capsule.Result, dir string) {
	exit := "-"
	if r.Runtime.Exit != nil {
		if r.Runtime.Exit.Signal != "" {
			exit = r.Runtime.Exit.Signal
		} else {
			exit = fmt.Sprint(r.Runtime.Exit.ExitCode)
		}
	}
	fmt.Fprintf(w, "agentdiff: run %s status=%s outcome=%s exit=%s changes=%d blast_radius=%d (%s)\n",
		r.RunID, r.Status, r.SafetyOutcome, exit, len(r.Changes), r.BlastRadius.Score, r.BlastRadius.Level)
	fmt.Fprintf(w, "  command: %s (%s", r.CommandDecision.Decision, r.CommandDecision.Provenance.Source)
	if r.CommandDecision.Provenance.Source == "rule" {
		fmt.Fprintf(w, " %d %q", r.CommandDecision.Provenance.Index, r.CommandDecision.Provenance.Match)
	}
	fmt.Fprintln(w, ")")
	if r.ExecutionError != nil {
		fmt.Fprintf(w, "  execution error: %s\n", *r.ExecutionError)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range r.Changes {
		prov := "default"
		if c.Provenance.Source == "rule" {
			prov = fmt.Sprintf("rule %d %q", c.Provenance.Index, c.Provenance.Pattern)
		}
		rec := c.Recovery.Method
		if !c.Recovery.Available {
			rec = "none: " + c.Recovery.Reason
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t[%s]\trecovery: %s\n", c.Change, c.Type, c.Decision, capsule.QuoteName(c.Path), prov, rec)
	}
	tw.Flush()
	for _, v := range r.LimitViolations {
		fmt.Fprintf(w, "  limit exceeded: %s %d > %d\n", v.Limit, v.Value, v.Max)
	}
	for _, x := range r.ObservationWarnings {
		fmt.Fprintf(w, "  warning: %s: %s\n", x.Code, x.Message)
	}
	for _, x := range r.MachineObservations {
		fmt.Fprintf(w, "  machine: %s: %s\n", x.Code, x.Message)
	}
	fmt.Fprintf(w, "  capsule: %s\n", dir)
}

func cmdVerify(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "verify", commands()[1].synopsis)
	root := rootFlag(fs, e)
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	id, err := oneRunID(fs)
	if err != nil {
		return err
	}
	dir, err := capsule.CapsuleDir(*root, id)
	if err != nil {
		return err
	}
	rep, err := capsule.Verify(ctx, dir, id)
	if err != nil {
		return err
	}
	if *format == "json" {
		writeJSON(e.stdout, rep)
	} else {
		printVerify(e.stdout, rep)
	}
	if !rep.OK {
		return &exitError{code: exitUnverified, err: errors.New("")}
	}
	return nil
}

func printVerify(w io.Writer, r *capsule.VerifyReport) {
	state := "ok"
	if !r.OK {
		state = "FAILED"
	}
	fmt.Fprintf(w, "verify %s: %s (sealed=%v, post-seal extensions=%d)\n", r.RunID, state, r.Sealed, r.Rollbacks)
	for _, x := range r.Missing {
		fmt.Fprintf(w, "  missing: %s\n", x)
	}
	for _, x := range r.Unexpected {
		fmt.Fprintf(w, "  unexpected: %q\n", x)
	}
	for _, x := range r.Mismatched {
		fmt.Fprintf(w, "  mismatched: %s\n", x)
	}
	for _, x := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", x)
	}
	for _, x := range r.ClearedTemporaries {
		fmt.Fprintf(w, "  cleared: .agentdiff/%s (left by an interrupted rollback)\n", x)
	}
}

func cmdInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", commands()[2].synopsis)
	root := rootFlag(fs, e)
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	id, err := oneRunID(fs)
	if err != nil {
		return err
	}
	in, err := capsule.Inspect(ctx, *root, id)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(e.stdout, in)
	}
	printVerify(e.stdout, in.Verify)
	if m := in.Metadata; m != nil {
		fmt.Fprintf(e.stdout, "task: %s\ncommand: %q\ncreated: %s\npolicy: %s\n", m.Task, m.Command, m.CreatedAt.Format(time.RFC3339), m.PolicySource)
	}
	if in.Result != nil {
		dir, _ := capsule.CapsuleDir(*root, id)
		printResult(e.stdout, in.Result, dir)
	}
	if in.Rollback != nil {
		for i, a := range in.Rollback.Attempts {
			fmt.Fprintf(e.stdout, "rollback %d at %s: %s\n", i+1, a.FinishedAt.Format(time.RFC3339), a.Status)
			for _, it := range a.Items {
				fmt.Fprintf(e.stdout, "  %s %s: %s %s\n", it.Outcome, capsule.QuoteName(it.Path), it.Action, it.Reason)
			}
		}
	}
	for _, p := range in.Problems {
		fmt.Fprintf(e.stdout, "problem: %s\n", p)
	}
	if !in.Verify.OK {
		return &exitError{code: exitUnverified, err: errors.New("")}
	}
	return nil
}

func cmdRuns(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "runs", commands()[3].synopsis)
	root := rootFlag(fs, e)
	limit := fs.Int("limit", 20, "show at most N runs (0: all)")
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	if fs.NArg() != 0 || *limit < 0 {
		return usagef("runs takes no arguments and a non-negative --limit")
	}
	rs, err := capsule.ListRuns(*root, *limit)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(e.stdout, rs)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN ID\tSTATUS\tCHANGES\tSCORE\tTASK\tCOMMAND")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.RunID, r.Status, r.Changes, r.Score, r.Task, strings.Join(r.Command, " "))
	}
	return tw.Flush()
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func cmdRollback(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "rollback", commands()[4].synopsis)
	root := rootFlag(fs, e)
	var paths multiFlag
	fs.Var(&paths, "path", "roll back only this root-relative path (or the changes below this directory); repeatable")
	safeOnly := fs.Bool("safe-only", false, "roll back only the changes the run's policy decided review or deny; allowed work stays")
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	id, err := oneRunID(fs)
	if err != nil {
		return err
	}
	att, rep, err := capsule.Rollback(ctx, *root, id, capsule.RollbackOptions{Paths: paths, SafeOnly: *safeOnly})
	if err != nil {
		if errors.Is(err, capsule.ErrUnverified) {
			if rep != nil {
				printVerify(e.stderr, rep)
			}
			return &exitError{code: exitUnverified, err: err}
		}
		if errors.Is(err, capsule.ErrNoSuchChange) {
			return usagef("%v", err)
		}
		return err
	}
	if *format == "json" {
		writeJSON(e.stdout, att)
	} else {
		fmt.Fprintf(e.stdout, "rollback %s: %s\n", id, att.Status)
		for _, x := range att.ClearedTemporaries {
			fmt.Fprintf(e.stdout, "  cleared: .agentdiff/%s (left by an interrupted rollback)\n", x)
		}
		tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		for _, it := range att.Items {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", it.Outcome, it.Change, capsule.QuoteName(it.Path), it.Action, it.Reason)
		}
		tw.Flush()
	}
	if att.Status != capsule.RollbackComplete {
		return &exitError{code: exitPartial, err: errors.New("")}
	}
	return nil
}

func cmdPolicy(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("policy needs init, validate or explain")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "init":
		fs := newFlags(e, "policy init", "policy init PATH")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usagef("policy init needs exactly one PATH")
		}
		if err := fsutil.WriteNew(fs.Arg(0), capsule.DefaultPolicy().Marshal(), 0o644); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s already exists; not replaced", fs.Arg(0))
			}
			return err
		}
		fmt.Fprintf(e.stdout, "wrote the built-in default policy (version %d) to %s\n", capsule.PolicyVersion, fs.Arg(0))
		return nil
	case "validate":
		fs := newFlags(e, "policy validate", "policy validate PATH")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usagef("policy validate needs exactly one PATH")
		}
		p, _, _, err := loadPolicy(fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: valid version-%d policy (%d path rules, %d command rules)\n", fs.Arg(0), p.Version, len(p.Paths.Rules), len(p.Commands.Rules))
		return nil
	case "explain":
		fs := newFlags(e, "policy explain", "policy explain [--path P]... [--command EXE]... PATH")
		var paths, cmds multiFlag
		fs.Var(&paths, "path", "explain the decision for this root-relative path; repeatable")
		fs.Var(&cmds, "command", "explain the launch decision for this executable; repeatable")
		format := formatFlag(fs, "text")
		if err := parse(fs, rest); err != nil {
			return err
		}
		if err := checkFormat(*format, "text", "json"); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usagef("policy explain needs exactly one PATH (use \"default\" for the built-in policy)")
		}
		src := fs.Arg(0)
		if src == "default" {
			src = ""
		}
		p, _, _, err := loadPolicy(src)
		if err != nil {
			return err
		}
		return explain(e.stdout, p, paths, cmds, *format)
	}
	return usagef("unknown policy subcommand %q (want init, validate or explain)", sub)
}

func explain(w io.Writer, p *capsule.Policy, paths, cmds []string, format string) error {
	type pathEx struct {
		Path string `json:"path"`
		capsule.PathDecision
	}
	var pe []pathEx
	for _, x := range paths {
		pe = append(pe, pathEx{x, p.DecidePath(x)})
	}
	var ce []capsule.CommandDecision
	for _, c := range cmds {
		ce = append(ce, p.DecideCommand(c, ""))
	}
	if format == "json" {
		return writeJSON(w, map[string]any{"policy": p, "paths": pe, "commands": ce})
	}
	fmt.Fprintf(w, "policy version %d: %s\n", p.Version, p.Description)
	fmt.Fprintf(w, "path decisions: every matching rule counts, the strongest wins (deny > review > allow); no match: %s\n", p.Paths.Default)
	for i, r := range p.Paths.Rules {
		fmt.Fprintf(w, "  rule %d: %-6s %s  %s\n", i, r.Decision, r.Pattern, r.Reason)
	}
	fmt.Fprintf(w, "command decisions on the executable (deny blocks launch); no match: %s\n", p.Commands.Default)
	for i, r := range p.Commands.Rules {
		fmt.Fprintf(w, "  rule %d: %-6s %s  %s\n", i, r.Decision, r.Executable, r.Reason)
	}
	l := p.Limits
	fmt.Fprintf(w, "limits (0 = none; exceeding one is a deny outcome): files changed %d, files deleted %d, bytes written %d, duration %s\n",
		l.MaxFilesChanged, l.MaxFilesDeleted, l.MaxBytesWritten, time.Duration(l.MaxDuration))
	b := p.Backups
	fmt.Fprintf(w, "backups: at most %d bytes per file, %d bytes and %d files per run\n", b.MaxFileBytes, b.MaxTotalBytes, b.MaxFiles)
	for _, x := range pe {
		prov := "default"
		if x.Provenance.Source == "rule" {
			prov = fmt.Sprintf("rule %d %q", x.Provenance.Index, x.Provenance.Pattern)
		}
		fmt.Fprintf(w, "path %s: %s (%s; matching rules %v)\n", x.Path, x.Decision, prov, x.Matched)
	}
	for _, c := range ce {
		prov := "default"
		if c.Provenance.Source == "rule" {
			prov = fmt.Sprintf("rule %d %q", c.Provenance.Index, c.Provenance.Match)
		}
		fmt.Fprintf(w, "command %s: %s (%s)\n", c.Executable, c.Decision, prov)
	}
	return nil
}

func cmdDoctor(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "doctor", commands()[6].synopsis)
	root := rootFlag(fs, e)
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	caps := capsule.Doctor(*root)
	if *format == "json" {
		return writeJSON(e.stdout, caps)
	}
	for _, c := range caps {
		mark := "yes"
		if !c.OK {
			mark = "NO "
		}
		fmt.Fprintf(e.stdout, "%s  %-22s %s\n", mark, c.Name, c.Detail)
	}
	return nil
}

// runCompletion prints the completion script for a shell, generated from
// commands() and each command's flags (read by running it with --help).
func runCompletion(e *env, args []string) int {
	if len(args) != 1 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "usage: agentdiff completion %s\n", strings.Join(cliflag.Shells(), "|"))
		if len(args) == 1 {
			return exitOK
		}
		return exitUsage
	}
	root := &cliflag.Node{Name: "agentdiff", Flags: []string{"--help", "--version"}}
	flagsOf := func(c command, args ...string) []string {
		var sets []*flag.FlagSet
		sub := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, wd: e.wd,
			onFlags: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
		_ = c.run(context.Background(), sub, append(args, "--help"))
		out := []string{"--help"}
		for _, fs := range sets {
			out = append(out, cliflag.FlagNames(fs)...)
		}
		return out
	}
	for _, c := range commands() {
		n := &cliflag.Node{Name: c.name}
		if c.name == "policy" {
			for _, s := range []string{"init", "validate", "explain"} {
				n.Sub = append(n.Sub, &cliflag.Node{Name: s, Flags: flagsOf(c, s)})
			}
		} else {
			n.Flags = flagsOf(c)
		}
		root.Sub = append(root.Sub, n)
	}
	root.Sub = append(root.Sub, &cliflag.Node{Name: "completion", Flags: cliflag.Shells()})
	script, err := cliflag.Completion(args[0], root)
	if err != nil {
		fmt.Fprintf(e.stderr, "agentdiff completion: %v\n", err)
		return exitUsage
	}
	io.WriteString(e.stdout, script)
	return exitOK
}

func cmdCleanup(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "cleanup", commands()[7].synopsis)
	root := rootFlag(fs, e)
	grace := fs.Duration("grace", 2*time.Second, "how long each process has to exit after SIGTERM before SIGKILL")
	format := formatFlag(fs, "text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format, "text", "json"); err != nil {
		return err
	}
	if *grace < 0 {
		return usagef("--grace must not be negative")
	}
	id, err := oneRunID(fs)
	if err != nil {
		return err
	}
	rep, err := capsule.Cleanup(ctx, *root, id, *grace)
	if err != nil {
		if errors.Is(err, capsule.ErrUnverified) {
			return &exitError{code: exitUnverified, err: err}
		}
		return err
	}
	if *format == "json" {
		writeJSON(e.stdout, rep)
	} else {
		if len(rep.Processes) == 0 {
			fmt.Fprintf(e.stdout, "cleanup %s: the run recorded no process that survived its cleanup; nothing to do\n", id)
		} else {
			fmt.Fprintf(e.stdout, "cleanup %s:\n", id)
			for _, p := range rep.Processes {
				fmt.Fprintf(e.stdout, "  pid %d (%s): %s\n", p.PID, p.Comm, p.Outcome)
			}
		}
	}
	if !rep.Complete {
		return &exitError{code: exitPartial, err: errors.New("")}
	}
	return nil
}
