// Package hookrun is the agents' hook pipeline as a process (Run,
// pipeline.go): one process per event runs one route of the route table
// (internal/hookroute), decodes the payload once with the route's adapter
// and runs the capture and, beside it, the changelog increment, then one
// deliverer kick. It is the one entry point shared by agentscm and the
// lean agentscm-hook binary, which links only what the hook needs.
package hookrun

import (
	"context"
	"io"
	"time"

	"github.com/agentscm/agentscm/internal/hookcore"
)

// Timeout bounds one hook invocation as a whole; the host's own timeout of
// an installed hook is longer (hookfile.HookTimeoutSeconds).
const Timeout = hookcore.Timeout

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
// detached deliverer started from it. It is the one hook pipeline
// (ClaudeHook) with the capture part only.
func claudeCaptureOut(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, exe string) int {
	return ClaudeHook(ctx, stdin, stdout, stderr, getenv, now, Options{Parts: Parts{Capture: true}, Exe: exe})
}
