// Package checkout is the one lookup of the checkout a hook's working
// directory belongs to, shared by capture (binding.Config.Lookup) and the
// changelog. It imports nothing of agentscm, so the changelog (and the Hub,
// which imports it) link no capture binding code for it.
package checkout

import "path/filepath"

// Lookup asks find about cwd and, when find finds nothing there, about cwd
// with its symbolic links resolved (a checkout reached through a link);
// false when neither finds one. find decides what "belongs to" means (the
// deepest enabled capture binding, the deepest changelog directory).
func Lookup[T any](cwd string, find func(path string) (T, bool)) (T, bool) {
	if v, ok := find(cwd); ok {
		return v, true
	}
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		return find(real)
	}
	var zero T
	return zero, false
}
