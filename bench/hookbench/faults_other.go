//go:build !linux

package main

import "os"

// pageFaults is not reported outside Linux (0).
func pageFaults(ps *os.ProcessState) int64 { return 0 }
