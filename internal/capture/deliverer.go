package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// The background deliverer takes delivery off the hook's critical path.
// A hook appends (or admits) under the spool lock as before, releases it,
// and then makes sure one deliverer per spool runs: it takes the spool's
// deliver lock (a non-blocking flock in the spool's private ledger
// directory) and, when it gets it, hands the held lock to a detached
// process (Backgrounder) that delivers pending envelopes page by page
// until nothing is deliverable or a bound is hit. A hook that finds the
// deliver lock held does nothing more: the running deliverer re-checks the
// spool after it lets the lock go (below), so an event appended meanwhile
// is not stranded. When no process can be started the hook delivers
// in-process, holding the deliver lock, within its own bounds (as before).
//
// The deliverer holds the spool lock only to read a page and, after the
// Hub calls, to record their outcomes (acknowledgement markers, the
// scheduling cursor, refusals) and to admit the intake, never across a
// Hub call, so hooks keep taking the spool lock while it delivers. Every
// bound ends in a status (deliver-status in the ledger directory, and the
// deliver-spool command's stderr line); pending envelopes stay pending for
// the next deliverer, hook or `change-capture deliver`.
const (
	deliverLockName = "deliver.lock"
	// deliverRunName is held shared by every deliverer for its whole run
	// (the deliver lock is let go and taken back while it re-checks), so
	// that WaitDeliverer can tell when none is left.
	deliverRunName    = "deliver.run"
	deliverStatusName = "deliver-status"
	// DelivererMaxRun bounds one window of a deliverer's run: a window
	// that ends at it while it was still delivering or admitting is
	// followed by another (DeliverBounds.MaxDrain), so the bound ends a
	// round, not the drain.
	DelivererMaxRun = 20 * time.Second
	// DelivererMaxDrain bounds how long a deliverer goes on from window
	// to window while each makes progress; past it the run ends with
	// outcome "bound" and Resume set, and the next process resumes it.
	DelivererMaxDrain = 5 * time.Minute
	// DelivererRetryFor is how long the background deliverer retries
	// after a transient delivery failure (the Hub restarting), with a
	// backoff from deliverRetryFirst doubling to deliverRetryMax,
	// before it ends with outcome "failed".
	DelivererRetryFor = 30 * time.Second
	deliverRetryFirst = 250 * time.Millisecond
	deliverRetryMax   = 5 * time.Second
	// delivererPage is how many envelopes one round reads.
	delivererPage = 4 * DeliveryPageSize
	// maxQuietRounds bounds the rounds in a row that only move the cursor
	// past local-only records.
	maxQuietRounds = 16
)

// Backgrounder is what a HubOpener may offer besides Open: starting a
// detached deliverer process for spoolDir that takes over the held deliver
// lock (the process inherits lock; the caller closes its copy). An error
// means no process started and the caller still holds the lock.
type Backgrounder interface {
	StartDeliverer(lock *os.File, spoolDir string) error
}

// DeliverBounds bound one deliverer run: MaxRun is its wall time,
// MaxEnvelopes (0 = no bound) the delivery attempts it makes.
type DeliverBounds struct {
	MaxRun       time.Duration
	MaxEnvelopes int
	// Settle, when > 0, makes the run wait while the intake is still
	// growing before it opens the Hub and admits (at its start, and when
	// it comes back for events appended after it went idle): until no
	// new intake file came for Settle, SettleMax passed, or SettleFiles
	// files wait. A burst of concurrent hooks is then admitted after it,
	// in one run, instead of competing with the hooks the agent waits
	// for, for the CPU and the disk. Every event is already durable in
	// the intake while the run waits.
	Settle, SettleMax time.Duration
	SettleFiles       int
	// Linger, when > 0, makes an idle run keep the deliver lock and wait
	// up to Linger for new intake before it lets the lock go and exits:
	// the hooks of the next tool calls (which find the lock held and start
	// no deliverer) are delivered by this process instead of a new one
	// per call. Each tick reads the intake directory only.
	Linger time.Duration
	// RoundTimeout bounds the deliveries of one round (0: DeliveryTimeout).
	RoundTimeout time.Duration
	// MaxDrain bounds how long the run goes on with another MaxRun window
	// after one that ended at MaxRun while still delivering or admitting
	// (0: DelivererMaxDrain when MaxEnvelopes is 0, else no second
	// window): a burst's tail is delivered by the deliverer that is
	// running, not left for a later hook.
	MaxDrain time.Duration
	// RetryFor, when > 0, makes a transient delivery failure wait (with
	// backoff) and try again, for at most RetryFor since the failures
	// began, instead of ending the run with outcome "failed".
	RetryFor time.Duration
	// AttemptNow makes the run attempt delivery at once, whatever the
	// retry schedule after transient failures says (retrypolicy.go): a
	// person asked for it (change-capture deliver).
	AttemptNow bool
	// RefusedRetry is the wait before a refused envelope's first retry
	// (0: RefusedRetryBase); see refusedretry.go.
	RefusedRetry time.Duration
}

