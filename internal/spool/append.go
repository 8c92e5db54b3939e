package spool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Envelope is one retained record as the outbox holds it.
type Envelope struct {
	// Digest is the exact envelope digest ("sha256:<hex>") that an
	// acknowledgement marker must carry.
	Digest string `json:"digest"`
	// Class is event, action_start, action_finish, capture_interrupted,
	// order_pause or gap.
	Class  string       `json:"class"`
	Record event.Record `json:"record"`
	// Raw is the exact envelope body the digest covers.
	Raw json.RawMessage `json:"-"`
}

var classNames = map[byte]string{
	classEvent:  "event",
	classStart:  "action_start",
	classFinish: "action_finish",
	classPause:  "capture_interrupted",
	classOrder:  "order_pause",
	classGap:    "gap",
}

func priorityClass(c byte) bool {
	return c == classFinish || c == classPause || c == classOrder || c == classGap
}

func decodeEnvelopeBody(b []byte) (*Envelope, error) {
	var r event.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: envelope: %v", errMalformed, err)
	}
	if r.Seq == 0 || r.Kind == "" || r.Body != nil || (r.Kind == event.KindGap) != (r.Gap != nil) {
		return nil, fmt.Errorf("%w: envelope fields", errMalformed)
	}
	return &Envelope{Record: r, Raw: b}, nil
}

func bodyEmpty(b *event.Body) bool {
	return b == nil || b.Prompt == "" && len(b.ToolInput) == 0 && len(b.ToolResponse) == 0 && b.Error == "" && b.Message == ""
}

// Append durably retains rec, assigning the next sequence number (rec.Seq)
// under the spool lock, and returns it. Under quota pressure an ordinary
// record is refused with an error wrapping ErrCapturePaused after a
// capture_interrupted gap was recorded; a record whose content cannot be
// retained is kept with availability "missing" plus a content_not_retained
// gap. A non-zero sequence with an error means the record was retained but
// something after it (a gap) was not.
func (s *Spool) Append(rec *event.Record) (uint64, error) {
	return s.AppendContext(context.Background(), rec)
}

// AppendContext is Append bounded by ctx (lock wait).
func (s *Spool) AppendContext(ctx context.Context, rec *event.Record) (uint64, error) {
	g, err := s.acquireFast(ctx, s.lockWait)
	if err != nil {
		return 0, err
	}
	defer g.release()
	return s.appendLocked(g.st, rec)
}

// AppendTo is the hook's one-shot path: it opens the committed spool at dir
// with the same authority checks as Open and appends rec under a single
// guarded lock acquisition, so that identity revalidation and the recovery
// scan run once per process instead of twice.
func AppendTo(ctx context.Context, dir string, rec *event.Record) (uint64, error) {
	s, err := OpenAppender(dir)
	if err != nil {
		return 0, err
	}
	return s.AppendContext(ctx, rec)
}

func (s *Spool) appendLocked(st *state, rec *event.Record) (uint64, error) {
	if rec.Kind == "" {
		return 0, errors.New("append: record has no kind")
	}
	if (rec.Kind == event.KindGap) != (rec.Gap != nil) {
		return 0, errors.New("append: a gap record needs gap details, and only a gap record has them")
	}
	class := byte(classEvent)
	switch rec.Kind {
	case event.ToolStart, event.ActionStart:
		class = classStart
	case event.ToolFinish, event.ActionFinish:
		class = classFinish
	case event.KindGap:
		class = classGap
		if rec.Gap.Kind == event.GapCaptureInterrupted {
			class = classPause
		}
	}
	orderPause := false
	if class == classStart && st.activeStarts >= st.limits.ActiveOrders {
		// The active order ledger is full: keep the lifecycle fact as an
		// ordinary record and record one priority pause marker.
		class = classEvent
		orderPause = st.lastOrderPause <= st.lastStart
	}
	priority := priorityClass(class)

	r := *rec
	r.Body, r.BodyRef = nil, nil
	var art []byte
	var artHex, missing string
	if !bodyEmpty(rec.Body) {
		bb, err := json.Marshal(rec.Body)
		if err != nil {
			return 0, fmt.Errorf("encode body: %w", err)
		}
		sum := sha256.Sum256(bb)
		artHex = hex.EncodeToString(sum[:])
		art = encodeFrame(typeArtifact, artHex, bb)
		r.BodyRef = &event.ArtifactRef{Digest: "sha256:" + artHex, Bytes: int64(len(bb)), MediaType: "application/json", Retention: event.RetentionClass(rec.CaptureMode, int64(len(bb))), Availability: event.AvailabilityRetained}
		if int64(len(bb)) > st.limits.ArtifactBytes {
			missing = event.GapReasonArtifactLimit
		}
	}
	r.Seq = st.maxSeq + 1
	env := encodeEnvelope(&r, class)
	need := Usage{Records: 1, Bytes: int64(len(env))}
	artNeed := Usage{}
	artExists := art != nil && s.artifactExists(st, artHex, int64(len(art)))
	if art != nil && missing == "" && !artExists {
		artNeed = Usage{Records: 1, Bytes: int64(len(art))}
	}
	if err := admit(st.limits, st.usage, Usage{need.Records + artNeed.Records, need.Bytes + artNeed.Bytes}, priority); err != nil {
		var qe *QuotaError
		errors.As(err, &qe)
		if art != nil && missing == "" && admit(st.limits, st.usage, need, priority) == nil {
			missing = qe.Bound
		} else if !priority {
			if perr := s.pause(st, rec, qe.Bound, err.Error()); errors.Is(perr, errPausedBefore) {
				// Capture was already paused (by another record, perhaps
				// of another target): no gap of this spool names this
				// record; the caller keeps its loss (capture's interrupted
				// slot) for a gap under its own target.
				return 0, fmt.Errorf("%w: %w; capture is already paused, so no new gap names this record (%w)", ErrCapturePaused, err, ErrGapNotRecorded)
			} else if perr != nil {
				return 0, fmt.Errorf("%w: %w; recording the capture_interrupted gap failed too (%w): %v", ErrCapturePaused, err, ErrGapNotRecorded, perr)
			}
			return 0, fmt.Errorf("%w: %w; a capture_interrupted gap records it", ErrCapturePaused, err)
		} else {
			return 0, fmt.Errorf("append %s: %w", rec.Kind, err)
		}
	}
	if art != nil && missing == "" && !artExists {
		name := artifactName(artHex, int64(len(art)))
		if err := s.writeNew(filepath.Join(s.dir, artifactsDir), name, art, "append.artifact"); err != nil {
			st.suspect = true // the file may exist without being counted
			missing = event.GapReasonWriteFailed
			if errors.Is(err, syscall.ENOSPC) {
				missing = event.GapReasonNoSpace
			}
		} else {
			st.artifacts[artHex] = int64(len(art))
			st.usage.Records++
			st.usage.Bytes += int64(len(art))
		}
	}
	if missing != "" {
		r.BodyRef.Availability = event.AvailabilityMissing
	}
	seq, err := s.writeRecord(st, &r, class, priority)
	if err != nil {
		if !priority {
			reason := event.GapReasonWriteFailed
			if errors.Is(err, syscall.ENOSPC) {
				reason = event.GapReasonNoSpace
			} else if errors.Is(err, syscall.EIO) {
				reason = event.GapReasonIOError
			}
			if perr := s.pause(st, rec, reason, err.Error()); perr != nil {
				return 0, fmt.Errorf("%w: %w; recording the capture_interrupted gap failed too (%w): %v", ErrCapturePaused, err, ErrGapNotRecorded, perr)
			}
			return 0, fmt.Errorf("%w: %w; a capture_interrupted gap records it", ErrCapturePaused, err)
		}
		return 0, err
	}
	rec.Seq, rec.BodyRef = seq, r.BodyRef
	if missing != "" {
		gap := gapRecord(rec, event.GapContentNotRetained, missing, "the record's content could not be retained; it is kept with availability missing")
		gap.Gap.AffectedSeq = seq
		if _, err := s.writeRecord(st, gap, classGap, true); err != nil {
			return seq, fmt.Errorf("record %d retained without its content; recording the content_not_retained gap failed: %w", seq, err)
		}
	}
	if orderPause {
		gap := gapRecord(rec, event.GapCaptureInterrupted, event.GapReasonOrderLedger, fmt.Sprintf("the active order ledger holds %d action starts (its bound); the start is kept as an ordinary lifecycle fact until compaction", st.activeStarts))
		if _, err := s.writeRecord(st, gap, classOrder, true); err != nil {
			return seq, fmt.Errorf("record %d retained; recording the order ledger pause marker failed: %w", seq, err)
		}
	}
	return seq, nil
}

// artifactExists reports whether the artifact of digest hexsum and frame
// size is retained: from the full listing, or (fast state) one lstat.
func (s *Spool) artifactExists(st *state, hexsum string, size int64) bool {
	if _, ok := st.artifacts[hexsum]; ok {
		return true
	}
	if !st.fast {
		return false
	}
	fi, err := os.Lstat(filepath.Join(s.dir, artifactsDir, artifactName(hexsum, size)))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return false
	}
	st.artifacts[hexsum] = size
	return true
}

func gapRecord(rec *event.Record, kind, reason, detail string) *event.Record {
	return &event.Record{
		Agent: rec.Agent, SessionID: rec.SessionID, Kind: event.KindGap, HookEvent: rec.HookEvent,
		ObservedAt: rec.ObservedAt, CaptureMode: rec.CaptureMode,
		Gap: &event.GapInfo{Kind: kind, Reason: reason, Detail: detail, RefusedKind: rec.Kind},
		// The gap concerns the record's target and its reserved shared
		// sequence, so it is delivered where the hole is.
		WorkID: rec.WorkID, Generation: rec.Generation, CanonicalSession: rec.CanonicalSession,
		Deferred: rec.Deferred, Association: rec.Association, Sequenced: rec.Sequenced, SharedSeq: rec.SharedSeq,
		Stream: rec.Stream,
	}
}

