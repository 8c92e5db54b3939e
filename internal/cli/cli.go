// Package cli holds the agentscm command tree: flag parsing, help and
// dispatch. It holds no business logic; each command calls one function in
// the package that owns the behaviour.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/cliflag"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hookroute"
)

// Env carries a command's input, output and environment so that commands
// never touch process globals and can run in-process in tests.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads an environment variable.
	Getenv func(string) string
	// Now returns the current time.
	Now func() time.Time
	// Executable is the absolute path of the running agentscm binary, used
	// when a command installs hooks that call it back.
	Executable string
	// onFlags, when set, sees every FlagSet a command creates (completion
	// reads the flags of each leaf through it).
	onFlags func(*flag.FlagSet)
	// onParsed, when set, sees every FlagSet once parseFlags has parsed and
	// defaulted it; an error it returns is parseFlags' (tests stop a command
	// there to read its flags).
	onParsed func(*flag.FlagSet) error
}

// OSEnv returns an Env bound to the real process.
func OSEnv() *Env {
	exe, err := os.Executable()
	if err != nil {
		exe = "agentscm"
	}
	return &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Now: time.Now, Executable: exe}
}

// Command is one node of the command tree: either a group with Sub commands
// or a leaf with Run.
type Command struct {
	Name    string
	Summary string
	Sub     []*Command
	Run     func(ctx context.Context, env *Env, args []string) error
}

// UsageError reports bad command-line input; it exits with status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// usagef builds a UsageError.
func usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

// errHelp is returned when help was printed on request; it exits 0.
var errHelp = flag.ErrHelp

// Exit codes of agentscm.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Root returns the agentscm command tree.
func Root() *Command {
	return &Command{
		Name:    "agentscm",
		Summary: "source control for AI agent work",
		Sub:     append(rootCommands(), conventionCommands()...),
	}
}

// Main runs agentscm with args (without the program name) and returns the
// process exit status.
func Main(ctx context.Context, env *Env, args []string) int {
	// The hook runs on every agent tool call: route it before anything else
	// (the one route table, every command string ever installed).
	if r, ok := hookroute.Find(args); ok {
		return runHookRoute(ctx, env, r)
	}
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(env.Stdout, cliflag.Version("agentscm"))
		return ExitOK
	}
	return dispatch(ctx, env, Root(), nil, args)
}

func dispatch(ctx context.Context, env *Env, c *Command, path []string, args []string) int {
	path = append(path, c.Name)
	if c.Run != nil {
		err := c.Run(ctx, env, args)
		return report(env, strings.Join(path, " "), err)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printGroupHelp(env.Stdout, c, path)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	for _, s := range c.Sub {
		if s.Name == args[0] {
			return dispatch(ctx, env, s, path, args[1:])
		}
	}
	fmt.Fprintf(env.Stderr, "%s: unknown command %q\n", strings.Join(path, " "), args[0])
	fmt.Fprintf(env.Stderr, "Run '%s --help' for the list of commands.\n", strings.Join(path, " "))
	return ExitUsage
}

func report(env *Env, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "%s: %s\n", name, ue.Msg)
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", name)
		return ExitUsage
	}
	var ec *ExitCodeError
	if errors.As(err, &ec) {
		if ec.Err != nil {
			fmt.Fprintf(env.Stderr, "%s: %v\n", name, ec.Err)
		}
		return ec.Code
	}
	fmt.Fprintf(env.Stderr, "%s: %v\n", name, err)
	return ExitError
}

// ExitCodeError makes a command exit with a specific status, printing Err
// when it is not nil.
type ExitCodeError struct {
	Code int
	Err  error
}

func (e *ExitCodeError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitCodeError) Unwrap() error { return e.Err }

