package hookcore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hookroute"
)

// IntakeBinary is the capture hook's intake binary (cmd/agentscm-hook-intake):
// the capture-only routes, installed on the Claude Code events on
// which the capture runs without the changelog, next to the full hook
// binary (hookfile.HookBinary) it hands everything else to.
const IntakeBinary = hookfile.IntakeBinary

// errNeedsHub is what the intake hook's Hub opener answers: the event
// took a path that opens the Hub (backpressure, a failed intake write), which
// the full hook binary runs.
var errNeedsHub = errors.New("this event needs the Hub, which the intake binary does not link")

// intakeOpener is the intake hook's capture.HubOpener: it finds the
// checkout's connection (capture.ConnectionLooker) and starts the detached
// deliverer from the full hook binary (capture.Backgrounder), and never
// opens a Hub itself.
type intakeOpener struct {
	configDir, full string
}

func (o intakeOpener) Open(context.Context, string) (capture.Hub, error) { return nil, errNeedsHub }

func (o intakeOpener) LookupConnection(root string) (binding.Lineage, error) {
	c, err := connections.Lookup(o.configDir, root)
	if errors.Is(err, connections.ErrNoConnection) {
		return binding.Lineage{}, binding.ErrNoConnection
	}
	if err != nil {
		return binding.Lineage{}, err
	}
	return binding.Lineage{Hub: c.Hub, Repository: c.Repository, WorktreeID: c.WorktreeID}, nil
}

func (o intakeOpener) StartDeliverer(lock *os.File, spoolDir string) error {
	return StartDeliverer(o.full, o.configDir, lock, spoolDir)
}

// IntakeHook is the capture hook of route r (a capture-only route of the
// route table) in the agentscm-hook-intake binary: one payload read from
// stdin, captured exactly as agentscm-hook captures it, for the events
// whose capture writes the intake and hands the rest to the detached
// deliverer (started from full, the full hook binary). An event that needs
// the Hub in the hook (backpressure, a failed intake write) is run again,
// from the start, by full: this process execs it with the same arguments
// and payload on stdin (what this one wrote before is idempotent: the
// session's record and setup artifact). It fails open like every hook: at
// most one warning line on stderr, exit status 0, nothing on stdout but a
// SessionStart's recipe guidance (where the route prints it).
func IntakeHook(ctx context.Context, r hookroute.Route, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, full string) int {
	var warns Warnings
	defer warns.Flush(stderr)
	const failed = "capture hook failed: "
	b, dir, p, err := ReadPayload(stdin, getenv, r.Agent, "capture")
	if err != nil {
		warns.Add(failed + OneLine(err.Error()))
		return 0
	}
	store := capture.StateDir{Dir: dir}
	o := intakeOpener{configDir: dir, full: full}
	res, err := RunCapture(ctx, store, capture.HookDeps{Hubs: o, Lookup: o, Deliverer: o}, r.Agent, b, p, now)
	if errors.Is(err, errNeedsHub) {
		// Only returns when the exec failed.
		err = fmt.Errorf("%w; running it with %s failed: %w", errNeedsHub, full, execHook(full, r.Args, b))
		res = nil
	}
	warns.Add(CaptureWarning(res, err))
	if r.Guidance {
		warns.Add(Guidance(store, b, stdout))
	}
	if p.HookEventName == "SessionStart" {
		// Once per session: the full hook binary it hands events to must
		// be of this build (issue 32); the capture above is done either way.
		warns.Add(SiblingWarning(ctx, full))
	}
	return 0
}
