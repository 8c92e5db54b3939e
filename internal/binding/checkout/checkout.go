// Package checkout is the one lookup of the checkout a hook's working
// directory belongs to, shared by capture (binding.Config.LookupFrom) and
// the changelog (changelog.LookupFrom): the hook pipeline makes one Lookup
// of the payload's cwd and asks both parts' questions of it. It imports
// nothing of agentscm, so the changelog (and the Hub, which imports it)
// link no capture binding code for it.
package checkout

import "path/filepath"

// Lookup is one lookup of the checkout of a hook's cwd: the paths each
// part's question is asked about, cwd and then, when the question finds
// nothing there, cwd with its symbolic links resolved (a checkout reached
// through a link), resolved at most once for all parts. It is not safe for
// concurrent use: ask every question before the parts run.
type Lookup struct {
	cwd, real string
	resolved  bool
	realOK    bool
}

// Of starts the lookup of cwd (clean, absolute).
func Of(cwd string) *Lookup { return &Lookup{cwd: cwd} }

// Cwd is the directory looked up.
func (l *Lookup) Cwd() string { return l.cwd }

// resolvedCwd is cwd with its symbolic links resolved (false: it cannot
// be, e.g. it does not exist).
func (l *Lookup) resolvedCwd() (string, bool) {
	if !l.resolved {
		l.resolved = true
		var err error
		l.real, err = filepath.EvalSymlinks(l.cwd)
		l.realOK = err == nil
	}
	return l.real, l.realOK
}

// Find asks find about l's cwd and, when find finds nothing there, about
// cwd with its symbolic links resolved; false when neither finds one. find
// decides what "belongs to" means (the deepest enabled capture binding,
// the deepest changelog directory).
func Find[T any](l *Lookup, find func(path string) (T, bool)) (T, bool) {
	if v, ok := find(l.cwd); ok {
		return v, true
	}
	if real, ok := l.resolvedCwd(); ok {
		return find(real)
	}
	var zero T
	return zero, false
}