// The background deliverer's settle bounds (DeliverBounds.Settle): 50 ms
// without a new intake file, at most a second, or 32 files short of the
// intake's backpressure bound (hooks of a longer burst reach that bound a
// little sooner than without the wait, and then wait for the spool lock
// as before).
const (
	DelivererSettle      = 50 * time.Millisecond
	DelivererSettleMax   = time.Second
	DelivererSettleFiles = BackgroundIntakeBackpressure - 32
)

// DelivererLinger is the background deliverer's DeliverBounds.Linger: an
// agent's hooks a tool call apart (tens to hundreds of milliseconds) reuse
// one deliverer process; a process start of the hook binary costs 30-50 ms
// of CPU on the agent's machine (sessionbench: 30 deliverers for a 20-call
// Claude Code session without it).
const DelivererLinger = time.Second

// lingerIntake waits (bounded by d, and ending a second before ctx's
// deadline so that the run still ends idle, not at its window's bound)
// until the intake holds more than waiting files; it reports whether it
// does.
func lingerIntake(ctx context.Context, sp *spool.Spool, waiting int, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)-time.Second)
	}
	if d <= 0 {
		return false
	}
	tick := max(d/20, 10*time.Millisecond)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(tick):
		}
		if n, err := sp.WaitingIntake(); err != nil {
			return false
		} else if n > waiting {
			return true
		}
	}
	return false
}

// settleIntake waits (bounded by b and ctx) while sp's intake grows; see
// DeliverBounds.Settle. It returns at once when nothing waits.
func settleIntake(ctx context.Context, sp *spool.Spool, b DeliverBounds) {
	if b.Settle <= 0 {
		return
	}
	last, err := sp.WaitingIntake()
	if err != nil || last == 0 {
		return
	}
	tick := b.Settle / 5
	if b.SettleMax > 0 && b.SettleMax < b.Settle {
		tick = b.SettleMax / 5
	}
	start := time.Now()
	quiet := start
	for last < b.SettleFiles || b.SettleFiles <= 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick):
		}
		n, err := sp.WaitingIntake()
		if err != nil {
			return
		}
		now := time.Now()
		if n != last {
			last, quiet = n, now
		}
		if now.Sub(quiet) >= b.Settle || now.Sub(start) >= b.SettleMax {
			return
		}
	}
}

