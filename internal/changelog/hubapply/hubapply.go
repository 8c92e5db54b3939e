// Package hubapply decides and fetches what `agentscm changelog apply
// --from-hub` applies: Plan chooses, from a Work's listing alone, the
// increments 0..to of one checkout's sequence (or refuses, naming the
// increment that carries a merged target), Fetch downloads them, each
// verified against its digest, and checks that they form one chain, and
// FindResult looks in the later increments for the result of the call a
// resumed conversation continues after. The command line applies the
// fetched chain and prints.
package hubapply

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// Getter downloads one of a Work's increments and verifies it against its
// digest (client.Conn is one).
type Getter interface {
	GetIncrement(ctx context.Context, work string, in api.IncrementInfo) ([]byte, error)
}

// Request is what an apply from the Hub asks for.
type Request struct {
	Work     string // the Work whose listing is planned
	Worktree string // the checkout's sequence; "" when the Work holds one
	To       int    // the position to apply up to
	Root     string // the checkout applied onto (named in refusals)
}

// Plan is what an apply downloads: the increments up to the target and
// the later ones a resumed conversation may read its call's result from.
type Plan struct {
	Work string
	To   int
	// Apply are the increments 0..To of the sequence, in position order,
	// the last at To (earlier positions may come merged into later ones).
	Apply []api.IncrementInfo
	// Later are the sequence's increments after To, in position order.
	Later []api.IncrementInfo
}

// AmbiguousWorktreeError refuses a Work that holds the changelogs of
// several checkouts when no worktree was named.
type AmbiguousWorktreeError struct {
	Work string
	// Sequences describe each checkout's sequence: "ID (positions a..b)".
	Sequences []string
}

func (e *AmbiguousWorktreeError) Error() string {
	return fmt.Sprintf("work %s holds the changelogs of %d checkouts: %s; pass --worktree ID", e.Work, len(e.Sequences), strings.Join(e.Sequences, ", "))
}

// pickSequence returns the increments of one worktree's sequence in a
// Work's listing: the one named, else the only one.
func pickSequence(list api.IncrementList, worktree string) ([]api.IncrementInfo, error) {
	var names []string
	by := map[string][]api.IncrementInfo{}
	for _, in := range list.Increments {
		if _, ok := by[in.WorktreeID]; !ok {
			names = append(names, in.WorktreeID)
		}
		by[in.WorktreeID] = append(by[in.WorktreeID], in)
	}
	switch {
	case worktree != "":
		return by[worktree], nil
	case len(names) > 1:
		e := &AmbiguousWorktreeError{Work: list.WorkID}
		for _, n := range names {
			e.Sequences = append(e.Sequences, fmt.Sprintf("%s (positions %d..%d)", n, by[n][0].Position, by[n][len(by[n])-1].Position))
		}
		return nil, e
	case len(names) == 1:
		return by[names[0]], nil
	}
	return nil, nil
}

// PlanApply decides from a Work's listing which increments an apply up to
// req.To downloads. It refuses (changelog.ErrNoIncrement) when the
// sequence lacks a position up to req.To, naming the later increment that
// carries req.To when the Hub merged it, and with *AmbiguousWorktreeError
// when the listing holds several checkouts and none was named. It does no
// I/O.
func PlanApply(list api.IncrementList, req Request) (*Plan, error) {
	seq, err := pickSequence(list, req.Worktree)
	if err != nil {
		return nil, err
	}
	p := &Plan{Work: req.Work, To: req.To}
	var carrier *api.IncrementInfo // the increment that carries a merged target
	for i, in := range seq {
		if in.Position <= req.To {
			p.Apply = append(p.Apply, in)
			continue
		}
		if carrier == nil {
			carrier = &seq[i]
		}
		p.Later = append(p.Later, in)
	}
	slices.SortFunc(p.Later, func(x, y api.IncrementInfo) int { return cmp.Compare(x.Position, y.Position) })
	if n := len(p.Apply); n > 0 && p.Apply[n-1].Position == req.To {
		return p, nil
	}
	have := "none"
	if n := len(seq); n > 0 {
		have = fmt.Sprintf("positions %d..%d", seq[0].Position, seq[n-1].Position)
	}
	if carrier != nil && (len(p.Apply) == 0 || p.Apply[len(p.Apply)-1].Position < req.To) {
		prev := -1
		if len(p.Apply) > 0 {
			prev = p.Apply[len(p.Apply)-1].Position
		}
		return nil, fmt.Errorf("%w: position %d has no increment of its own on the Hub: work %s's increment %d carries positions %d..%d (the Hub refused them; agentscm changelog list --root %s says why); apply --to %d, or --to %d locally",
			changelog.ErrNoIncrement, req.To, req.Work, carrier.Position, prev+1, carrier.Position, req.Root, carrier.Position, req.To)
	}
	return nil, fmt.Errorf("%w: work %s on the Hub holds %s, not all of 0..%d", changelog.ErrNoIncrement, req.Work, have, req.To)
}

// Fetched is a plan's increments downloaded and checked.
type Fetched struct {
	Paths     []string // the increments' files, in order
	Positions []int
	Metas     []*incmeta.Meta
	Bytes     int64 // downloaded
	// Target is the metadata of the increment at the plan's To.
	Target *incmeta.Meta
	// Roots is the union of the increments' capture roots: an uploaded
	// form leaves out a conversation root it shares nothing of, so the
	// target's alone may lack one that earlier increments hold.
	Roots *incmeta.Meta
	// Merged lists the positions the Hub merged into later increments.
	Merged []incmeta.Merged
}

