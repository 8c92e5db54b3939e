package hookrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/hubremote"
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

// delivererNice is the detached deliverer's scheduling niceness.
const delivererNice = 10

// DelivererUsage is the usage line of the deliver-spool subcommand.
const DelivererUsage = "agentscm-hook change-capture deliver-spool --config-dir DIR [--spool DIR [--lock-fd N]] [--changelog DIR [--changelog-lock-fd N]]"

// DeliverSpool is the detached deliverer process (`change-capture
// deliver-spool`), the one deliverer of a checkout: one bounded
// capture.DeliverSpool run over the spool (holding the deliver lock it
// inherited on --lock-fd, or taking it, when none is given), then the
// changelog's upload queue (--changelog: holding the upload lock it
// inherited on --changelog-lock-fd, or taking it), both with the one
// retry policy (capture.TransientRetry), ending with one status line per
// part on stderr. It exits 0 when it ran (whatever it delivered: what is
// pending stays pending) and 2 for bad usage.
func DeliverSpool(ctx context.Context, args []string, stderr io.Writer) int {
	var configDir, spoolDir, clDir string
	lockFD, clFD := -1, -1
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
		case "--changelog":
			clDir = v
		case "--lock-fd", "--changelog-lock-fd":
			n, err := strconv.Atoi(v)
			if err != nil || n < 3 {
				fmt.Fprintf(stderr, "agentscm: %s %q is not a file descriptor >= 3\nusage: %s\n", args[i], v, DelivererUsage)
				return 2
			}
			if args[i] == "--lock-fd" {
				lockFD = n
			} else {
				clFD = n
			}
		default:
			fmt.Fprintf(stderr, "agentscm: unknown argument %q\nusage: %s\n", args[i], DelivererUsage)
			return 2
		}
	}
	if configDir == "" || (spoolDir == "" && clDir == "") || (lockFD >= 0 && spoolDir == "") || (clFD >= 0 && clDir == "") {
		fmt.Fprintf(stderr, "agentscm: --config-dir and --spool or --changelog are required (each lock fd with its directory)\nusage: %s\n", DelivererUsage)
		return 2
	}
	// Below the agent's hooks: delivery is background work, and on a busy
	// machine the hooks (which the agent waits for) go first. Best effort.
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, delivererNice)
	// Windows of DelivererMaxRun while each makes progress, up to
	// DelivererMaxDrain (the last window may start just before it), and
	// retries after a transient failure for DelivererRetryFor.
	ctx, cancel := context.WithTimeout(ctx, capture.DelivererMaxDrain+capture.DelivererMaxRun+5*time.Second)
	defer cancel()
	if spoolDir != "" {
		// Held for the whole process: waiting for the spool's deliverer
		// waits for its uploads too.
		if release, err := (capture.StateDir{Dir: configDir}).HoldDeliverRun(spoolDir); err == nil {
			defer release()
		}
		deliverSpoolPart(ctx, configDir, spoolDir, lockFD, stderr)
	}
	if clDir != "" {
		var lock *os.File
		if clFD >= 0 {
			lock = os.NewFile(uintptr(clFD), "upload.lock")
			if err := changelog.CheckUploadLock(lock, clDir); err != nil {
				lock.Close()
				fmt.Fprintf(stderr, "agentscm: warning: changelog deliverer: %s\n", hookcore.OneLine(err.Error()))
				return 0
			}
		} else {
			l, err := changelog.TryUploadLock(clDir)
			if err != nil || l == nil {
				if err != nil {
					fmt.Fprintf(stderr, "agentscm: warning: changelog deliverer: %s\n", hookcore.OneLine(err.Error()))
				}
				return 0 // nil lock: another deliverer uploads
			}
			lock = l
		}
		n, pending, err := DrainChangelog(ctx, configDir, clDir, lock)
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "agentscm: warning: changelog deliverer after %d uploaded, %d pending: %s\n", n, pending, hookcore.OneLine(err.Error()))
		default:
			fmt.Fprintf(stderr, "agentscm: changelog deliverer: %d uploaded, %d pending\n", n, pending)
		}
	}
	return 0
}

// deliverSpoolPart is the spool's part of DeliverSpool.
func deliverSpoolPart(ctx context.Context, configDir, spoolDir string, lockFD int, stderr io.Writer) {
	store := capture.StateDir{Dir: configDir}
	var lock *os.File
	if lockFD >= 0 {
		lock = os.NewFile(uintptr(lockFD), "deliver.lock")
		if err := store.DeliverLock(lock, spoolDir); err != nil {
			lock.Close()
			fmt.Fprintf(stderr, "agentscm: warning: deliverer: %s\n", hookcore.OneLine(err.Error()))
			return
		}
	}
	b := delivererBounds(os.Getenv(DelivererTestBoundsEnv))
	rep, err := capture.DeliverSpool(ctx, store, delivery.Opener{ConfigDir: configDir}, spoolDir, lock, b)
	if successorDue(rep, b.MaxDrain) {
		// Its drain bound ended a run that delivered or admitted in every
		// window: work is still arriving. A fresh deliverer takes over at
		// once (when something is due), rather than leave the tail to a
		// later hook that may not come (each process stays bounded). A
		// crash before it started leaves the run's durable note (Resume)
		// for the next process of any kind.
		delivererFailpoint("successor.due")
		if exe, xerr := os.Executable(); xerr == nil {
			if ok, rerr := capture.ResumeDelivery(store, detachedOpener{Opener: delivery.Opener{ConfigDir: configDir}, exe: exe}, spoolDir, time.Now()); rerr != nil {
				fmt.Fprintf(stderr, "agentscm: warning: deliverer: start its successor: %s\n", hookcore.OneLine(rerr.Error()))
			} else if ok {
				delivererFailpoint("successor.started")
				fmt.Fprintf(stderr, "agentscm: deliverer: a successor goes on after %d windows\n", rep.Windows)
			}
		}
	}
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
}

