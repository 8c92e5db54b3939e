// Package hookrun is the Claude Code capture hook as a process: the one
// entry point shared by `agentscm change-capture hook-claude` and the lean
// agentscm-hook binary, which links only what the hook needs.
package hookrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
)

// Timeout bounds one hook invocation as a whole; the host's own timeout of
// an installed hook is longer (claude.HookTimeoutSeconds).
const Timeout = 15 * time.Second

// ClaudeCapture runs the capture hook on one Claude Code payload read from
// stdin. It fails open: whatever happens it writes at most one warning line
// to stderr, nothing to stdout, and returns exit status 0.
func ClaudeCapture(ctx context.Context, stdin io.Reader, stderr io.Writer, getenv func(string) string, now time.Time) int {
	return ClaudeCaptureOut(ctx, stdin, io.Discard, stderr, getenv, now)
}

// ClaudeCaptureOut is ClaudeCapture with the hook's stdout: only a
// SessionStart of a checkout with registered recipes prints anything there,
// the bounded recipe guidance as Claude Code's additional context
// (capture.SessionStartOutput); every other hook prints nothing.
func ClaudeCaptureOut(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time) int {
	return claudeCaptureOut(ctx, stdin, stdout, stderr, getenv, now, "")
}

// claudeCaptureOut is ClaudeCaptureOut; a non-empty exe hands delivery to a
// detached deliverer started from it (ClaudeCaptureDetached).
func claudeCaptureOut(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, exe string) int {
	var seen bytes.Buffer
	stdin = io.TeeReader(stdin, &seen)
	defer func() {
		defer func() {
			if r := recover(); r != nil {
				fmt.Fprintf(stderr, "agentscm: warning: recipe guidance failed: internal error: %v\n", r)
			}
		}()
		if dir, err := capture.ConfigDir(getenv); err == nil {
			if out, gerr := capture.SessionStartOutput(capture.Store{Dir: dir}, seen.Bytes()); gerr != nil {
				fmt.Fprintf(stderr, "agentscm: warning: recipe guidance: %s\n", OneLine(gerr.Error()))
			} else if len(out) > 0 {
				stdout.Write(out)
			}
		}
	}()
	return claudeCapture(ctx, stdin, stderr, getenv, now, exe)
}

// claudeCapture is the capture itself; a non-empty exe hands delivery to a
// detached deliverer started from it.
func claudeCapture(ctx context.Context, stdin io.Reader, stderr io.Writer, getenv func(string) string, now time.Time, exe string) int {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "agentscm: warning: capture hook failed: internal error: %v\n", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	dir, err := capture.ConfigDir(getenv)
	var res *capture.HookResult
	if err == nil {
		store := capture.Store{Dir: dir}
		var hubs capture.HubOpener = delivery.Opener{ConfigDir: store.Dir}
		if exe != "" {
			hubs = detachedOpener{Opener: delivery.Opener{ConfigDir: store.Dir}, exe: exe}
		}
		res, err = capture.HandleClaudeHook(ctx, store, hubs, stdin, now)
	}
	// A capacity warning (given once per session) rides on the one line.
	also := ""
	if res != nil && res.Warning != "" {
		also = "; " + OneLine(res.Warning)
	}
	switch {
	case errors.Is(err, capture.ErrOccurrenceConflict):
		fmt.Fprintf(stderr, "agentscm: warning: %s%s\n", OneLine(err.Error()), also)
	case err != nil:
		fmt.Fprintf(stderr, "agentscm: warning: capture hook failed: %s%s\n", OneLine(err.Error()), also)
	case res.DeliveryErr != nil:
		fmt.Fprintf(stderr, "agentscm: warning: event retained locally, delivery pending: %s%s\n", OneLine(res.DeliveryErr.Error()), also)
	case also != "":
		fmt.Fprintf(stderr, "agentscm: warning: %s\n", also[2:])
	}
	return 0
}

// OneLine flattens s to one line of at most 1,000 bytes (plus an ellipsis)
// for a warning.
func OneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 1000 {
		s = s[:1000] + "…"
	}
	return s
}
