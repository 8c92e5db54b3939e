package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"github.com/agentscm/agentscm/internal/event"
)

// ResumeAfter makes every later Append of this Tx idempotent against
// the records retained above floor: a record identical to one retained
// there (same fields, same body digest, sequence aside) is not appended
// again; Append returns the retained record's sequence (and body
// reference) instead. Capture re-admitting an intake file whose earlier
// admission a crash cut off sets floor to the highest sequence the spool
// held when that admission began, so whatever the crashed attempt had
// appended (the event, its gaps, its action receipt) is found and reused,
// never retained twice, and only what it had not reached is appended.
// Each retained record matches at most one Append. ResumeAfter(0) turns
// it off. The lookup lists the outbox and reads the envelopes above floor:
// it costs a directory listing, paid only on re-admission after a crash.
func (ss *Tx) ResumeAfter(floor uint64) {
	ss.resume, ss.resumed = floor, nil
}

// findRetained returns the sequence and body reference of an envelope
// above floor holding exactly rec (the form Append would write, sequence
// aside) that no earlier Append of this resumption matched.
func (ss *Tx) findRetained(rec *event.Record) (uint64, *event.ArtifactRef, bool, error) {
	want, digest, err := comparable(rec)
	if err != nil {
		return 0, nil, false, err
	}
	budget := scanBound(ss.g.st.limits)
	names, err := listBounded(filepath.Join(ss.s.dir, outboxDir), &budget)
	if err != nil {
		return 0, nil, false, err
	}
	var es []outboxEntry
	for _, n := range names {
		if e, ok := parseOutboxName(n); ok && e.seq > ss.resume && !ss.resumed[e.seq] {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
	for _, e := range es {
		env, err := ss.s.readEnvelopeFile(e)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			continue // malformed: delivery quarantines it; it is not this record
		}
		got := env.Record
		ref := got.BodyRef
		if (ref == nil) != (digest == "") || (ref != nil && ref.Digest != digest) {
			continue
		}
		got.Seq, got.BodyRef = 0, nil
		b, err := json.Marshal(&got)
		if err != nil || !bytes.Equal(b, want) {
			continue
		}
		if ss.resumed == nil {
			ss.resumed = map[uint64]bool{}
		}
		ss.resumed[e.seq] = true
		return e.seq, ref, true, nil
	}
	return 0, nil, false, nil
}

// comparable is rec as its envelope would hold it, without sequence and
// body reference, and the digest of its body ("" when it has none).
func comparable(rec *event.Record) ([]byte, string, error) {
	r := *rec
	digest := ""
	if !bodyEmpty(rec.Body) {
		bb, err := json.Marshal(rec.Body)
		if err != nil {
			return nil, "", fmt.Errorf("encode body: %w", err)
		}
		sum := sha256.Sum256(bb)
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	r.Seq, r.Body, r.BodyRef = 0, nil, nil
	b, err := json.Marshal(&r)
	return b, digest, err
}
