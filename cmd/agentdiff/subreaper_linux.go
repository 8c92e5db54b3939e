package main

import "golang.org/x/sys/unix"

// becomeSubreaper: orphaned descendants of a wrapped command are re-parented
// to us, so process-group cleanup can reap them instead of leaving zombies
// to init.
func becomeSubreaper() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }
