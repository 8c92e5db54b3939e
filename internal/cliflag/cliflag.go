// Package cliflag holds the command-line conventions shared by agentscm and
// agentdiff on top of the standard library's flag package: flags anywhere
// among positional arguments ("--" ends them), quiet parse errors (the caller
// prints one short line and a pointer at --help), path flags made absolute
// against the working directory, the enclosing worktree as the default root,
// the build's version, and shell completion generated from a command tree.
//
// It stays on the standard library: agentscm-hook does not import it, and a
// framework (cobra: 2.5 ms per process against stdlib flag's 1.3 ms, see
// docs/architecture.md) would cost every agentscm invocation.
package cliflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/buildinfo"
)

// Parse parses args into fs. With intersperse, flags may follow positional
// arguments (git's and cobra's convention): every argument that does not
// start with "-" is a positional one, and "--" ends the flags (everything
// after it is positional, also when it starts with "-"). Without intersperse,
// the first positional argument ends the flags, as the flag package does
// (for commands whose positional arguments are another command's argv).
//
// Parse prints nothing on a parse error: it returns the flag package's error
// for the caller to report in one line. On -h/--help it calls fs.Usage and
// returns flag.ErrHelp. After Parse, fs.Args() holds the positional
// arguments in order.
func Parse(fs *flag.FlagSet, args []string, intersperse bool) error {
	usage := fs.Usage
	out := fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() {
		fs.Usage = usage
		fs.SetOutput(out)
	}()
	if intersperse {
		flags, pos, dangling := split(fs, args)
		args = append(append(flags, "--"), pos...)
		if dangling {
			args = flags // the last flag lacks its value: fs.Parse says so
		}
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(out)
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
	}
	return err
}

// split separates flags (with their values) from positional arguments.
// dangling says the last flag needs a value that is missing.
func split(fs *flag.FlagSet, args []string) (flags, pos []string, dangling bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(pos, args[i+1:]...), false
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil || isBool(f) {
			continue // an unknown flag fails in fs.Parse; a bool takes no value
		}
		if i+1 == len(args) {
			return flags, pos, true
		}
		i++
		flags = append(flags, args[i])
	}
	return flags, pos, false
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Abs makes path absolute against the working directory wd (lexically, like
// filepath.Abs: symbolic links are kept, so refusals about what a path is
// still see the path the user gave). "" stays "".
func Abs(path, wd string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	if wd == "" {
		if a, err := filepath.Abs(path); err == nil {
			return a
		}
		return path
	}
	return filepath.Join(wd, path)
}

// Getwd is the working directory, preferring $PWD when it names the same
// directory (as a shell shows it, symbolic links kept), "" when unknown.
func Getwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	return wd
}

// FindUp returns the nearest directory at or above dir that holds one of
// names (a file or a directory), and whether one was found. It walks the
// path lexically and stops at the filesystem root.
func FindUp(dir string, names ...string) (string, bool) {
	if dir == "" {
		return "", false
	}
	dir = filepath.Clean(dir)
	for {
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				return dir, true
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// GitTop returns the top of the git worktree enclosing dir (the nearest
// directory holding .git, a directory or a linked worktree's file), like
// `git rev-parse --show-toplevel` without starting git and without
// resolving symbolic links.
func GitTop(dir string) (string, bool) { return FindUp(dir, ".git") }

// ErrNoCheckout reports a working directory that no checkout encloses.
var ErrNoCheckout = errors.New("not inside a checkout")

// DefaultRoot is the --root a command takes when none is given: the deepest
// of bound (the roots of checkouts the tool keeps state for that hold wd;
// "" entries are skipped), else the top of the git worktree enclosing wd.
// Outside both it returns an error wrapping ErrNoCheckout that says to pass
// --root. Every command of agentscm and agentdiff that takes --root defaults
// it through here.
func DefaultRoot(wd string, bound ...string) (string, error) {
	best := ""
	for _, b := range bound {
		if len(b) > len(best) {
			best = b
		}
	}
	if best != "" {
		return best, nil
	}
	if top, ok := GitTop(wd); ok {
		return top, nil
	}
	if wd == "" {
		return "", fmt.Errorf("%w: the working directory is unknown; pass --root PATH", ErrNoCheckout)
	}
	return "", fmt.Errorf("%w: no git worktree holds %s; run the command inside a checkout or pass --root PATH", ErrNoCheckout, wd)
}

// Version describes the running binary (buildinfo.Version).
func Version(prog string) string { return buildinfo.Version(prog) }

// FlagNames lists fs's flags as they are typed ("--name").
func FlagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	return names
}
