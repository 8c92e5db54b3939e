package hookrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/hookcore"
)

// detachedOpener is the checkout's Hub opener of a hook whose delivery runs
// in a detached deliverer process (capture.Backgrounder): the same
// executable, started as `EXE change-capture deliver-spool --config-dir DIR
// --spool SPOOL --lock-fd 3` in a new session with its standard streams on
// /dev/null (so the agent, which waits for the hook's streams to close,
// never waits for it), inheriting the held deliver lock as fd 3.
type detachedOpener struct {
	delivery.Opener
	exe string
}

func (o detachedOpener) StartDeliverer(lock *os.File, spoolDir string) error {
	return hookcore.StartDeliverer(o.exe, o.ConfigDir, lock, spoolDir)
}

// ClaudeCaptureDetached is ClaudeCapture with delivery taken off the hook's
// critical path: after the durable append the hook hands delivery to a
// detached deliverer started from exe (the running agentscm-hook binary,
// which must understand `change-capture deliver-spool`), or delivers
// in-process when none can be started. An empty exe is ClaudeCapture.
// Its stdout is ClaudeCaptureOut's (the recipe guidance on a SessionStart).
func ClaudeCaptureDetached(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time, exe string) int {
	return claudeCaptureOut(ctx, stdin, stdout, stderr, getenv, now, exe)
}

// delivererNice is the detached deliverer's scheduling niceness.
const delivererNice = 10

// DelivererUsage is the usage line of the deliver-spool subcommand.
const DelivererUsage = "agentscm-hook change-capture deliver-spool --config-dir DIR --spool DIR [--lock-fd N]"

// DeliverSpool is the detached deliverer process (`change-capture
// deliver-spool`): one bounded capture.DeliverSpool run over one spool,
// holding the deliver lock it inherited on --lock-fd (or taking it, when
// none is given), ending with one status line on stderr. It exits 0 when
// it ran (whatever it delivered: pending envelopes stay pending) and 2 for
// bad usage.
func DeliverSpool(ctx context.Context, args []string, stderr io.Writer) int {
	var configDir, spoolDir string
	lockFD := -1
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			fmt.Fprintf(stderr, "agentscm: %s needs a value\nusage: %s\n", args[i], DelivererUsage)
			return 2
		}
		switch v := args[i+1]; args[i] {
		case "--config-dir":
			configDir = v
		case "--spool":
			spoolDir = v
		case "--lock-fd":
			n, err := strconv.Atoi(v)
			if err != nil || n < 3 {
				fmt.Fprintf(stderr, "agentscm: --lock-fd %q is not a file descriptor >= 3\nusage: %s\n", v, DelivererUsage)
				return 2
			}
			lockFD = n
		default:
			fmt.Fprintf(stderr, "agentscm: unknown argument %q\nusage: %s\n", args[i], DelivererUsage)
			return 2
		}
	}
	if configDir == "" || spoolDir == "" {
		fmt.Fprintf(stderr, "agentscm: --config-dir and --spool are required\nusage: %s\n", DelivererUsage)
		return 2
	}
	// Below the agent's hooks: delivery is background work, and on a busy
	// machine the hooks (which the agent waits for) go first. Best effort.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, delivererNice)
	store := capture.StateDir{Dir: configDir}
	var lock *os.File
	if lockFD >= 0 {
		lock = os.NewFile(uintptr(lockFD), "deliver.lock")
		if err := store.DeliverLock(lock, spoolDir); err != nil {
			lock.Close()
			fmt.Fprintf(stderr, "agentscm: warning: deliverer: %s\n", hookcore.OneLine(err.Error()))
			return 0
		}
	}
	// Windows of DelivererMaxRun while each makes progress, up to
	// DelivererMaxDrain (the last window may start just before it), and
	// retries after a transient failure for DelivererRetryFor.
	ctx, cancel := context.WithTimeout(ctx, capture.DelivererMaxDrain+capture.DelivererMaxRun+5*time.Second)
	defer cancel()
	rep, err := capture.DeliverSpool(ctx, store, delivery.Opener{ConfigDir: configDir}, spoolDir, lock, capture.DeliverBounds{MaxRun: capture.DelivererMaxRun,
		MaxDrain: capture.DelivererMaxDrain, RetryFor: capture.DelivererRetryFor,
		Settle: capture.DelivererSettle, SettleMax: capture.DelivererSettleMax, SettleFiles: capture.DelivererSettleFiles})
	switch {
	case rep != nil && rep.Outcome == "busy":
		fmt.Fprintf(stderr, "agentscm: deliverer: %s\n", hookcore.OneLine(rep.Detail))
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "agentscm: warning: deliverer: %s\n", hookcore.OneLine(err.Error()))
	case rep != nil && rep.Outcome != "idle":
		fmt.Fprintf(stderr, "agentscm: warning: deliverer %s after %d delivered, %d failed: %s\n", rep.Outcome, rep.Delivered, rep.Failed, hookcore.OneLine(rep.Detail))
	case rep != nil:
		fmt.Fprintf(stderr, "agentscm: deliverer: %d delivered, %d refused, %d admitted in %d rounds\n", rep.Delivered, rep.Refused, rep.Admitted, rep.Rounds)
	}
	return 0
}
