package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agentscm/agentscm/internal/spool"
)

// spoolCommands are the spool maintenance commands of the change-capture
// group: inspect (replacing the first-form session listing), quarantine,
// prune-quarantine and compact.
func spoolCommands() []*Command {
	return []*Command{
		{Name: "inspect", Summary: "bounded read-only classification of a spool (pending, deferred, quarantine, attempts)", Run: runSpoolInspect},
		{Name: "quarantine", Summary: "list a spool's quarantined files (read-only)", Run: runSpoolQuarantine},
		{Name: "prune-quarantine", Summary: "delete exactly the named quarantined files", Run: runSpoolPrune},
		{Name: "compact", Summary: "compact acknowledged history into the spool's compaction index", Run: runSpoolCompact},
		{Name: "repair", Summary: "fix what stops delivery and agentscm may fix: an extra hard link, a malformed acknowledgement, a damaged cursor", Run: runSpoolRepair},
	}
}

// spoolArgs parses the common --spool ABS flag, --format when asked, and
// the flags extra registers.
func spoolArgs(env *Env, cmdline, synopsis, description string, args []string, withFormat, allowPos bool, extra func(*flag.FlagSet)) (dir, format string, pos []string, err error) {
	fs := newFlags(env, cmdline, synopsis, description)
	d := fs.String("spool", "", "path of the spool")
	f := new(string)
	*f = "text"
	if withFormat {
		f = formatFlag(fs)
	}
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(env, fs, args, allowPos); err != nil {
		return "", "", nil, err
	}
	if *d == "" {
		return "", "", nil, usagef("--spool is required")
	}
	if !strings.HasPrefix(*d, "/") {
		return "", "", nil, usagef("--spool must be an absolute path, not %q", *d)
	}
	return *d, *f, fs.Args(), nil
}

func runSpoolInspect(ctx context.Context, env *Env, args []string) error {
	var limit *int
	dir, format, _, err := spoolArgs(env, "agentscm change-capture inspect", "--spool ABS [--limit N] [--format text|json]",
		`Classify the spool without changing it: format commit and identities,
authority (ownership and modes), limits and complete physical usage, and
bounded pending, deferred (attempted, not acknowledged), quarantine and
attempt projections, each with an explicit omitted count; from the capture
ledger, the envelopes the Hub permanently refused (reason, sequence, kind)
and, per pending or attempted envelope, its last attempt's outcome. It takes no lock,
works on refused or unsafe spools, reports unknown completeness and grants
no execution authority. It is a snapshot: concurrent writers may change the
spool while it reads.`, args, true, false, func(fs *flag.FlagSet) {
			limit = fs.Int("limit", spool.DefaultProjection, "bound of each projection")
		})
	if err != nil {
		return err
	}
	if *limit <= 0 {
		return usagef("--limit must be positive")
	}
	rep, err := spool.Inspect(dir, *limit)
	if err != nil {
		return err
	}
	view, err := inspectView(env, dir, rep) // inspectview.go
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, view)
	}
	printInspect(env.Stdout, rep)
	printInspectView(env.Stdout, view)
	return nil
}