func printGroupHelp(w io.Writer, c *Command, path []string) {
	fmt.Fprintf(w, "%s — %s\n\nUsage:\n  %s <command> [flags]\n\nCommands:\n", strings.Join(path, " "), c.Summary, strings.Join(path, " "))
	subs := append([]*Command(nil), c.Sub...)
	sort.Slice(subs, func(i, j int) bool { return subs[i].Name < subs[j].Name })
	width := 0
	for _, s := range subs {
		width = max(width, len(s.Name))
	}
	for _, s := range subs {
		fmt.Fprintf(w, "  %-*s  %s\n", width, s.Name, s.Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags. Paths may be relative to the working directory.\n", strings.Join(path, " "))
	if len(path) == 1 {
		fmt.Fprintf(w, "\n%s --version prints the build; %s completion bash|zsh|fish prints a completion script.\n\n%s", path[0], path[0], exitStatusHelp)
	}
}

// exitStatusHelp is the exit status table of agentscm (docs/reference.md
// holds the same table; a script test checks both against the code).
const exitStatusHelp = `Exit status:
  0  success (also --help)
  1  error (the command failed; the message says why)
  2  bad usage: an unknown command or flag, a missing or bad value
  4  changelog apply, rewind, snapshot load: an unreadable or hostile archive
  5  changelog apply, rewind, snapshot load, changelog enable/disable: a live session's agent turn is running (each is named; nothing overrides it)
  6  changelog apply, rewind, snapshot load: paths changed since the newest capture (--discard-uncaptured-edits overrides), or work done outside the agent after the target would change (--discard-outside-edits overrides)
  7  work takeover or another checkpoint: the Work is at another generation than expected
  8  changelog apply, rewind, snapshot load: partial (the listed paths could not be restored, a conversation root or secret files withheld from the Hub among them); revert: conflicts were left alone
  The hooks (hook-claude, hook-codex, hook-gemini, agentscm-hook) always exit 0;
  change-capture run-recipe exits with the recipe's own status when it failed.
`

// newFlags returns a FlagSet for a leaf command whose help names the command
// line and describes it.
func newFlags(env *Env, cmdline, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(cmdline, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	if env.onFlags != nil {
		env.onFlags(fs)
	}
	fs.Usage = func() {
		w := env.Stdout
		fmt.Fprintf(w, "Usage:\n  %s %s\n\n%s\n", cmdline, synopsis, strings.TrimSpace(description))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(env.Stderr)
		}
	}
	return fs
}

// parseFlags parses args and refuses positional arguments unless allowPos.
// Flags may come anywhere among the positional arguments, "--" ends them;
// a parse error is one line (report adds the pointer at --help). Every path
// flag is made absolute against the working directory (pathFlag), and an
// unset --root defaults to the checkout enclosing it (enclosingCheckout).
func parseFlags(env *Env, fs *flag.FlagSet, args []string, allowPos bool) error {
	if err := cliflag.Parse(fs, args, true); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return &UsageError{Msg: err.Error()}
	}
	if !allowPos && fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	wd := cliflag.Getwd()
	absPathFlags(fs, wd)
	// A bad capture mode is bad usage, refused before anything changes.
	for _, name := range []string{"mode", "capture-mode"} {
		if f := fs.Lookup(name); f != nil && f.Value.String() != "" && !binding.ValidMode(f.Value.String()) {
			return usagef("--%s %q is not supported; use metadata-only, local-conversation or shared-conversation", name, f.Value.String())
		}
	}
	// Every command that registers --format gets it checked here.
	if f := fs.Lookup("format"); f != nil {
		if _, own := f.Value.(ownFormat); own {
			// checked by its command (export --format agent-trace)
		} else if err := checkFormat(f.Value.String()); err != nil {
			return err
		}
	}
	if err := defaultRootFlag(env, fs, wd); err != nil {
		return err
	}
	if env.onParsed != nil {
		return env.onParsed(fs)
	}
	return nil
}

// pathFlag says whether the flag name takes a local path, and so is made
// absolute before anything stores it. (--claude-settings is relative to
// the root by definition; --objects may be an s3:// URL.)
func pathFlag(name string) bool {
	switch name {
	case "root", "spool", "file", "dir", "data", "store-file", "objects", "output", "out",
		"destination", "archive", "recipe-file", "claude-history-root", "token-file", "from", "extra-root":
		return true
	}
	return false
}

// absPathFlags is the one place relative paths become absolute: every set
// path flag of fs against wd, and NAME=PATH values of --extra-root on their
// PATH.
func absPathFlags(fs *flag.FlagSet, wd string) {
	abs := func(name, v string) string {
		if name == "objects" && strings.Contains(v, "://") {
			return v
		}
		if name == "extra-root" {
			if n, p, ok := strings.Cut(v, "="); ok {
				return n + "=" + cliflag.Abs(p, wd)
			}
			return v
		}
		return cliflag.Abs(v, wd)
	}
	fs.Visit(func(f *flag.Flag) {
		if !pathFlag(f.Name) {
			return
		}
		if m, ok := f.Value.(*multiFlag); ok {
			for i, v := range *m {
				(*m)[i] = abs(f.Name, v)
			}
			return
		}
		if v := f.Value.String(); v != "" {
			_ = f.Value.Set(abs(f.Name, v))
		}
	})
}

// rootHelp is the usage of --root for every command that defaults it.
const rootHelp = "path of the checkout, relative or absolute (default: the checkout enclosing the working directory: the deepest connected or changelog-enabled checkout holding it, else its git worktree top)"

// defaultRootFlag sets an unset --root of every command but those for
// which no --root means "every checkout" (rootMeansAll) to the checkout
// enclosing wd, and refuses, as bad usage, outside any checkout.
func defaultRootFlag(env *Env, fs *flag.FlagSet, wd string) error {
	f := fs.Lookup("root")
	if f == nil || f.Value.String() != "" || rootMeansAll(fs.Name()) {
		return nil
	}
	if a := fs.Lookup("all"); a != nil && a.Value.String() == "true" {
		return nil // --all (doctor): every checkout, not the enclosing one
	}
	root, err := enclosingCheckout(env, wd)
	if err != nil {
		return usagef("--root not given and %v", err)
	}
	return f.Value.Set(root)
}

// enclosingCheckout is the checkout holding the working directory wd: the
// deepest checkout with a client connection or a changelog that holds it
// (a checkout may be a subdirectory of its repository), else the top of
// its git worktree (cliflag.DefaultRoot).
func enclosingCheckout(env *Env, wd string) (string, error) {
	var bound []string
	if canon, err := canonicalRoot(wd); wd != "" && err == nil {
		if cfg, err := configDir(env); err == nil {
			if c, err := connections.LookupContaining(cfg, canon); err == nil {
				bound = append(bound, c.Root)
			}
			if _, root, ok := changelog.FindDir(cfg, canon); ok {
				bound = append(bound, root)
			}
		}
	}
	return cliflag.DefaultRoot(wd, bound...)
}

// rootMeansAll says whether the command's unset --root means every
// checkout rather than the enclosing one.
func rootMeansAll(cmdline string) bool {
	switch cmdline {
	case "agentscm client status", "agentscm change-capture status":
		return true
	}
	return false
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// formatFlag registers the common --format flag.
func formatFlag(fs *flag.FlagSet) *string {
	return fs.String("format", "text", "output format: text or json")
}

func checkFormat(f string) error {
	if f != "text" && f != "json" {
		return usagef("--format must be text or json, not %q", f)
	}
	return nil
}
