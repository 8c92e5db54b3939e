package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// compactIndex is the compaction index. Writing generation N as
// index-N-<high>.pending is the durable commit point of a compaction; its
// Cleanup list is then completed (by the compactor or by recovery) and the
// index renamed to .json.
type compactIndex struct {
	Generation uint64        `json:"generation"`
	HighSeq    uint64        `json:"high_seq"`
	Digests    []DigestEntry `json:"digests"`
	Receipts   []Receipt     `json:"receipts"`
	Replay     []ReplayEntry `json:"replay"`
	Cleanup    []cleanupItem `json:"cleanup"`
	// Runs counts every compaction that changed the spool; History keeps
	// the newest maxCompactionHistory of them, so an automatic compaction
	// is always visible afterwards.
	Runs    uint64          `json:"runs,omitempty"`
	History []CompactionRun `json:"history,omitempty"`
}

// maxCompactionHistory bounds the compaction runs the index remembers.
const maxCompactionHistory = 16

// CompactionRun records one compaction that changed the spool.
type CompactionRun struct {
	Generation uint64    `json:"generation"`
	At         time.Time `json:"at"`
	// Trigger is "manual" (change-capture compact) or the policy that ran
	// it, e.g. "policy: records 52% >= 50%".
	Trigger  string `json:"trigger"`
	Digests  int    `json:"digests"`
	Receipts int    `json:"receipts"`
	Replay   int    `json:"replay"`
	// ReplayKept counts envelopes kept whole in the outbox because the
	// replay index was full.
	ReplayKept  int   `json:"replay_kept,omitempty"`
	UsageBefore Usage `json:"usage_before"`
}

// DigestEntry is an acknowledged ordinary envelope replaced by its exact
// idempotency digest.
type DigestEntry struct {
	Seq       uint64             `json:"seq"`
	Digest    string             `json:"digest"`
	Kind      event.Kind         `json:"kind"`
	SessionID string             `json:"session_id"`
	BodyRef   *event.ArtifactRef `json:"body_ref,omitempty"`
}

// Receipt is a completed action pair (start and finish, both acknowledged)
// replaced by a compact retained receipt. StartSeq keeps the exact observed
// order of the start for idempotent replay.
type Receipt struct {
	SessionID    string              `json:"session_id"`
	ToolUseID    string              `json:"tool_use_id"`
	ToolName     string              `json:"tool_name,omitempty"`
	StartSeq     uint64              `json:"start_seq"`
	StartDigest  string              `json:"start_digest"`
	FinishSeq    uint64              `json:"finish_seq"`
	FinishDigest string              `json:"finish_digest"`
	Outcome      string              `json:"outcome,omitempty"`
	StartedAt    time.Time           `json:"started_at"`
	FinishedAt   time.Time           `json:"finished_at"`
	BodyRefs     []event.ArtifactRef `json:"body_refs,omitempty"`
}

// ReplayEntry keeps a usage record, gap envelope or managed recipe Pre/Post
// envelope whole.
type ReplayEntry struct {
	Seq      uint64          `json:"seq"`
	Digest   string          `json:"digest"`
	Envelope json.RawMessage `json:"envelope"`
}