func printInspect(w io.Writer, r *spool.Report) {
	commit := "no valid managed occurrence format v4 commit"
	if r.Committed {
		commit = fmt.Sprintf("format v%d commit, spool id %s", r.FormatVersion, r.SpoolID)
	}
	fmt.Fprintf(w, "spool %s: %s\n", r.Spool, commit)
	fmt.Fprintf(w, "identity matches commit: %s; authority safe: %s\n", yesNo(r.IdentityMatches), yesNo(r.AuthoritySafe))
	fmt.Fprintf(w, "completeness: %s; execution authority: %s\n", r.Completeness, r.ExecutionAuthority)
	if r.Limits != nil {
		fmt.Fprintf(w, "usage: %d records, %d bytes of %d records, %d bytes (per artifact %d bytes)\n",
			r.Usage.Records, r.Usage.Bytes, r.Limits.Records, r.Limits.Bytes, r.Limits.ArtifactBytes)
		if f := r.UsageFraction; f != nil {
			fmt.Fprintf(w, "usage fraction: records %.1f%%, bytes %.1f%% (the hook warns once per session above %d%%)\n", f.Records*100, f.Bytes*100, 80)
		}
	} else {
		fmt.Fprintf(w, "usage: %d records, %d bytes (limits unreadable)\n", r.Usage.Records, r.Usage.Bytes)
	}
	fmt.Fprintf(w, "above write cap: %s; capture paused: %s; delivery stopped: %s\n", yesNo(r.AboveCap), yesNo(r.Paused), yesNo(r.DeliveryStopped))
	printHealth(w, r.Health)
	fmt.Fprintf(w, "envelopes: %d (acknowledged %d); artifacts: %d; temporary files: %d\n", r.Envelopes, r.Acknowledged, r.Artifacts, r.Temporary)
	c := r.Compaction
	fmt.Fprintf(w, "compaction: generation %d, high seq %d, %d digests, %d receipts, %d replay entries, cleanup pending: %s\n",
		c.Generation, c.HighSeq, c.Digests, c.Receipts, c.Replay, yesNo(c.PendingCleanup))
	fmt.Fprintf(w, "replay index: %d of %d entries, %d of %d bytes; compactions run: %d\n", c.Replay, c.ReplayLimit, c.ReplayBytes, c.ReplayBytesLimit, c.Runs)
	for _, h := range c.History {
		fmt.Fprintf(w, "  compaction %d at %s (%s): %d digests, %d receipts, %d replay entries, %d kept whole; before: %d records, %d bytes\n",
			h.Generation, h.At.Format("2006-01-02T15:04:05Z"), h.Trigger, h.Digests, h.Receipts, h.Replay, h.ReplayKept, h.UsageBefore.Records, h.UsageBefore.Bytes)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	printItems := func(title string, items []spool.PendingItem, total, omitted int) {
		fmt.Fprintf(w, "\n%s: %d (%d omitted)\n", title, total, omitted)
		for _, it := range items {
			fmt.Fprintf(w, "  %6d  %-19s %-16s %s attempts=%d session=%s\n", it.Seq, it.Class, it.Kind, it.Digest, it.Attempts, it.SessionID)
		}
	}
	printItems("pending", r.Pending.Items, r.Pending.Total, r.Pending.Omitted)
	printItems("deferred", r.Deferred.Items, r.Deferred.Total, r.Deferred.Omitted)
	fmt.Fprintf(w, "\nquarantine: %d (%d omitted)\n", r.Quarantine.Total, r.Quarantine.Omitted)
	for _, q := range r.Quarantine.Items {
		fmt.Fprintf(w, "  %s  %d bytes  %s\n", q.Name, q.Bytes, q.Mode)
	}
	fmt.Fprintf(w, "\nattempts: %d (%d omitted)\n", r.Attempts.Total, r.Attempts.Omitted)
	for _, a := range r.Attempts.Items {
		fmt.Fprintf(w, "  %6d  %s  %s %s\n", a.Seq, a.At.Format("2006-01-02T15:04:05Z"), a.Outcome, a.Detail)
	}
	fmt.Fprintf(w, "\ndiagnostics: %d (%d omitted)\n", r.Diagnostics.Total, r.Diagnostics.Omitted)
	for _, d := range r.Diagnostics.Items {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func runSpoolQuarantine(ctx context.Context, env *Env, args []string) error {
	dir, format, _, err := spoolArgs(env, "agentscm change-capture quarantine", "--spool ABS [--format text|json]",
		`List the files recovery moved into the spool's private quarantine
(malformed or ambiguous files). They count against the spool's limits and
are never deleted automatically; delete them with prune-quarantine.
Read-only.`, args, true, false, nil)
	if err != nil {
		return err
	}
	sp, err := spool.OpenReadOnly(dir)
	if err != nil {
		return err
	}
	q, err := sp.Quarantine()
	if err != nil {
		return err
	}
	if format == "json" {
		if q == nil {
			q = []spool.QuarantineEntry{}
		}
		return writeJSON(env.Stdout, map[string]any{"spool": dir, "quarantine": q})
	}
	fmt.Fprintf(env.Stdout, "spool %s: %d quarantined file(s)\n", dir, len(q))
	for _, e := range q {
		fmt.Fprintf(env.Stdout, "%s\t%d\t%s\t%s\n", e.Name, e.Bytes, e.Mode, e.ModTime.Format("2006-01-02T15:04:05Z"))
	}
	return nil
}

func runSpoolPrune(ctx context.Context, env *Env, args []string) error {
	dir, _, names, err := spoolArgs(env, "agentscm change-capture prune-quarantine", "--spool ABS NAME...",
		`Delete exactly the named quarantined files (as listed by quarantine),
under the spool lock. Every name must be present; otherwise nothing is
deleted.`, args, false, true, nil)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usagef("name at least one quarantined file")
	}
	sp, err := spool.Open(dir)
	if err != nil {
		return err
	}
	done, err := sp.PruneQuarantine(ctx, names)
	for _, n := range done {
		fmt.Fprintf(env.Stdout, "deleted %s\n", n)
	}
	return err
}

func runSpoolCompact(ctx context.Context, env *Env, args []string) error {
	dir, format, _, err := spoolArgs(env, "agentscm change-capture compact", "--spool ABS [--format text|json]",
		`Replace acknowledged ordinary envelopes by their exact idempotency
digests and completed, acknowledged action pairs by compact receipts. Usage
records, gap envelopes and managed recipe Pre/Post envelopes stay whole in
the finite replay index; when it is full, compaction refuses and prunes
nothing. Pending envelopes, incomplete action starts and artifacts are never
removed. A malformed acknowledgement stops compaction.`, args, true, false, nil)
	if err != nil {
		return err
	}
	sp, err := spool.Open(dir)
	if err != nil {
		return err
	}
	rep, err := sp.Compact(ctx)
	if err != nil {
		return err
	}
	if format == "json" {
		return writeJSON(env.Stdout, rep)
	}
	if !rep.Changed {
		fmt.Fprintf(env.Stdout, "nothing to compact (generation %d, %d envelopes kept)\n", rep.Generation, rep.Kept)
		return nil
	}
	fmt.Fprintf(env.Stdout, "compacted into generation %d: %d digests, %d receipts, %d replay entries; %d envelopes kept; replay index %d of %d entries\n",
		rep.Generation, rep.Digests, rep.Receipts, rep.Replay, rep.Kept, rep.ReplayTotal, rep.ReplayLimit)
	return nil
}

// printHealth prints the delivery path's checks: the first failing one
// with its fix, or that all pass.
func printHealth(w io.Writer, h spool.Health) {
	if f := h.Failing; f != nil {
		fmt.Fprintf(w, "delivery check failing: %s: %s\n  fix: %s\n", f.Name, f.Problem, f.Fix)
		return
	}
	names := make([]string, 0, len(h.Checks))
	for _, c := range h.Checks {
		names = append(names, c.Name)
	}
	fmt.Fprintf(w, "delivery checks: all %d pass (%s)\n", len(h.Checks), strings.Join(names, ", "))
}

func runSpoolRepair(ctx context.Context, env *Env, args []string) error {
	dir, format, _, err := spoolArgs(env, "agentscm change-capture repair", "--spool ABS [--format text|json]",
		`Fix, under the spool lock, the conditions that stop delivery and that
agentscm may fix without deciding anything for you: rescan the spool under
its lock (the hooks' summary, which may remember a marker as malformed, is
rebuilt from the files by the next lock holder); complete an interrupted
compaction; replace an envelope, acknowledgement or artifact that has a
second hard link by a private copy; move a malformed acknowledgement marker
into the quarantine (its envelope is delivered again; the Hub keeps one copy
per digest); replace a damaged scheduling cursor by a fresh one (the damaged
one is kept in the quarantine). It never changes ownership or modes: inspect
names the chown or chmod for those. Then it runs the delivery path's checks
and exits non-zero when one still fails.`, args, true, false, nil)
	if err != nil {
		return err
	}
	sp, err := spool.OpenAppender(dir)
	if err != nil {
		return repairRefused(env, dir, err)
	}
	rep, err := sp.Repair(ctx)
	if err != nil {
		return repairRefused(env, dir, err)
	}
	h := spoolHealth(env, dir)
	if format == "json" {
		if err := writeJSON(env.Stdout, struct {
			*spool.RepairReport
			Health spool.Health `json:"health"`
		}{rep, h}); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(env.Stdout, "rescanned the spool under its lock (the hooks' summary is rebuilt from the files by the next lock holder)")
		if rep.CompactionsCompleted > 0 {
			fmt.Fprintf(env.Stdout, "completed %d interrupted compaction(s)\n", rep.CompactionsCompleted)
		}
		for _, p := range rep.Relinked {
			fmt.Fprintf(env.Stdout, "replaced %s by a private copy (it had another hard link)\n", p)
		}
		for _, a := range rep.Acknowledgements {
			fmt.Fprintf(env.Stdout, "moved the malformed acknowledgement %s into the quarantine; its envelope is delivered again\n", a)
		}
		if rep.Cursor != "" {
			fmt.Fprintf(env.Stdout, "replaced the damaged cursor (kept in the quarantine as %s)\n", rep.Cursor)
		}
		printHealth(env.Stdout, h)
	}
	if h.Failing != nil {
		return fmt.Errorf("delivery still stops at the %s check: %s", h.Failing.Name, h.Failing.Fix)
	}
	return nil
}

// repairRefused adds the failing check's fix to an error repair could not
// get past (unsafe authority: agentscm never repairs it).
func repairRefused(env *Env, dir string, err error) error {
	if h := spoolHealth(env, dir); h.Failing != nil {
		return fmt.Errorf("%w\ndelivery stopped: %s", err, h.Failing)
	}
	return err
}

// spoolHealth is the delivery path's checks of the spool at dir: the
// spool's own and, with a config directory, the capture layer's intake
// admission check.
func spoolHealth(env *Env, dir string) spool.Health {
	store, err := configStore(env)
	if err != nil {
		return spool.CheckHealth(dir)
	}
	return store.Health(dir)
}
