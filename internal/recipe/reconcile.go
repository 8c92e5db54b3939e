package recipe

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/event"
)

// Reconcile outcomes.
const (
	// Cleared: no action start became durable; the reservation is removed
	// and its unused order released. The managed occurrence is marked so
	// that it can never launch the runner.
	Cleared = "cleared"
	// Finished: after a verified reboot of the same host, an
	// incomplete/unknown finish was appended with the original bindings.
	Finished = "finished_incomplete"
	// Resolved: the terminal receipt was already retained; only the
	// attempt record remained and is removed.
	Resolved = "resolved"
	// Unresolved: the attempt stays and keeps fencing.
	Unresolved = "unresolved"
)

// ReconcileOptions are the inputs of reconcile-recipe.
type ReconcileOptions struct {
	Store capture.StateDir
	Hubs  capture.HubOpener
	ID    string
	// Root is the checkout root (the working directory by default).
	Root string
	Now  func() time.Time
	Host func() HostIdentity
}

// Reconciled is what reconcile-recipe did with one attempt.
type Reconciled struct {
	ActionID string `json:"action_id"`
	WorkID   string `json:"work_id"`
	Session  string `json:"session"`
	Phase    string `json:"phase"`
	Start    string `json:"start"`
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
}

// Reconcile rechecks every unresolved attempt of recipe id on the
// checkout: it clears a reservation whose action start never became
// durable; keeps a same-boot attempt with a durable (or possibly durable)
// start unresolved, since the child may have spawned before its phase was
// persisted; appends an incomplete/unknown finish with the original
// bindings after a verified reboot of the same host; and keeps attempts
// of a foreign host or with missing or ambiguous identity unresolved. It
// never launches the child. The current Work authorization of each
// attempt's session is rechecked first.
func Reconcile(ctx context.Context, o ReconcileOptions) ([]Reconciled, error) {
	real, err := filepath.EvalSymlinks(o.Root)
	if err != nil {
		return nil, refuse("--root %s: %v", o.Root, err)
	}
	cfg, err := o.Store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	bd := cfg.Find(real)
	if bd == nil {
		return nil, refuse("no capture binding has the root %s", real)
	}
	if _, ok := bd.RecipeByID(o.ID); !ok {
		if !hasAttempts(o.Store, bd, o.ID) {
			return nil, refuse("recipe id %q is not registered for %s and has no unresolved attempt", o.ID, bd.Root)
		}
	}
	cdir := checkoutDir(o.Store.Dir, bd.Root, bd.Repository, bd.WorktreeID)
	lock, err := lockCheckout(ctx, cdir, false)
	if err != nil {
		return nil, refuse("%v: a recipe run of %s may be live; nothing was changed", err, bd.Root)
	}
	defer lock.unlock()
	as := attemptStore{dir: filepath.Join(cdir, attemptsDir)}
	all, err := as.list()
	if err != nil {
		return nil, err
	}
	ms, err := o.Store.OpenManaged(bd)
	if err != nil {
		return nil, err
	}
	host := CurrentHost()
	if o.Host != nil {
		host = o.Host()
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var hub capture.Hub
	defer func() {
		if hub != nil {
			hub.Close()
		}
	}()
	out := []Reconciled{}
	for _, a := range all {
		if a.RecipeID != o.ID || a.Root != bd.Root {
			continue
		}
		rs := Reconciled{ActionID: a.ActionID, WorkID: a.WorkID, Session: a.Session, Phase: a.Phase, Outcome: Unresolved}
		if hub == nil {
			if hub, err = o.Hubs.Open(ctx, bd.Root); err != nil {
				hub = nil
				rs.Reason = "no Hub connection to recheck the current Work authorization: " + err.Error()
				out = append(out, rs)
				continue
			}
		}
		rctx, cancel := context.WithTimeout(ctx, capture.ResolveTimeout)
		t, rerr := hub.Resolve(rctx, bd.WorktreeID, a.Session)
		cancel()
		switch {
		case rerr != nil:
			rs.Reason = "the current Work authorization of session " + a.Session + " failed: " + rerr.Error()
		case t.WorkID != a.WorkID:
			rs.Reason = fmt.Sprintf("session %s is now authorized for Work %s, not the attempt's Work %s", a.Session, t.WorkID, a.WorkID)
		}
		if rs.Reason != "" {
			out = append(out, rs)
			continue
		}
		st, err := ms.StartState(a.ActionID)
		if err != nil {
			return out, err
		}
		rs.Start = st
		if st == capture.StartNone {
			// Proven: no start became durable, so nothing was spawned.
			if err := ms.Clear(a.ActionID); err != nil {
				return out, err
			}
			if err := as.remove(a.FenceKey); err != nil {
				return out, err
			}
			rs.Outcome, rs.Reason = Cleared, "no action start became durable: the reservation is cleared and its unused order released; the occurrence can never launch the child"
			if posted, err := ms.ClearAfterPost(ctx, a.ActionID); err != nil {
				return out, fmt.Errorf("record the generic terminal receipt of %s: %w", a.ActionID, err)
			} else if posted {
				rs.Reason += "; its completion was already observed, so one original-bound generic terminal receipt is recorded"
			} else {
				rs.Reason += "; its completion, when it arrives, records one original-bound generic terminal receipt"
			}
			out = append(out, rs)
			continue
		}
		if fst, err := ms.FinishState(a.ActionID); err != nil {
			return out, err
		} else if fst == capture.StartDurable {
			if err := as.remove(a.FenceKey); err != nil {
				return out, err
			}
			rs.Outcome, rs.Reason = Resolved, "the terminal receipt was already retained"
			out = append(out, rs)
			continue
		}
		switch {
		case a.BootID == "" || host.BootID == "" || a.MachineID == "" || host.MachineID == "":
			rs.Reason = "the attempt's or this host's boot or machine identity is missing: the child's fate cannot be proven"
		case a.MachineID != host.MachineID:
			rs.Reason = "the attempt was made on another host (machine id " + a.MachineID + ")"
		case a.BootID == host.BootID:
			rs.Reason = "same boot: a durable start exists, so the child may have spawned (even with phase " + a.Phase + ") and may still run; it stays unresolved until a verified reboot"
		}
		if rs.Reason != "" {
			out = append(out, rs)
			continue
		}
		// A verified reboot of the same host: no child of that boot runs.
		if st == capture.StartPending {
			if err := ms.AppendStart(ctx, &event.Record{Action: &event.Action{ID: a.ActionID}}); err != nil {
				return out, fmt.Errorf("append the retained start of %s: %w", a.ActionID, err)
			}
		}
		start, err := ms.StartRecord(a.ActionID)
		if err != nil || start.Action == nil {
			rs.Reason = fmt.Sprintf("the retained start of %s cannot be read: %v", a.ActionID, err)
			out = append(out, rs)
			continue
		}
		fin := *start.Action
		fin.Result, fin.Verification, fin.ExitCode = "incomplete", "unknown", nil
		fin.CompletionSetupDigest = fin.SetupDigest
		fin.Drift = "unknown"
		fin.FinishedAt = now().UTC().Truncate(time.Second)
		finish := &event.Record{Agent: start.Agent, SessionID: start.SessionID, Kind: event.ActionFinish, HookEvent: "reconcile-recipe",
			ToolName: start.ToolName, ToolUseID: start.ToolUseID, Outcome: event.OutcomeFailed,
			WorkID: start.WorkID, Generation: start.Generation, CanonicalSession: start.CanonicalSession,
			ObservedAt: now().UTC(), CaptureMode: start.CaptureMode, Managed: true, Action: &fin}
		// What the interrupted run streamed moves into the spool too.
		fin.Output, _ = retainOutputs(ctx, ms, ms.Dir(), a.ActionID)
		if err := ms.AppendFinish(ctx, finish); err != nil {
			return out, fmt.Errorf("append the incomplete finish of %s: %w", a.ActionID, err)
		}
		if err := dropOutputs(ms.Dir(), a.ActionID); err != nil {
			return out, err
		}
		if err := as.remove(a.FenceKey); err != nil {
			return out, err
		}
		rs.Outcome, rs.Reason = Finished, "a verified reboot of this host: an incomplete/unknown finish is appended with the original bindings"
		out = append(out, rs)
	}
	return out, nil
}

func hasAttempts(store capture.StateDir, bd *binding.Binding, id string) bool {
	as := attemptStore{dir: filepath.Join(checkoutDir(store.Dir, bd.Root, bd.Repository, bd.WorktreeID), attemptsDir)}
	all, _ := as.list()
	for _, a := range all {
		if a.RecipeID == id {
			return true
		}
	}
	return false
}