type cleanupItem struct {
	Seq    uint64 `json:"seq"`
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

func (ix *compactIndex) compacted(seq uint64, digest string) bool {
	for _, d := range ix.Digests {
		if d.Seq == seq {
			return d.Digest == digest
		}
	}
	for _, r := range ix.Receipts {
		if r.StartSeq == seq {
			return r.StartDigest == digest
		}
		if r.FinishSeq == seq {
			return r.FinishDigest == digest
		}
	}
	for _, r := range ix.Replay {
		if r.Seq == seq {
			return r.Digest == digest
		}
	}
	return false
}

func (ix *compactIndex) replayBytes() int64 {
	var n int64
	for _, r := range ix.Replay {
		n += int64(len(r.Envelope))
	}
	return n
}

// currentIndex reads the newest compaction index without the lock.
func (s *Spool) currentIndex() (*compactIndex, indexEntry, error) {
	budget := 4096
	names, err := listBounded(filepath.Join(s.dir, compactDir), &budget)
	if err != nil {
		return nil, indexEntry{}, err
	}
	var best indexEntry
	found := false
	for _, n := range names {
		if e, ok := parseIndexName(n); ok && (!found || e.gen > best.gen || e.gen == best.gen && !e.pending) {
			best, found = e, true
		}
	}
	if !found {
		return nil, best, fmt.Errorf("%w: no compaction index", ErrDamaged)
	}
	ix, err := s.readIndex(best.name)
	return ix, best, err
}

// CompactReport says what one compaction did.
type CompactReport struct {
	Generation  uint64 `json:"generation"`
	Digests     int    `json:"digests"`
	Receipts    int    `json:"receipts"`
	Replay      int    `json:"replay"`
	Kept        int    `json:"kept"`
	ReplayTotal int    `json:"replay_total"`
	ReplayLimit int64  `json:"replay_limit"`
	Changed     bool   `json:"changed"`
	// ReplayKept counts acknowledged envelopes that belong in the replay
	// index but stayed whole in the outbox because it is full (only with
	// CompactOptions.KeepReplayWhenFull); ReplayFull is then true.
	ReplayKept int  `json:"replay_kept,omitempty"`
	ReplayFull bool `json:"replay_full,omitempty"`
	// Bounded is true when MaxEnvelopes stopped the pass before the end of
	// the outbox.
	Bounded bool   `json:"bounded,omitempty"`
	Trigger string `json:"trigger,omitempty"`
}

// CompactOptions shape one compaction.
type CompactOptions struct {
	// Trigger is recorded in the index history ("manual" when empty).
	Trigger string
	// MaxEnvelopes, when positive, bounds the pass to the oldest
	// MaxEnvelopes acknowledged envelopes (the hook's automatic compaction
	// keeps its work bounded); pending envelopes other than action starts
	// are then not read at all.
	MaxEnvelopes int
	// KeepReplayWhenFull keeps envelopes that belong in a full replay
	// index whole in the outbox (reported as ReplayKept) and compacts the
	// rest, instead of refusing the whole compaction.
	KeepReplayWhenFull bool
}

// Compact replaces acknowledged ordinary envelopes by their exact
// idempotency digests and completed, acknowledged action pairs by compact
// receipts, keeping usage records, gap envelopes and managed recipe Pre/Post
// envelopes whole in the finite replay index. It never removes pending
// envelopes, incomplete action starts or artifacts, refuses (never prunes)
// when the replay index would exceed its bound, and stops on a malformed
// acknowledgement.
func (s *Spool) Compact(ctx context.Context) (*CompactReport, error) {
	return s.CompactWith(ctx, CompactOptions{})
}

// CompactWith is Compact shaped by o.
func (s *Spool) CompactWith(ctx context.Context, o CompactOptions) (*CompactReport, error) {
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	return s.compactLocked(g.st, o)
}

// Compact is Spool.CompactWith under the held lock. When it changed the
// spool, the Tx's view is rebuilt by a fresh recovery scan, so later
// calls of the same Tx see the compacted spool.
func (ss *Tx) Compact(o CompactOptions) (*CompactReport, error) {
	if err := ss.held(); err != nil {
		return nil, err
	}
	if ss.g.st.fast {
		// A hook's acquisition trusted the summary, which knows only the
		// pending envelopes: compaction selects from the whole retained
		// history, so it takes the full scan first.
		st, err := ss.s.recoverLocked()
		if err != nil {
			return nil, err
		}
		ss.g.st = st
	}
	rep, err := ss.s.compactLocked(ss.g.st, o)
	if err != nil || !rep.Changed {
		return rep, err
	}
	st, err := ss.s.recoverLocked()
	if err != nil {
		return rep, err
	}
	ss.g.st = st
	return rep, nil
}

// SessionUsage is what the held lock's recovery scan found of a spool's
// capacity.
type SessionUsage struct {
	Usage  Usage
	Limits Limits
	// Acked counts retained acknowledgement markers: the acknowledged
	// envelopes a compaction could act on (UnknownAcked when the session
	// trusted the hook summary, which does not list them).
	Acked int
}

// UnknownAcked is SessionUsage.Acked when the number is not known.
const UnknownAcked = int(^uint(0) >> 1)

// Usage returns the spool's complete physical usage, its limits and the
// number of acknowledgement markers, from the held lock's recovery scan (no
// extra I/O).
func (ss *Tx) Usage() (SessionUsage, error) {
	if err := ss.held(); err != nil {
		return SessionUsage{}, err
	}
	st := ss.g.st
	acked := len(st.acks)
	if st.fast {
		// The summary does not list acknowledged envelopes: their number
		// is unknown here, and Compact takes the full scan to find them.
		acked = UnknownAcked
	}
	return SessionUsage{Usage: st.usage, Limits: st.limits, Acked: acked}, nil
}

func (s *Spool) compactLocked(st *state, o CompactOptions) (*CompactReport, error) {
	if o.Trigger == "" {
		o.Trigger = "manual"
	}
	if err := s.checkEvidence(st); err != nil {
		return nil, err
	}
	acked, err := s.ackedSet(st)
	if err != nil {
		return nil, fmt.Errorf("compaction stopped: %w", err)
	}
	old, err := s.readIndex(st.index.name)
	if err != nil {
		return nil, err
	}
	type item struct {
		e   outboxEntry
		env *Envelope
	}
	var items []item
	bounded := false
	read := 0
	for _, e := range st.sortOutbox() {
		if o.MaxEnvelopes > 0 {
			if _, ok := acked[e.seq]; !ok {
				if e.class != classStart {
					continue // pending: never compacted, not read
				}
			} else if read >= o.MaxEnvelopes {
				bounded = true
				break
			} else {
				read++
			}
		}
		env, err := s.readEnvelopeFile(e)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if qerr := s.quarantine(st, outboxDir, e.name); qerr != nil {
				return nil, qerr
			}
			continue
		}
		items = append(items, item{e, env})
	}
	// A tool call's lifecycle pair (tool_start/tool_finish) and the pair of
	// the action a rule makes of it (action_start/action_finish) share the
	// session and tool_use_id; the key keeps them apart.
	type actionKey struct {
		session, id string
		action      bool
	}
	keyOf := func(rec event.Record) actionKey {
		return actionKey{rec.SessionID, rec.ToolUseID, rec.Kind == event.ActionStart || rec.Kind == event.ActionFinish}
	}
	starts := map[actionKey]int{}
	for i, it := range items {
		if it.e.class == classStart && it.env.Record.ToolUseID != "" {
			starts[keyOf(it.env.Record)] = i
		}
	}
	hasStart := func(rec event.Record) bool {
		_, ok := starts[keyOf(rec)]
		return ok && rec.ToolUseID != ""
	}
	isAcked := func(it item) bool { return acked[it.e.seq] == it.env.Digest }
	ix := *old
	ix.Generation = old.Generation + 1
	ix.HighSeq = st.maxSeq
	ix.Cleanup = nil
	ix.Digests = append([]DigestEntry(nil), old.Digests...)
	ix.Receipts = append([]Receipt(nil), old.Receipts...)
	ix.Replay = append([]ReplayEntry(nil), old.Replay...)
	rep := &CompactReport{Bounded: bounded, Trigger: o.Trigger}
	paired := map[int]bool{}
	replayN, replayB := int64(len(ix.Replay)), ix.replayBytes()
	// roomFor reserves replay index room for the raw envelopes, or reports
	// (with KeepReplayWhenFull) that they must stay whole in the outbox.
	roomFor := func(raws ...[]byte) bool {
		n, b := replayN, replayB
		for _, r := range raws {
			n, b = n+1, b+int64(len(r))
		}
		if o.KeepReplayWhenFull && (n > st.limits.ReplayEntries || b > st.limits.ReplayBytes) {
			rep.ReplayFull = true
			return false
		}
		replayN, replayB = n, b
		return true
	}
	for i, it := range items {
		if it.e.class != classFinish || !isAcked(it) {
			continue
		}
		k := keyOf(it.env.Record)
		j, ok := starts[k]
		if !ok || k.id == "" || !isAcked(items[j]) || paired[j] {
			continue
		}
		var managed [][]byte
		for _, x := range []item{items[j], it} {
			if x.env.Record.Managed {
				managed = append(managed, x.env.Raw)
			}
		}
		if len(managed) > 0 && !roomFor(managed...) {
			rep.ReplayKept += 2
			continue
		}
		start, fin := items[j].env.Record, it.env.Record
		r := Receipt{SessionID: k.session, ToolUseID: k.id, ToolName: fin.ToolName, StartSeq: start.Seq, StartDigest: items[j].env.Digest,
			FinishSeq: fin.Seq, FinishDigest: it.env.Digest, Outcome: fin.Outcome, StartedAt: start.ObservedAt, FinishedAt: fin.ObservedAt}
		for _, ref := range []*event.ArtifactRef{start.BodyRef, fin.BodyRef} {
			if ref != nil {
				r.BodyRefs = append(r.BodyRefs, *ref)
			}
		}
		ix.Receipts = append(ix.Receipts, r)
		paired[i], paired[j] = true, true
		rep.Receipts++
		// Managed recipe Pre/Post envelopes stay whole beside the receipt.
		for _, x := range []item{items[j], it} {
			if x.env.Record.Managed {
				ix.Replay = append(ix.Replay, ReplayEntry{Seq: x.e.seq, Digest: x.env.Digest, Envelope: x.env.Raw})
				rep.Replay++
			}
		}
	}
	for i, it := range items {
		sel := paired[i]
		if !sel && isAcked(it) {
			rec := it.env.Record
			switch {
			case it.e.class == classStart:
				// An incomplete action start stays.
			case it.e.class == classFinish && hasStart(rec):
				// Its start is outstanding: keep the pair together.
			case it.e.class == classPause || it.e.class == classGap || it.e.class == classOrder || rec.Kind == event.KindUsage || rec.Managed:
				if !roomFor(it.env.Raw) {
					rep.ReplayKept++
					break
				}
				ix.Replay = append(ix.Replay, ReplayEntry{Seq: rec.Seq, Digest: it.env.Digest, Envelope: it.env.Raw})
				rep.Replay++
				sel = true
			default:
				ix.Digests = append(ix.Digests, DigestEntry{Seq: rec.Seq, Digest: it.env.Digest, Kind: rec.Kind, SessionID: rec.SessionID, BodyRef: rec.BodyRef})
				rep.Digests++
				sel = true
			}
		}
		if sel {
			ix.Cleanup = append(ix.Cleanup, cleanupItem{Seq: it.e.seq, Name: it.e.name, Digest: it.env.Digest})
		} else {
			rep.Kept++
		}
	}
	rep.ReplayTotal, rep.ReplayLimit = len(ix.Replay), st.limits.ReplayEntries
	rep.Generation = old.Generation
	if len(ix.Cleanup) == 0 {
		return rep, nil // nothing new; the cursor keeps working over compacted history
	}
	if int64(len(ix.Replay)) > st.limits.ReplayEntries || ix.replayBytes() > st.limits.ReplayBytes {
		return nil, fmt.Errorf("%w: it would hold %d entries / %d bytes, bound %d entries / %d bytes; export the spool (agentscm change-capture export --spool %s --destination NEW) or configure a larger one",
			ErrReplayIndexFull, len(ix.Replay), ix.replayBytes(), st.limits.ReplayEntries, st.limits.ReplayBytes, s.dir)
	}
	ix.Runs = old.Runs + 1
	ix.History = append(append([]CompactionRun(nil), old.History...), CompactionRun{
		Generation: ix.Generation, At: time.Now().UTC(), Trigger: o.Trigger, Digests: rep.Digests,
		Receipts: rep.Receipts, Replay: rep.Replay, ReplayKept: rep.ReplayKept, UsageBefore: st.usage,
	})
	if len(ix.History) > maxCompactionHistory {
		ix.History = ix.History[len(ix.History)-maxCompactionHistory:]
	}
	data := encodeFrame(typeIndex, fmt.Sprintf("%d-%d", ix.Generation, ix.HighSeq), mustJSON(ix))
	if len(data) > maxIndexBytes {
		return nil, fmt.Errorf("%w: the compaction index would exceed %d bytes", ErrReplayIndexFull, maxIndexBytes)
	}
	if err := admitAs(st.limits, st.usage, Usage{1, int64(len(data))}, admitCompaction); err != nil {
		return nil, fmt.Errorf("compaction needs room for its new index: %w", err)
	}
	entry := indexEntry{name: indexName(ix.Generation, ix.HighSeq, true), gen: ix.Generation, high: ix.HighSeq, pending: true}
	if err := s.writeNew(filepath.Join(s.dir, compactDir), entry.name, data, "compact.index"); err != nil {
		return nil, fmt.Errorf("write compaction index: %w", err)
	}
	s.fail("compact.committed")
	if err := s.finishCompaction(&ix, entry); err != nil {
		return nil, err
	}
	rep.Generation = ix.Generation
	rep.Changed = true
	return rep, nil
}

