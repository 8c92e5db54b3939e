// Command fsyncref is the reference process for the hook benchmark: it reads
// stdin and writes one file durably (temp file, fsync, rename, directory
// fsync), the least any durable hook must do.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/fsutil"
)

func main() {
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := fsutil.WriteAtomic(filepath.Join(os.Args[1], "record"), b, fsutil.FileMode); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
