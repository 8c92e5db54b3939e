//go:build !linux

package main

// becomeSubreaper: macOS has no child subreaper; descendants that leave the
// wrapped command's process group are re-parented to launchd, not reaped by
// agentdiff (docs/agentdiff.md, trust limits).
func becomeSubreaper() {}