// DrainChangelog uploads the increments of the changelog directory dir
// that the Hub does not hold yet, holding its upload lock (lock, which it
// closes), with the one retry policy: an upload the Hub stopped
// (unreachable, failing) waits capture.TransientRetry's next wait and
// tries again, for at most its For. After it lets the lock go it looks
// once more: increments stored meanwhile (whose hooks found the lock held
// and left them to it) are uploaded by it, unless another deliverer took
// the lock. It returns the positions uploaded and those left pending.
func DrainChangelog(ctx context.Context, configDir, dir string, lock *os.File) (uploaded, pending int, err error) {
	defer lock.Close()
	c, root, err := changelog.OpenForUpload(configDir, dir)
	if err != nil {
		return 0, 0, err
	}
	remote := hubremote.ForCheckout(configDir)
	var since time.Time
	var wait time.Duration
	for {
		next, err := c.NextPosition()
		if err != nil {
			return uploaded, pending, err
		}
		r, closeRemote, err := remote(ctx, root)
		if err != nil || r == nil {
			if err == nil {
				err = errors.New("the checkout has no client connection")
			}
			return uploaded, pending, err
		}
		out, err := c.Upload(ctx, r, changelog.UploadOptions{Through: next - 1, Sharing: CheckoutSharing(configDir, root), Locked: true, Failpoint: delivererFailpoint})
		if closeRemote != nil {
			closeRemote()
		}
		if err != nil {
			return uploaded, pending, err
		}
		uploaded += len(out.Uploaded)
		pending = out.Pending
		if out.Err != "" && out.Pending > 0 && out.LocalOnly == "" {
			// Transient: the one retry policy.
			p := capture.TransientRetry
			if since.IsZero() {
				since, wait = time.Now(), p.First
			} else {
				wait = min(2*wait, p.Max)
			}
			if time.Since(since)+wait > p.For || ctx.Err() != nil {
				return uploaded, pending, errors.New(out.Err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		since, wait = time.Time{}, 0
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
			return uploaded, pending, err
		}
		after, err := c.NextPosition()
		if err != nil || after <= next {
			return uploaded, pending, err
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return uploaded, pending, nil // another deliverer took over: it uploads them
		}
	}
}

// delivererFailpoint kills the deliverer (SIGKILL) at the named point
// when changelog.FailpointEnv says "deliver.NAME" (crash tests:
// "deliver.uploaded", the Hub holds a position, the queue does not say so;
// "deliver.successor.due" and "deliver.successor.started", either side of
// starting a successor at the drain bound).
func delivererFailpoint(name string) {
	if os.Getenv(changelog.FailpointEnv) == "deliver."+name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

// successorDue reports whether a deliverer run stopped at its drain bound
// maxDrain with work left (Resume): the run went on window after window
// because each one delivered or admitted, so a successor should go on. A
// run that stopped earlier, on a window without progress, leaves its note
// for the next process instead (a successor would make no more progress
// than it did).
func successorDue(rep *capture.DeliverReport, maxDrain time.Duration) bool {
	return rep != nil && rep.Resume && rep.Outcome == "bound" && rep.Finished.Sub(rep.Started) >= maxDrain
}

// DelivererTestBoundsEnv, set to "MAXRUN,MAXDRAIN" (two Go durations),
// replaces the detached deliverer's window and drain bounds, so that
// crash tests reach its successor hand-over in seconds instead of
// capture.DelivererMaxDrain. Unset (or malformed), the bounds are the
// product's.
const DelivererTestBoundsEnv = "AGENTSCM_DELIVERER_TEST_BOUNDS"

// delivererBounds are the detached deliverer's bounds, with the window
// and drain bounds that override (DelivererTestBoundsEnv's value) names.
func delivererBounds(override string) capture.DeliverBounds {
	b := capture.DeliverBounds{MaxRun: capture.DelivererMaxRun,
		MaxDrain: capture.DelivererMaxDrain, RetryFor: capture.DelivererRetryFor,
		Settle: capture.DelivererSettle, SettleMax: capture.DelivererSettleMax, SettleFiles: capture.DelivererSettleFiles, Linger: capture.DelivererLinger}
	run, drain, ok := strings.Cut(override, ",")
	if !ok {
		return b
	}
	r, rerr := time.ParseDuration(run)
	d, derr := time.ParseDuration(drain)
	if rerr == nil && derr == nil && r > 0 && d > 0 {
		b.MaxRun, b.MaxDrain = r, d
	}
	return b
}

// WaitBackground waits (bounded by ctx) until no background deliverer of
// the config directory configDir runs: every spool's deliverer and every
// changelog's uploads (the same process uploads a changelog's increments,
// and a checkout with a changelog and no capture has one for them alone).
// For tests and commands that must not leave one running.
func WaitBackground(ctx context.Context, configDir string) error {
	if err := (capture.StateDir{Dir: configDir}).WaitDeliverers(ctx); err != nil {
		return fmt.Errorf("background deliverers: %w", err)
	}
	dirs, err := filepath.Glob(filepath.Join(configDir, "changelog", "*"))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := changelog.WaitUploads(ctx, d); err != nil {
			return fmt.Errorf("the changelog's deliverer: %w", err)
		}
	}
	return nil
}
