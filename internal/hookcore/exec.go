package hookcore

import (
	"fmt"
	"io"
	"os"

	"github.com/agentscm/agentscm/internal/hookroute"
)

// execHook replaces this process with `full ARGS...` reading payload on its
// stdin (payloadFile). It returns only when that failed.
func execHook(full string, args []string, payload []byte) error {
	f, err := payloadFile()
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(payload); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := dupStdin(f); err != nil {
		return err
	}
	return execve(full, append([]string{full}, args...), os.Environ())
}

// ExecRoute replaces this process with `full` running route r, its payload
// still unread on stdin (the intake binary hands the routes it does not
// link to the full hook binary). It returns only when that failed: then
// with the one warning line and exit status 0.
func ExecRoute(full string, r hookroute.Route, stderr io.Writer) int {
	err := execve(full, append([]string{full}, r.Args...), os.Environ())
	fmt.Fprintf(stderr, "agentscm: warning: %s: run it with %s: %s\n", r.Command(), full, OneLine(err.Error()))
	return 0
}