// errPausedBefore: pause wrote no gap because capture is already paused.
var errPausedBefore = errors.New("capture is already paused")

// pause records one capture_interrupted gap unless capture is already
// paused (a pause marker newer than the last ordinary record): then it
// fails with errPausedBefore.
func (s *Spool) pause(st *state, rec *event.Record, reason, detail string) error {
	if st.lastPause > st.lastOrdinary {
		return errPausedBefore
	}
	_, err := s.writeRecord(st, gapRecord(rec, event.GapCaptureInterrupted, reason, detail), classPause, true)
	return err
}

func encodeEnvelope(r *event.Record, class byte) []byte {
	return encodeFrame(typeEnvelope, strconv.FormatUint(r.Seq, 10)+"-"+string(class), mustJSON(r))
}

// writeRecord admits and durably writes one envelope with the next
// sequence number, updating st.
func (s *Spool) writeRecord(st *state, r *event.Record, class byte, priority bool) (uint64, error) {
	r.Seq = st.maxSeq + 1
	env := encodeEnvelope(r, class)
	if len(env) > maxEnvelopeBytes {
		return 0, fmt.Errorf("append: envelope of %d bytes exceeds the %d-byte envelope bound", len(env), maxEnvelopeBytes)
	}
	if err := admit(st.limits, st.usage, Usage{1, int64(len(env))}, priority); err != nil {
		return 0, err
	}
	name := outboxName(r.Seq, class, int64(len(env)))
	fp := "append.envelope"
	if class == classPause || class == classGap || class == classOrder {
		fp = "append.gap"
	}
	if err := s.writeNew(filepath.Join(s.dir, outboxDir), name, env, fp); err != nil {
		st.suspect = true // the file may exist without being counted
		return 0, fmt.Errorf("append record %d: %w", r.Seq, err)
	}
	e, _ := parseOutboxName(name)
	st.outbox = append(st.outbox, e)
	st.sorted = false
	if st.pendKnown {
		st.pend = append(st.pend, e)
	}
	st.usage.Records++
	st.usage.Bytes += e.size
	st.maxSeq = r.Seq
	switch class {
	case classEvent:
		st.lastOrdinary = r.Seq
	case classStart:
		st.lastOrdinary, st.lastStart = r.Seq, r.Seq
		st.activeStarts++
	case classPause:
		st.lastPause = r.Seq
	case classOrder:
		st.lastOrderPause = r.Seq
	}
	return r.Seq, nil
}

// Events reads every retained record in sequence order: the outbox and the
// whole envelopes of compaction's replay index (records replaced by digests
// or receipts are not returned). Bodies are read back from their artifacts
// when available. It never writes and takes no lock.
func (s *Spool) Events() ([]event.Record, error) {
	budget := scanBound(DefaultLimits())
	if l, err := s.readLimits(); err == nil {
		budget = scanBound(l)
	}
	names, err := listBounded(filepath.Join(s.dir, outboxDir), &budget)
	if err != nil {
		return nil, err
	}
	var out []event.Record
	for _, n := range names {
		e, ok := parseOutboxName(n)
		if !ok {
			continue
		}
		env, err := s.readEnvelopeFile(e)
		if err != nil {
			return nil, fmt.Errorf("read record %s: %w", n, err)
		}
		out = append(out, env.Record)
	}
	if ix, _, err := s.currentIndex(); err == nil {
		for _, r := range ix.Replay {
			env, err := decodeEnvelopeBody(r.Envelope)
			if err == nil {
				out = append(out, env.Record)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	for i := range out {
		ref := out[i].BodyRef
		if ref == nil || ref.Availability != event.AvailabilityRetained {
			continue
		}
		if b, err := s.readArtifact(ref); err == nil {
			var body event.Body
			if json.Unmarshal(b, &body) == nil {
				out[i].Body = &body
			}
		}
	}
	return out, nil
}

// readArtifact reads and verifies an artifact's content.
func (s *Spool) readArtifact(ref *event.ArtifactRef) ([]byte, error) {
	hexsum := ref.Digest[len("sha256:"):]
	if len(ref.Digest) != 71 || !isHex(hexsum) {
		return nil, fmt.Errorf("%w: artifact digest", errMalformed)
	}
	// The frame header length depends on the body length only.
	size := int64(len(encodeFrame(typeArtifact, hexsum, nil))) + ref.Bytes - 1 + int64(len(strconv.FormatInt(ref.Bytes, 10)))
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, artifactsDir, artifactName(hexsum, size)), size)
	if err != nil {
		return nil, err
	}
	f, err := decodeFrame(b)
	if err != nil || f.sum != hexsum {
		return nil, fmt.Errorf("%w: artifact", errMalformed)
	}
	return f.body, nil
}