// DeliverReport is what one deliverer run did and why it stopped.
type DeliverReport struct {
	Spool     string    `json:"spool"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	Delivered int       `json:"delivered"`
	Failed    int       `json:"failed"`
	Refused   int       `json:"refused"`
	Admitted  int       `json:"admitted"`
	Rounds    int       `json:"rounds"`
	// Outcome is "idle" (nothing more deliverable), "failed" (a transient
	// delivery failure stopped it: the Hub is unreachable or answered an
	// error), "bound" (its time or envelope bound), "busy" (another
	// deliverer holds the lock) or "error" (it could not run).
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Windows counts the MaxRun windows the run took (see MaxDrain);
	// Retries the waits after a transient failure (see RetryFor).
	Windows int `json:"windows,omitempty"`
	Retries int `json:"retries,omitempty"`
	// Resume is the durable note that the run ended at a bound with work
	// left (its drain bound, or a window without progress): the next
	// process (a hook starts a deliverer; change-capture deliver;
	// ResumeDelivery) resumes it.
	Resume bool `json:"resume,omitempty"`
	// RetryAt is when the earliest refused envelope is due for its next
	// retry (refusedretry.go); zero when none waits.
	RetryAt time.Time `json:"retry_at,omitempty"`
}

// errDelivererBusy is DeliverSpool's answer when another deliverer holds
// the spool's deliver lock.
var errDelivererBusy = errors.New("another deliverer holds the spool's deliver lock")

// tryDeliverLock takes the spool's deliver lock without waiting: nil, nil
// when another process holds it.
func (s StateDir) tryDeliverLock(spoolDir string) (*os.File, error) {
	dir := s.ledgerDir(spoolDir)
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("capture ledger: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, deliverLockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open deliver lock: %w", err)
	}
	ok, err := flockNB(f)
	if err != nil || !ok {
		f.Close()
		return nil, err
	}
	return f, nil
}

func flockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deliver run lock: %w", err)
		}
		return nil
	}
}

func flockNB(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, fmt.Errorf("deliver lock: %w", err)
	}
}

// DeliverLock checks that f is the deliver lock of spoolDir (the file a
// detached deliverer inherited): same inode as the lock path, and held (a
// non-blocking flock through it succeeds, as it does for the holder).
func (s StateDir) DeliverLock(f *os.File, spoolDir string) error {
	var a, b syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &a); err != nil {
		return fmt.Errorf("deliver lock: %w", err)
	}
	if err := syscall.Lstat(filepath.Join(s.ledgerDir(spoolDir), deliverLockName), &b); err != nil {
		return fmt.Errorf("deliver lock: %w", err)
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return errors.New("the inherited file is not this spool's deliver lock")
	}
	if ok, err := flockNB(f); err != nil || !ok {
		return fmt.Errorf("the inherited deliver lock is not held: %v", err)
	}
	return nil
}

// HoldDeliverRun holds spoolDir's deliver run lock shared until release:
// the deliverer process holds it for its whole life, so that WaitDeliverer
// also waits for what it does after the spool (the changelog's uploads).
func (s StateDir) HoldDeliverRun(spoolDir string) (release func(), err error) {
	dir := s.ledgerDir(spoolDir)
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, deliverRunName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open deliver run lock: %w", err)
	}
	if err := flockShared(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// WaitDeliverer waits (bounded by ctx) until no deliverer holds spoolDir's
// deliver lock: for tests and commands that must not leave one running.
func (s StateDir) WaitDeliverer(ctx context.Context, spoolDir string) error {
	if err := waitLock(ctx, s.ledgerDir(spoolDir)); err != nil {
		return fmt.Errorf("a deliverer of %s is still running: %w", spoolDir, err)
	}
	return nil
}

// waitLock waits until, in one look, neither the deliver lock nor the run
// lock of the ledger directory dir is held: the deliver lock first (held
// from the hook's start of a deliverer on, so a deliverer that has not yet
// taken its run lock is seen), then the run lock (held while a deliverer
// re-checks without the deliver lock, and until its last write).
func waitLock(ctx context.Context, dir string) error {
	free := func(name string) (bool, error) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		defer f.Close()
		return flockNB(f)
	}
	for {
		ok, err := free(deliverLockName)
		if err == nil && ok {
			ok, err = free(deliverRunName)
		}
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DeliverStatus reads the last deliverer run's report of spoolDir (nil when
// there is none).
func (s StateDir) DeliverStatus(spoolDir string) (*DeliverReport, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.ledgerDir(spoolDir), deliverStatusName), 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r DeliverReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("deliver status: %w", err)
	}
	return &r, nil
}

func (s StateDir) writeDeliverStatus(r *DeliverReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(s.ledgerDir(r.Spool), deliverStatusName), b, fsutil.FileMode)
}

// DeliverSpool is one deliverer run over spoolDir: the enabled binding
// whose spool it is names the checkout whose Hub connection is used. lock
// is the held deliver lock (nil: DeliverSpool takes it, or answers
// "busy"); DeliverSpool releases it. It loops over pending pages (admitting
// waiting intake files as every lock holder does) until nothing more is
// deliverable, a transient failure, or a bound; then it lets the lock go
// and looks once more, so that an event appended while it finished is
// delivered by it or by the hook that appended it. Its bound (MaxRun) ends
// a window: a window it ended while the run still delivered or admitted is
// followed by another, up to MaxDrain; a run that stops at a bound with
// work left sets Resume. Its report is also kept as the spool's deliver
// status.
func DeliverSpool(ctx context.Context, store StateDir, hubs HubOpener, spoolDir string, lock *os.File, b DeliverBounds) (*DeliverReport, error) {
	rep := &DeliverReport{Spool: spoolDir, Started: time.Now().UTC()}
	if b.MaxRun <= 0 {
		b.MaxRun = DelivererMaxRun
	}
	if b.MaxDrain <= 0 && b.MaxEnvelopes == 0 {
		b.MaxDrain = DelivererMaxDrain
	}
	if err := fsutil.MkdirPrivate(store.ledgerDir(spoolDir)); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(store.ledgerDir(spoolDir)); err != nil {
		return nil, fmt.Errorf("capture ledger: %w", err)
	}
	run, err := os.OpenFile(filepath.Join(store.ledgerDir(spoolDir), deliverRunName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open deliver run lock: %w", err)
	}
	defer run.Close() // last: after the status is written
	if err := flockShared(run); err != nil {
		return nil, err
	}
	if lock == nil {
		l, err := store.tryDeliverLock(spoolDir)
		if err != nil {
			return nil, err
		}
		if l == nil {
			rep.Outcome, rep.Detail, rep.Finished = "busy", errDelivererBusy.Error(), time.Now().UTC()
			return rep, errDelivererBusy
		}
		lock = l
	}
	defer lock.Close()
	res := &HookResult{Spool: spoolDir}
	start := time.Now()
	var windowEnded bool
	for {
		// One window: at most MaxRun. A window its own bound ended while
		// it still delivered or admitted is followed by another, up to
		// MaxDrain: the bound ends a round, not the drain.
		wctx, cancel := context.WithTimeout(ctx, b.MaxRun)
		before := res.Delivered + res.Admitted
		rep.Outcome, rep.Detail = "", ""
		held := true
		err = deliverSpool(wctx, store, hubs, spoolDir, lock, b, rep, res, &held)
		windowEnded = wctx.Err() != nil && ctx.Err() == nil
		cancel()
		rep.Windows++
		progressed := res.Delivered+res.Admitted > before
		if !windowEnded || b.MaxDrain <= 0 || !held {
			break
		}
		if !progressed || time.Since(start) >= b.MaxDrain {
			rep.Resume = true
			break
		}
		err = nil
	}
	rep.Finished = time.Now().UTC()
	switch {
	case err != nil && (windowEnded || ctx.Err() != nil):
		// Its own run bound ended a wait (for the spool lock, the Hub).
		rep.Outcome, rep.Detail, err = "bound", fmt.Sprintf("stopped after %s (%v); pending envelopes stay pending", b.MaxRun, err), nil
	case err != nil:
		rep.Outcome, rep.Detail = "error", err.Error()
	}
	if rep.Resume && rep.Outcome == "bound" {
		rep.Detail += fmt.Sprintf(" (after %d windows of %s); the next hook or change-capture deliver resumes it", rep.Windows, b.MaxRun)
	}
	if len(rep.Detail) > 1000 {
		rep.Detail = rep.Detail[:1000]
	}
	if rep.Outcome != "busy" {
		if werr := store.writeDeliverStatus(rep); werr != nil && err == nil {
			err = fmt.Errorf("write deliver status: %w", werr)
		}
	}
	return rep, err
}

// enabledBindingOf is the enabled capture binding that uses spoolDir.
func enabledBindingOf(store StateDir, spoolDir string) (*binding.Binding, error) {
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	var bd *binding.Binding
	for i := range cfg.Bindings {
		if cfg.Bindings[i].Spool == spoolDir && cfg.Bindings[i].Enabled {
			bd = &cfg.Bindings[i]
		}
	}
	if bd == nil {
		return nil, fmt.Errorf("no enabled capture binding uses the spool %s; its pending envelopes stay pending", spoolDir)
	}
	return bd, nil
}

// deliverSpool is one window of a DeliverSpool run: rounds until idle, a
// failure or the window's bound, adding to res and rep. held is cleared
// while the run has let the deliver lock go (it looks once more without it) and set again when it takes it back: only a run
// that still holds it may go on with another window.
func deliverSpool(ctx context.Context, store StateDir, hubs HubOpener, spoolDir string, lock *os.File, b DeliverBounds, rep *DeliverReport, res *HookResult, held *bool) error {
	bd, err := enabledBindingOf(store, spoolDir)
	if err != nil {
		return err
	}
	sp, err := store.openHookSpool(bd.Spool)
	if err != nil {
		return err
	}
	settleIntake(ctx, sp, b)
	hub, err := hubs.Open(ctx, bd.Root)
	if errors.Is(err, binding.ErrNoConnection) {
		return fmt.Errorf("the checkout %s has no client connection; pending envelopes stay pending", bd.Root)
	}
	if err != nil {
		return fmt.Errorf("open the Hub: %w", err)
	}
	defer hub.Close()
	if lin := hub.Lineage(); bd.Hub != "" && !binding.SameRepo(lin, bd.Lineage()) {
		return fmt.Errorf("capture binding of %s was saved for %s, but the checkout is now connected to %s; nothing delivered", bd.Root, binding.DescribeLineage(bd.Lineage()), binding.DescribeLineage(lin))
	}
	quiet := 0 // consecutive rounds that delivered and admitted nothing
	dir := store.ledgerDir(spoolDir)
	for {
		// The one retry policy (retrypolicy.go): after transient failures
		// (this run's or any process's) the next attempt waits until it is
		// due. A run in a hook's process (MaxEnvelopes) never waits: it
		// admits and delivers nothing this round; any other run sleeps
		// until then (at most TransientRetry.Max, bounded by its window).
		hold := false
		if bo := readBackoff(dir); !bo.due(time.Now()) && !b.AttemptNow {
			if b.MaxEnvelopes > 0 {
				hold = true
				if res.DeliveryErr == nil {
					res.DeliveryErr = bo.waiting()
				}
			} else {
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(bo.Next)):
				}
				rep.Retries++
			}
		}
		before := res.Delivered + res.Admitted
		delivered := res.Delivered
		transient := res.Failed - res.Refused
		seen, idle, err := deliverRound(ctx, store, sp, bd, hub, b, hold, res, rep)
		if res.Delivered > delivered {
			clearBackoff(dir)
		}
		if res.Delivered+res.Admitted == before {
			quiet++
		} else {
			quiet = 0
		}
		if quiet > maxQuietRounds {
			// Full pages of local-only records only (more than
			// maxQuietRounds x delivererPage of them): stop here; the
			// cursor moved past them for the next run.
			idle = true
		}
		rep.Rounds++
		rep.Delivered, rep.Failed, rep.Refused, rep.Admitted = res.Delivered, res.Failed, res.Refused, res.Admitted
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			// Its own run bound, also when it ended a delivery in flight
			// (that attempt failed on the bound, not on the Hub).
			rep.Outcome, rep.Detail = "bound", fmt.Sprintf("stopped after %s; pending envelopes stay pending", b.MaxRun)
			if res.Failed > res.Refused && res.DeliveryErr != nil && !errors.Is(res.DeliveryErr, context.DeadlineExceeded) {
				rep.Detail += "; a delivery attempt failed before: " + res.DeliveryErr.Error()
			}
			return nil
		case res.Failed-res.Refused > transient:
			bo, berr := noteFailure(dir, TransientRetry, time.Now(), res.lastTransient)
			if berr == nil && b.RetryFor > 0 && time.Since(bo.Since)+bo.Wait <= b.RetryFor {
				// A transient failure (the Hub restarting): the next round
				// waits until the next attempt is due and tries again,
				// rather than leave the tail to a later hook.
				continue
			}
			rep.Outcome = "failed"
			if res.DeliveryErr != nil {
				rep.Detail = res.DeliveryErr.Error()
			}
			return nil
		case idle && res.held > 0:
			// New sessions' files wait for the Hub to answer their
			// resolution: a transient failure, retried like one.
			cause := fmt.Errorf("%d intake files of new sessions wait for the Hub to resolve them: %v", res.held, res.heldErr)
			bo, berr := noteFailure(dir, TransientRetry, time.Now(), cause)
			if berr == nil && b.RetryFor > 0 && time.Since(bo.Since)+bo.Wait <= b.RetryFor {
				continue
			}
			rep.Outcome, rep.Detail = "failed", cause.Error()
			return nil
		case hold && idle:
			// Nothing delivered: the next attempt is not yet due and this
			// run may not wait for it.
			rep.Outcome = "failed"
			if res.DeliveryErr != nil {
				rep.Detail = res.DeliveryErr.Error()
			}
			return nil
		case b.MaxEnvelopes > 0 && res.Delivered+res.Failed >= b.MaxEnvelopes:
			rep.Outcome, rep.Detail = "bound", fmt.Sprintf("stopped after %d delivery attempts; pending envelopes stay pending", b.MaxEnvelopes)
			return nil
		case !idle:
			if res.Delivered > delivered && res.DeliveryErr != nil && res.Failed > res.Refused {
				// Recovered after the waits: the failure is not this
				// run's outcome.
				res.DeliveryErr = nil
			}
			continue
		}
		rep.Outcome = "idle"
		if res.DeliveryErr != nil {
			rep.Detail = res.DeliveryErr.Error()
		}
		if b.MaxEnvelopes > 0 {
			// An in-process run, bounded by its hook: the hook's next
			// neighbour delivers what came meanwhile.
			return nil
		}
		// Let the lock go, then look again: a hook that appended after the
		// last page found the lock held and left its event to this run.
		// (Only progress, bounded by MaxRun, brings it back here.)
		// The files the last admission left (counted before its listing,
		// admitIntake): one that arrived after it, whose hook found this
		// deliver lock held, raises the count below. (Counting here
		// instead took such a file for one it could not admit: with
		// intake-first hooks the e2e session's SessionEnd waited for the
		// next session.)
		waiting := res.intakeBase
		if b.Linger > 0 && lingerIntake(ctx, sp, waiting, b.Linger) {
			// Still holding the lock: hooks that came meanwhile left
			// their events to this run.
			settleIntake(ctx, sp, b)
			continue
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_UN); err != nil {
			return fmt.Errorf("release the deliver lock: %w", err)
		}
		*held = false
		more, err := appendedSince(ctx, sp, seen, waiting)
		if err != nil || !more {
			return err
		}
		if ok, err := flockNB(lock); err != nil || !ok {
			// Another deliverer took over: it delivers what is new.
			return err
		}
		*held = true
		settleIntake(ctx, sp, b)
	}
}

// appendedSince reports whether the spool holds a sequence above seen or
// more intake files than the waiting ones the last round left (a file it
// could not admit does not bring it back; a new one does, and any
// admission raises the sequence).
func appendedSince(ctx context.Context, sp *spool.Spool, seen uint64, waiting int) (bool, error) {
	if n, err := sp.WaitingIntake(); err == nil && n > waiting {
		return true, nil
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer ss.Close()
	m, err := ss.MaxSeq()
	return m > seen, err
}

// attempt is one delivery attempt made without the spool lock, recorded
// under it afterwards.
type attempt struct {
	env    *spool.Envelope
	status string
	err    error
}

// deliverRound reads one page (admitting waiting intake first), delivers
// its deliverable envelopes without the spool lock, and records the
// outcomes under it. It returns the highest sequence the page's
// acquisition saw and whether nothing was delivered (idle).
func deliverRound(ctx context.Context, store StateDir, sp *spool.Spool, bd *binding.Binding, hub Hub, b DeliverBounds, hold bool, res *HookResult, rep *DeliverReport) (uint64, bool, error) {
	now := time.Now()
	admitted := res.Admitted
	var envs []spool.Envelope
	var seen uint64
	// Refused envelopes whose retry time has not come (refusedretry.go).
	waiting := map[uint64]bool{}
	err := withSession(ctx, store, sp, bd, hub, res, func(ss *spool.Tx, led *Ledger) error {
		var err error
		if seen, err = ss.MaxSeq(); err != nil {
			return err
		}
		if envs, err = ss.Pending(delivererPage); err != nil {
			return err
		}
		retries := readRetries(led.dir)
		for i := range envs {
			if retries.waiting(envs[i].Record.Seq, envs[i].Digest, now) {
				waiting[envs[i].Record.Seq] = true
			}
		}
		rep.RetryAt = retries.nextRetry()
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	var tries []attempt
	var trailing *spool.Envelope
	var lastWait *spool.Envelope // the last refused envelope passed over
	trailingWait := false        // the cursor moves past a page of waiting refused envelopes
	cut := false                 // the round's own time ended it with envelopes left
	limit := b.MaxEnvelopes
	round := b.RoundTimeout
	if round <= 0 {
		round = DeliveryTimeout
	}
	dctx, cancel := context.WithTimeout(ctx, round)
	defer cancel()
	if hold {
		// The next attempt after transient failures is not yet due
		// (retrypolicy.go): admit only.
		envs = nil
	}
	for i := range envs {
		env := &envs[i]
		if !Deliverable(&env.Record) {
			trailing, trailingWait = furthest(trailing, env), false
			continue
		}
		if waiting[env.Record.Seq] {
			// Refused before and not yet due for its retry: passed over
			// until then (its last attempt stays the refusal).
			lastWait = env
			continue
		}
		trailing = nil
		if dctx.Err() != nil || (limit > 0 && res.Delivered+res.Failed+len(tries) >= limit) {
			break
		}
		status, err := hub.Deliver(dctx, env)
		if err != nil && dctx.Err() != nil && ctx.Err() == nil && len(tries) > 0 {
			// The round's own time ran out during this attempt, after
			// others of the round went through: not a Hub failure (a slow
			// Hub makes shorter rounds); the next round sends it again.
			cut = true
			break
		}
		tries = append(tries, attempt{env: env, status: status, err: err})
		var re *RefusedError
		if err != nil && !errors.As(err, &re) {
			res.lastTransient = err
			break // transient: the Hub is down or failing; stop here
		}
	}
	if len(tries) == 0 && trailing == nil && lastWait != nil && len(envs) == delivererPage {
		// A full page of refused envelopes waiting for their retry (and
		// local-only records): move the cursor past it, so it never hides
		// what follows.
		trailing, trailingWait = lastWait, true
	}
	if len(tries) == 0 && trailing == nil && res.Admitted == admitted {
		return seen, true, nil
	}
	delivered := res.Delivered
	err = withSession(ctx, store, sp, bd, hub, res, func(ss *spool.Tx, led *Ledger) error {
		retries := readRetries(led.dir)
		retried := false
		for _, t := range tries {
			a := spool.Attempt{Seq: t.env.Record.Seq, Digest: t.env.Digest, At: now}
			if t.err != nil {
				a.Outcome, a.Detail = "failed", t.err.Error()
				res.Failed++
				if res.DeliveryErr == nil {
					res.DeliveryErr = t.err
				}
				var re *RefusedError
				if errors.As(t.err, &re) {
					a.Outcome = "refused"
					res.Refused++
					if herr := handleRefusal(ss, led, t.env, re, now); herr != nil {
						res.DeliveryErr = fmt.Errorf("%w; and: %v", t.err, herr)
					}
					retries.refused(t.env, re.Reason, now, b.RefusedRetry)
					retried = true
				}
			} else {
				a.Outcome = t.status
				if err := ss.Ack(t.env.Record.Seq, t.env.Digest); err != nil {
					a.Outcome, a.Detail = "failed", "acknowledged by the Hub but the ack marker failed: "+err.Error()
					if res.DeliveryErr == nil {
						res.DeliveryErr = err
					}
				} else {
					res.Delivered++
					if retries.accepted(t.env, t.status, now) {
						// Refused before, accepted on a retry (an upgraded
						// Hub, a fixed refusal): no longer listed as refused.
						led.clearRefusal(t.env.Record.Seq, t.env.Digest)
						a.Detail = "accepted on a retry after the Hub had refused it"
						retried = true
					}
				}
			}
			if len(a.Detail) > 300 {
				a.Detail = a.Detail[:300]
			}
			if err := ss.RecordAttempt(a); err != nil {
				return err
			}
		}
		if retried {
			if err := writeRetries(led.dir, &retries); err != nil {
				return err
			}
			if err := led.Flush(); err != nil {
				return err
			}
		}
		rep.RetryAt = retries.nextRetry()
		if trailing != nil {
			// One attempt for the last of the page's trailing run of
			// local-only records (and refused envelopes waiting for their
			// retry) moves the cursor past the whole run.
			a := spool.Attempt{Seq: trailing.Record.Seq, Digest: trailing.Digest, At: now, Outcome: "local_only",
				Detail: "local-only records (deferred facts, transcript conversation records) up to here: never delivered"}
			if trailingWait {
				a.Outcome, a.Detail = "retry_wait", "refused envelopes waiting for their retry time (and local-only records) up to here"
			}
			if err := ss.RecordAttempt(a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return seen, false, err
	}
	// Idle: nothing was delivered and nothing admitted (only refusals,
	// local-only records, or an empty page), so another round would
	// repeat this one, unless a full page ended in local-only records:
	// the cursor moved past them and more may follow (localRun).
	idle := res.Delivered == delivered && res.Admitted == admitted
	return seen, idle && !cut && !(trailing != nil && len(envs) == delivererPage), nil
}

// withSession runs fn under one spool Session and the ledger, after
// admitting waiting intake files as every lock holder does; it admits once
// more before the lock is let go.
func withSession(ctx context.Context, store StateDir, sp *spool.Spool, bd *binding.Binding, hub Hub, res *HookResult, fn func(*spool.Tx, *Ledger) error) error {
	ss, err := sp.Begin(ctx)
	if err != nil {
		return err
	}
	defer ss.Close()
	led, err := store.OpenLedger(bd.Spool)
	if err != nil {
		return err
	}
	defer led.Close()
	stream, err := led.BindStream(sp.ObservationScope())
	if err != nil {
		return err
	}
	ss.SetStream(stream)
	adm := &admission{deadline: time.Now().Add(admitBudget), left: maxAdmitPerHook}
	// The binding's compaction policy runs in every deliverer Session too,
	// before admission: with a deliverer the acknowledgements happen in this
	// process, and lock-holding hooks often queue their event behind a
	// backlog (returning before their own maintain), so without it a spool
	// under sustained load reached its record limit uncompacted (the first
	// soak of this change; admission then stalled on record_limit). No
	// session: no once-per-session warnings from here.
	maintain(store, ss, bd, "", res)
	// Records a hook could not append become capture_interrupted gaps here
	// too: with intake-first hooks (hook.go) most hooks never hold the
	// spool lock, so the deliverer may be the next holder.
	if _, err := publishLost(store.ledgerDir(bd.Spool), ss, led, time.Now()); err != nil && res.DeliveryErr == nil {
		res.DeliveryErr = err
	}
	if _, err := admitIntake(ctx, store, led, ss, sp, bd, hub, adm, res); err != nil && res.DeliveryErr == nil {
		res.DeliveryErr = err
	}
	return fn(ss, led)
}

// ensureDeliverer makes sure a deliverer runs for the hook's spool after
// the hook let the spool lock go: when no other holds the deliver lock it
// starts one through bg, or, when none can be started, delivers in-process
// within the hook's own bound (limit envelopes).
func ensureDeliverer(ctx context.Context, store StateDir, bd *binding.Binding, bg Backgrounder, hubs HubOpener, res *HookResult, limit int) {
	lock, err := store.tryDeliverLock(bd.Spool)
	if err != nil {
		if res.DeliveryErr == nil {
			res.DeliveryErr = err
		}
		return
	}
	if lock == nil {
		return // a deliverer runs; it re-checks before it exits
	}
	if st, err := store.DeliverStatus(bd.Spool); err == nil && st != nil && (st.Outcome == "failed" || st.Outcome == "error") && res.DeliveryErr == nil {
		// The last run could not deliver, or could not run at all (the
		// Hub would not open, ...): say so on this hook's line. With
		// intake-first hooks an "error" run also leaves events waiting in
		// the intake, so it must not stay quiet.
		res.DeliveryErr = fmt.Errorf("the last delivery attempt failed: %s", st.Detail)
	}
	if err := bg.StartDeliverer(lock, bd.Spool); err == nil {
		lock.Close()
		return
	} else if res.DeliveryErr == nil {
		res.DeliveryErr = fmt.Errorf("start the background deliverer (delivering in-process): %w", err)
	}
	rep, err := DeliverSpool(ctx, store, hubs, bd.Spool, lock, DeliverBounds{MaxRun: DeliveryTimeout, MaxEnvelopes: limit})
	if rep != nil {
		res.Delivered += rep.Delivered
		res.Failed += rep.Failed
		res.Refused += rep.Refused
		res.Admitted += rep.Admitted
		if rep.Outcome == "failed" && res.DeliveryErr == nil {
			res.DeliveryErr = errors.New(rep.Detail)
		}
	}
	if err != nil && res.DeliveryErr == nil {
		res.DeliveryErr = err
	}
}

// WaitDeliverers is WaitDeliverer for every spool of the config directory
// (every ledger directory's deliver lock).
func (s StateDir) WaitDeliverers(ctx context.Context) error {
	locks, err := filepath.Glob(filepath.Join(s.Dir, ledgerRoot, "*", deliverLockName))
	if err != nil {
		return err
	}
	for _, l := range locks {
		if err := waitLock(ctx, filepath.Dir(l)); err != nil {
			return err
		}
	}
	return nil
}

// ResumeDelivery is the resume half of the deliverer's durable note, for
// processes other than hooks (change-capture status and show, the local
// page): when spoolDir has work a deliverer should take up and no
// deliverer runs, it starts one through bg and reports true. Work is due
// when a last run ended at a bound with Resume set, when a refused
// envelope's RetryAt has come, when the last run failed or could not run
// (the Hub may be back), or when deliverable envelopes or intake files
// wait that no run took up (a hook killed before it started one). Hooks
// need none of it: every hook makes sure a deliverer runs
// (ensureDeliverer). It only reads and starts a process: it never waits
// for the Hub.
func ResumeDelivery(store StateDir, bg Backgrounder, spoolDir string, now time.Time) (bool, error) {
	due := false
	if st, err := store.DeliverStatus(spoolDir); err == nil && st != nil {
		due = st.Resume || (!st.RetryAt.IsZero() && !now.Before(st.RetryAt)) || st.Outcome == "failed" || st.Outcome == "error"
	}
	if !due {
		sp, err := spool.OpenReadOnly(spoolDir)
		if err != nil {
			return false, err
		}
		n, err := sp.WaitingIntake()
		if err != nil {
			return false, err
		}
		due = n > 0
	}
	if !due {
		u, err := store.Undelivered(spoolDir, now)
		if err != nil {
			return false, err
		}
		due = u.Envelopes > 0
	}
	if !due {
		return false, nil
	}
	lock, err := store.tryDeliverLock(spoolDir)
	if err != nil || lock == nil {
		return false, err // nil lock: a deliverer runs and takes it up
	}
	defer lock.Close()
	if err := bg.StartDeliverer(lock, spoolDir); err != nil {
		return false, fmt.Errorf("start a deliverer: %w", err)
	}
	return true, nil
}
