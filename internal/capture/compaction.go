package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// Automatic compaction and capacity warning constants.
const (
	// AutoCompactMax bounds the acknowledged envelopes one automatic
	// compaction reads, so a hook's extra work stays bounded.
	AutoCompactMax = 1024
	// autoCompactMinBatch: below this many acknowledged retained envelopes
	// the hook does not compact (a compaction rewrites the whole index).
	autoCompactMinBatch = 64
	// UsageWarnPercent: above it the hook warns once per session.
	UsageWarnPercent = 80
)

// maintain runs after delivery, under the hook's held spool lock: it
// applies the binding's compaction policy (bounded work) and warns once per
// session when usage passes UsageWarnPercent or automatic compaction could
// not make room. Warnings go to res.Warning; nothing here fails the hook.
func maintain(store StateDir, ss *spool.Tx, bd *binding.Binding, session string, res *HookResult) {
	su, err := ss.Usage()
	if err != nil {
		return
	}
	frac, bound := spool.FractionsOf(su.Usage, su.Limits).Max()
	if pol := bd.Compaction; pol != nil && frac*100 >= float64(pol.ThresholdPercent) && su.Acked >= autoCompactMinBatch {
		rep, err := ss.Compact(spool.CompactOptions{
			Trigger:            fmt.Sprintf("policy: %s at %.0f%% >= %d%%", bound, frac*100, pol.ThresholdPercent),
			MaxEnvelopes:       AutoCompactMax,
			KeepReplayWhenFull: true,
		})
		switch {
		case err != nil:
			store.warnOnce(bd.Spool, session, "compact-failed", res, fmt.Sprintf(
				"automatic compaction of spool %s failed: %v; run agentscm change-capture inspect --spool %s",
				bd.Spool, err, bd.Spool))
		case rep.ReplayFull:
			store.warnOnce(bd.Spool, session, "replay-full", res, fmt.Sprintf(
				"automatic compaction kept %d gap/usage envelopes whole: the spool's replay index is full (%d of %d entries, never pruned); give the spool a larger one (agentscm change-capture enable --root %s --max-replay-entries N --max-replay-bytes N) or copy the spool elsewhere and start a new one",
				rep.ReplayKept, rep.ReplayTotal, rep.ReplayLimit, bd.Root))
		}
		if rep != nil && rep.Changed {
			res.Compacted = rep
		}
		if su, err = ss.Usage(); err != nil {
			return
		}
	}
	usageWarning(store, bd, session, su.Usage, su.Limits, res)
}

// usageWarning gives the once-per-session warning that the spool's usage
// passed UsageWarnPercent of a limit, naming the commands that help.
func usageWarning(store StateDir, bd *binding.Binding, session string, u spool.Usage, l spool.Limits, res *HookResult) {
	frac, bound := spool.FractionsOf(u, l).Max()
	if frac*100 < UsageWarnPercent {
		return
	}
	limit, used := l.Records, u.Records
	if bound == "bytes" {
		limit, used = l.Bytes, u.Bytes
	}
	help := fmt.Sprintf("run agentscm change-capture compact --spool %s, turn on automatic compaction (agentscm change-capture enable --root %s --auto-compact %d), or raise the limit (agentscm change-capture enable --root %s --max-records N --max-bytes N)",
		bd.Spool, bd.Root, binding.DefaultCompactThreshold, bd.Root)
	if bd.Compaction != nil {
		help = fmt.Sprintf("automatic compaction cannot free more (pending, deferred or protected records); check delivery with agentscm change-capture inspect --spool %s, or raise the limit (agentscm change-capture enable --root %s --max-records N --max-bytes N)", bd.Spool, bd.Root)
	}
	store.warnOnce(bd.Spool, session, "usage-80", res, fmt.Sprintf("capture spool at %.0f%% of its %s limit (%d of %d); capture pauses at the limit: %s",
		frac*100, bound, used, limit, help))
}

