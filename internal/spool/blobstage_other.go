//go:build !linux

package spool

import "os"

// renameNoReplace is a plain rename where renameat2 is not available: a
// concurrent stager of the same digest replaces the name with the same
// bytes.
func renameNoReplace(old, new string) error { return os.Rename(old, new) }
