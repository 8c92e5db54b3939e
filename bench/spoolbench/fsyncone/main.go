// Command fsyncone is the reference of the spool benchmark: one process that
// writes one small new file and fsyncs it once (one bare fsync), nothing else.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

func main() {
	name := filepath.Join(os.Args[1], strconv.FormatInt(time.Now().UnixNano(), 10))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(make([]byte, 400))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	f.Close()
}