// Fetch downloads the plan's increments into dir (each verified against
// its digest by g), reads each one's metadata once and checks that they
// form one chain from position 0 (positions the Hub merged into a later
// increment leave holes: each increment carries the positions since the
// previous one). An unreadable increment is changelog.ErrUnreadableArchive.
func Fetch(ctx context.Context, g Getter, p *Plan, dir string) (*Fetched, error) {
	f := &Fetched{Roots: &incmeta.Meta{}}
	for _, in := range p.Apply {
		b, err := g.GetIncrement(ctx, p.Work, in)
		if err != nil {
			return nil, fmt.Errorf("download increment %d of work %s: %w", in.Position, p.Work, err)
		}
		path := filepath.Join(dir, changelog.IncrementName(in.Position))
		if err := fsutil.WriteNew(path, b, fsutil.FileMode); err != nil {
			return nil, err
		}
		f.Paths = append(f.Paths, path)
		f.Positions = append(f.Positions, in.Position)
		f.Bytes += int64(len(b))
	}
	seen := map[string]bool{}
	for i, path := range f.Paths {
		m, err := changelog.ReadMeta(path)
		if err != nil {
			return nil, fmt.Errorf("increment %d of work %s: %w", f.Positions[i], p.Work, err)
		}
		f.Metas = append(f.Metas, m)
		f.Merged = append(f.Merged, m.Merged...)
		for _, r := range m.Roots {
			if !seen[r.Name] {
				seen[r.Name] = true
				f.Roots.Roots = append(f.Roots.Roots, r)
			}
		}
	}
	if err := changelog.CheckChain(f.Metas); err != nil {
		return nil, fmt.Errorf("work %s on the Hub: %w", p.Work, err)
	}
	f.Target = f.Metas[len(f.Metas)-1]
	return f, nil
}

// ConversationNote explains why the target, as downloaded from the Hub,
// holds no conversation to resume: it was withheld by the capturing
// checkout's conversation mode, or there is no conversation root ("" when
// it holds one).
func ConversationNote(target *incmeta.Meta) string {
	if target.Conversation == incmeta.ConvWithheld {
		mode := target.ConversationMode
		if mode == "" {
			mode = "metadata-only"
		}
		return fmt.Sprintf("the conversation was not shared: the checkout that captured it was in %s mode, so its transcripts stayed on that machine (only shared-conversation mode uploads them, redacted); the files are restored, there is no conversation to resume", mode)
	}
	for _, r := range target.Roots {
		if changelog.IsConversationRoot(r.Name, r.Path) {
			return ""
		}
	}
	return "the increments hold no conversation (the changelog was enabled without a transcript root); the files are restored, there is no conversation to resume"
}

// Result is where a resumed conversation's copy of the transcript comes
// from when the rewound copy lacks the call's result.
type Result struct {
	// Pre is the later copy of the transcript to resume from (nil: the
	// rewound copy).
	Pre []byte
	// FromPosition is the increment whose copy holds the result (0: none).
	FromPosition int
	// Note says why the conversation resumes without the result ("" when
	// it has it).
	Note string
	// Err is why the later increments could not be read (Note says so too).
	Err error
}

// FindResult looks for the target call's result in the transcript copies
// the plan's later increments store, downloading them in order only as
// needed (at most changelog.MaxLaterIncrements). disk is the rewound copy
// of the transcript (nil: none could be read) and f the fetched chain.
func FindResult(ctx context.Context, g Getter, p *Plan, f *Fetched, disk []byte) Result {
	target := f.Target
	// Later increments store the bytes appended since the previous one:
	// they extend the copy the apply left.
	local, ok := changelog.TranscriptLocalSize(f.Paths, target.SessionID+".jsonl")
	if !ok {
		local = int64(len(disk))
	}
	i := 0
	next := func(ctx context.Context) (*changelog.LaterIncrement, error) {
		if i >= len(p.Later) {
			return nil, nil
		}
		in := p.Later[i]
		i++
		b, err := g.GetIncrement(ctx, p.Work, in)
		if err != nil {
			return nil, fmt.Errorf("download increment %d of work %s: %w", in.Position, p.Work, err)
		}
		return &changelog.LaterIncrement{Position: in.Position, Data: b}, nil
	}
	later, err := changelog.FindResultTranscript(ctx, next, target.SessionID, target.ToolUseID, disk, local)
	return resultOf(p, later, err)
}

// resultOf decides what a resumed conversation continues from, given the
// later copy found (nil: none) or the error the search ended on.
func resultOf(p *Plan, later *changelog.LaterTranscript, err error) Result {
	switch {
	case err != nil:
		return Result{Err: err, Note: fmt.Sprintf("call %d's result could not be read from the later increments of work %s (%v); the conversation resumes without it", p.To, p.Work, err)}
	case later == nil:
		return Result{Note: fmt.Sprintf("no later increment of work %s stores call %d's result (%d after it on the Hub, at most %d read; a later tool call's capture stores it); the conversation resumes without it", p.Work, p.To, len(p.Later), changelog.MaxLaterIncrements)}
	case !later.HoldsResult:
		// The rewound copy lacks even the call (the host wrote its line
		// after the hook): a later copy holds it.
		return Result{Pre: later.Data, Note: fmt.Sprintf("no later increment of work %s stores call %d's result; the conversation resumes after the call, without its result (the call from position %d)", p.Work, p.To, later.Position)}
	}
	return Result{Pre: later.Data, FromPosition: later.Position}
}
