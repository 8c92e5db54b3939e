// Package hookcore is the part of the Claude Code capture hook that needs
// neither the Hub nor the changelog: the capture run and its one warning
// line, the recipe guidance, the detached deliverer's start, and the intake
// hook (IntakeHook) of the agentscm-hook-intake binary, which links only
// this, so that the process Claude Code starts on every capture-only event
// starts faster. Package hookrun builds the whole pipeline on it.
package hookcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Timeout bounds one hook invocation as a whole; the host's own timeout of
// an installed hook is longer (hookfile.HookTimeoutSeconds).
const Timeout = 15 * time.Second

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

// Warnings are what a hook process has to say: its one fail-open line.
type Warnings struct{ list []string }

// Add keeps a warning (without the "agentscm: warning: " prefix); "" is
// nothing to say.
func (w *Warnings) Add(s string) {
	if s != "" {
		w.list = append(w.list, s)
	}
}

// Flush, deferred first by a hook process, turns a panic into one more
// warning and prints every warning as one line on stderr.
func (w *Warnings) Flush(stderr io.Writer) {
	if r := recover(); r != nil {
		w.Add(fmt.Sprintf("hook failed: internal error: %v", r))
	}
	if len(w.list) > 0 {
		fmt.Fprintf(stderr, "agentscm: warning: %s\n", strings.Join(w.list, "; "))
	}
}

// ReadPayload reads one hook payload of agent a's host from stdin (at most
// agent.MaxPayloadBytes), finds the agentscm config directory and decodes
// the payload with a's per-hook state (adapter.WithState: hook is
// "capture" or "changelog"): what every hook process does first, once.
func ReadPayload(stdin io.Reader, getenv func(string) string, a adapter.Adapter, hook string) (b []byte, configDir string, p *agent.Payload, err error) {
	if b, err = fsutil.ReadBounded(stdin, agent.MaxPayloadBytes); err != nil {
		return nil, "", nil, fmt.Errorf("read hook payload: %w", err)
	}
	if configDir, err = binding.ConfigDir(getenv); err != nil {
		return nil, "", nil, err
	}
	a = a.WithState(configDir, hook)
	if g, ok := a.(adapter.Gemini); ok && hook == "capture" {
		// The capture's order counters are kept without an fsync and
		// rebuilt from its durable record after a crash.
		g.RecoverOrder = capture.StateDir{Dir: configDir}.RecordedOrder
		a = g
	}
	if p, err = a.Decode(b); err != nil {
		return nil, "", nil, err
	}
	failpoint(getenv, "hook.decoded")
	return b, configDir, p, nil
}

// failpoint kills the hook process (SIGKILL) where spool.FailpointEnv
// names point among its comma-separated points (crash tests).
func failpoint(getenv func(string) string, point string) {
	if v := getenv(spool.FailpointEnv); v != "" && slices.Contains(strings.Split(v, ","), point) {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// RunCapture is the capture part of a hook process of agent a's host, its
// panic turned into its error.
func RunCapture(ctx context.Context, store capture.StateDir, deps capture.HookDeps, a adapter.Adapter, b []byte, p *agent.Payload, now time.Time) (res *capture.HookResult, err error) {
	return guardCapture(ctx, func(ctx context.Context) (*capture.HookResult, error) {
		return capture.RunHook(ctx, store, deps, a, b, p, now)
	})
}

// RunCaptureAt is RunCapture for the binding bd the hook pipeline looked up
// (capture.RunHookAt).
func RunCaptureAt(ctx context.Context, store capture.StateDir, deps capture.HookDeps, a adapter.Adapter, b []byte, p *agent.Payload, now time.Time, bd *binding.Binding) (res *capture.HookResult, err error) {
	return guardCapture(ctx, func(ctx context.Context) (*capture.HookResult, error) {
		return capture.RunHookAt(ctx, store, deps, a, b, p, now, bd)
	})
}

// guardCapture runs a capture within Timeout, its panic turned into its
// error.
func guardCapture(ctx context.Context, run func(context.Context) (*capture.HookResult, error)) (res *capture.HookResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("internal error: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return run(ctx)
}

// Guidance writes a SessionStart's recipe guidance to stdout and returns
// its warning, if any.
func Guidance(store capture.StateDir, b []byte, stdout io.Writer) (warn string) {
	defer func() {
		if r := recover(); r != nil {
			warn = fmt.Sprintf("recipe guidance failed: internal error: %v", r)
		}
	}()
	out, err := capture.SessionStartOutput(store, b)
	if err != nil {
		return "recipe guidance: " + OneLine(err.Error())
	}
	if len(out) > 0 {
		stdout.Write(out)
	}
	return ""
}

// CaptureWarning is the capture part's message (without the
// "agentscm: warning: " prefix), "" when it has nothing to say.
func CaptureWarning(res *capture.HookResult, err error) string {
	// A capacity warning (given once per session) rides on the one line.
	also := ""
	if res != nil && res.Warning != "" {
		also = "; " + OneLine(res.Warning)
	}
	switch {
	case errors.Is(err, capture.ErrOccurrenceConflict):
		return OneLine(err.Error()) + also
	case err != nil:
		return "capture hook failed: " + OneLine(err.Error()) + also
	case res == nil:
		return ""
	case res.DeliveryErr != nil:
		return "event retained locally, delivery pending: " + OneLine(res.DeliveryErr.Error()) + also
	case also != "":
		return also[2:]
	}
	return ""
}

// StartDeliverer starts `EXE change-capture deliver-spool --config-dir
// DIR --spool SPOOL --lock-fd 3` in a new session with its standard streams
// on /dev/null (so the agent, which waits for the hook's streams to close,
// never waits for it), inheriting the held deliver lock as fd 3. It is not
// waited for: the hook exits and init reaps the deliverer.
func StartDeliverer(exe, configDir string, lock *os.File, spoolDir string) error {
	return StartDelivererFor(exe, configDir, lock, spoolDir, nil, "")
}

// StartDelivererFor is StartDeliverer for the spool (when spoolLock is not
// nil), the changelog directory clDir (when clLock, its held upload lock,
// is not nil), or both in one process: the one deliverer of a checkout.
// Each held lock is inherited (fd 3, then fd 4).
func StartDelivererFor(exe, configDir string, spoolLock *os.File, spoolDir string, clLock *os.File, clDir string) error {
	args := []string{"change-capture", "deliver-spool", "--config-dir", configDir}
	var files []*os.File
	if spoolLock != nil {
		args = append(args, "--spool", spoolDir, "--lock-fd", strconv.Itoa(3+len(files)))
		files = append(files, spoolLock)
	}
	if clLock != nil {
		args = append(args, "--changelog", clDir, "--changelog-lock-fd", strconv.Itoa(3+len(files)))
		files = append(files, clLock)
	}
	if len(files) == 0 {
		return nil
	}
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}