// finishCompaction completes the cleanup a committed (.pending) index names:
// it removes exactly the envelopes and acknowledgements whose digests it
// recorded, renames the index to .json and removes superseded indexes. It is
// idempotent, so recovery can run it after a crash at any step.
func (s *Spool) finishCompaction(ix *compactIndex, e indexEntry) error {
	out := filepath.Join(s.dir, outboxDir)
	acks := filepath.Join(s.dir, acksDir)
	for i, c := range ix.Cleanup {
		p := filepath.Join(out, filepath.Base(c.Name))
		if b, err := fsutil.ReadFileNoFollow(p, maxEnvelopeBytes+maxHeaderBytes); err == nil {
			if f, err := decodeFrame(b); err == nil && envelopeDigest(f.sum) == c.Digest {
				if err := os.Remove(p); err != nil {
					return fmt.Errorf("compaction cleanup: %w", err)
				}
			}
		}
		if seqAck, err := s.readAck(c.Seq, ackName(c.Seq)); err == nil && seqAck == c.Digest {
			if err := os.Remove(filepath.Join(acks, ackName(c.Seq))); err != nil {
				return fmt.Errorf("compaction cleanup: %w", err)
			}
		}
		if i == 0 {
			s.fail("compact.mid-cleanup")
		}
	}
	if err := s.syncDir(out); err != nil {
		return err
	}
	if err := s.syncDir(acks); err != nil {
		return err
	}
	s.fail("compact.cleaned")
	dir := filepath.Join(s.dir, compactDir)
	final := indexName(e.gen, e.high, false)
	if err := os.Rename(filepath.Join(dir, e.name), filepath.Join(dir, final)); err != nil {
		return fmt.Errorf("finish compaction: %w", err)
	}
	if err := s.syncDir(dir); err != nil {
		return err
	}
	s.fail("compact.renamed")
	budget := 4096
	names, err := listBounded(dir, &budget)
	if err != nil {
		return err
	}
	for _, n := range names {
		if o, ok := parseIndexName(n); ok && o.gen < e.gen {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return s.syncDir(dir)
}