// warnOnce sets res.Warning to msg unless this session of the spool was
// already warned of kind: a marker file created exclusively under
// <config>/agentscm/capture-sessions/<spool hash>.warned/ records it.
func (s StateDir) warnOnce(spoolDir, session, kind string, res *HookResult, msg string) {
	if session == "" || strings.ContainsAny(session, `/\`) || session == "." || session == ".." {
		return
	}
	sum := sha256.Sum256([]byte(spoolDir))
	dir := filepath.Join(s.Dir, sessionsDir, hex.EncodeToString(sum[:8])+".warned")
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return
	}
	err := fsutil.WriteNew(filepath.Join(dir, kind+"-"+session), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), fsutil.FileMode)
	if errors.Is(err, fs.ErrExist) {
		return
	}
	if res.Warning != "" {
		msg = res.Warning + "; " + msg
	}
	res.Warning = msg
}

// Deferral reasons recorded on deferred facts.
const (
	DeferHubUnreachable = "hub_unreachable"
	DeferHubRefused     = "hub_refused"
	// DeferTargetChanged: the Hub resolves the session to a later
	// generation of the Work the hook received the event under; the fact
	// keeps the target at receipt.
	DeferTargetChanged = "target_changed"
	// DeferWorkChanged: a brand-new session's event was received while
	// the checkout had one Work, and the Hub resolves the session to
	// another one now (a work start since): the event keeps the Work it
	// was received under, as a deferred fact with a gap there.
	DeferWorkChanged = "work_changed"
)

// resolveSession asks hub for the exact target of a native session, except
// for a session id the Hub refuses (api.ValidSessionID, the Hub's own rule):
// that is refused here without a request, with reason bad_session_id, so
// its facts stay local under that named reason.
func resolveSession(ctx context.Context, hub Hub, worktree, session string) (Target, error) {
	if e := api.CheckSessionID("session_id", session); e != nil {
		return Target{}, e
	}
	return hub.Resolve(ctx, worktree, session)
}

// DeferReason classifies why no exact target resolved: the Hub's refusal
// reason (no_current_work, work_not_accepting, ...) or code when it
// answered, else hub_unreachable.
func DeferReason(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		if ae.Reason != "" {
			return ae.Reason
		}
		if ae.Code != "" {
			return DeferHubRefused + ":" + ae.Code
		}
		return DeferHubRefused
	}
	return DeferHubUnreachable
}

// DescribeDeferReason words a deferral reason for people.
func DescribeDeferReason(r string) string {
	switch {
	case r == DeferHubUnreachable:
		return "the Hub was unreachable when the event was captured"
	case r == api.ReasonNoCurrentWork:
		return "no current Work for this worktree (agentscm work start)"
	case r == DeferTargetChanged:
		return "the Work was taken over after the hook received the event; it keeps the generation it was received under"
	case r == DeferWorkChanged:
		return "the checkout started another Work after the hook received the event; it keeps the Work it was received under"
	case r == api.ReasonBadSessionID:
		return "the agent's session id is not one the Hub accepts (" + api.SessionIDRule + "), so the hook never asked the Hub: its facts stay local"
	case r == "unrecorded":
		return "kept before agentscm recorded deferral reasons"
	case strings.HasPrefix(r, DeferHubRefused):
		return "the Hub refused the target (" + strings.TrimPrefix(strings.TrimPrefix(r, DeferHubRefused), ":") + ")"
	}
	return "the Hub refused the target (" + r + ")"
}

// SpoolSummary is what status shows of a binding's spool: usage against
// each limit, the compaction policy and history, and the facts that stayed
// local as deferred facts, by reason.
type SpoolSummary struct {
	Limits   spool.Limits    `json:"limits"`
	Usage    spool.Usage     `json:"usage"`
	Fraction spool.Fractions `json:"usage_fraction"`
	Paused   bool            `json:"capture_paused"`
	// Unacknowledged counts retained envelopes the Hub has not
	// acknowledged (deferred facts and local-only records included).
	Unacknowledged int                       `json:"unacknowledged"`
	Compactions    uint64                    `json:"compactions"`
	LastCompact    *spool.CompactionRun      `json:"last_compaction,omitempty"`
	Deferred       DeferredSummary           `json:"deferred"`
	Problems       []string                  `json:"problems,omitempty"`
	Compaction     *binding.CompactionPolicy `json:"compaction_policy"`
	ReplayIndex    map[string]int64          `json:"replay_index"`
	// Health is the delivery path's checks (spool.Health; with the
	// intake admission check when read through StateDir.SummarizeSpool).
	Health spool.Health `json:"health"`
}

// DeferredSummary counts deferred facts.
type DeferredSummary struct {
	Total    int              `json:"total"`
	Sessions int              `json:"sessions"`
	Reasons  []DeferredReason `json:"reasons"`
}

// DeferredReason is one reason and how many facts it kept local.
type DeferredReason struct {
	Reason      string `json:"reason"`
	Description string `json:"description"`
	Facts       int    `json:"facts"`
	Sessions    int    `json:"sessions"`
}

// SummarizeSpool reads the spool of b without locking or changing it.
func SummarizeSpool(b *binding.Binding) (*SpoolSummary, error) { return StateDir{}.SummarizeSpool(b) }

// SummarizeSpool is the package function with the capture layer's health
// checks of this config directory (intake admission) too.
func (s StateDir) SummarizeSpool(b *binding.Binding) (*SpoolSummary, error) {
	rep, err := spool.Inspect(b.Spool, 1)
	if err != nil {
		return nil, err
	}
	s.CheckSpool(b.Spool, rep)
	out := &SpoolSummary{Usage: rep.Usage, Paused: rep.Paused, Problems: rep.Problems, Compaction: b.Compaction, Health: rep.Health,
		Compactions: rep.Compaction.Runs, Unacknowledged: rep.Pending.Total + rep.Deferred.Total}
	if rep.Limits != nil {
		out.Limits = *rep.Limits
	}
	if rep.UsageFraction != nil {
		out.Fraction = *rep.UsageFraction
	}
	out.ReplayIndex = map[string]int64{"entries": int64(rep.Compaction.Replay), "entries_limit": rep.Compaction.ReplayLimit,
		"bytes": rep.Compaction.ReplayBytes, "bytes_limit": rep.Compaction.ReplayBytesLimit}
	if n := len(rep.Compaction.History); n > 0 {
		last := rep.Compaction.History[n-1]
		out.LastCompact = &last
	}
	if !rep.Committed {
		out.Deferred.Reasons = []DeferredReason{}
		return out, nil
	}
	sp, err := spool.OpenReadOnly(b.Spool)
	if err != nil {
		return nil, err
	}
	recs, err := sp.Events()
	if err != nil {
		return nil, err
	}
	type agg struct {
		facts    int
		sessions map[string]bool
	}
	by := map[string]*agg{}
	all := map[string]bool{}
	for _, r := range recs {
		if !r.Deferred {
			continue
		}
		reason := r.DeferredReason
		if reason == "" {
			reason = "unrecorded"
		}
		a := by[reason]
		if a == nil {
			a = &agg{sessions: map[string]bool{}}
			by[reason] = a
		}
		a.facts++
		a.sessions[r.SessionID] = true
		all[r.SessionID] = true
		out.Deferred.Total++
	}
	out.Deferred.Sessions = len(all)
	out.Deferred.Reasons = []DeferredReason{}
	for r, a := range by {
		out.Deferred.Reasons = append(out.Deferred.Reasons, DeferredReason{Reason: r, Description: DescribeDeferReason(r), Facts: a.facts, Sessions: len(a.sessions)})
	}
	sort.Slice(out.Deferred.Reasons, func(i, j int) bool {
		return out.Deferred.Reasons[i].Facts > out.Deferred.Reasons[j].Facts
	})
	return out, nil
}
