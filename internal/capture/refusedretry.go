package capture

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Refused envelopes are retried with backoff. A permanent refusal
// (RefusedError) is permanent for the Hub that gave it, not for every
// Hub: an upgraded Hub may accept what an older one refused, and a refusal
// an operator fixed (a Work resumed, a limit raised) clears. So a refused
// envelope stays pending (seed 000: kept "for later retry and diagnosis")
// and the deliverer sends it again once its retry time has come: the
// first retry RefusedRetryBase after the refusal, each later one twice as
// long after the previous one, at most maxRefusedRetryWait. Until then the
// deliverer passes over it (outcome retry_wait in the cursor when a page
// ends with such envelopes). Every attempt is recorded in the spool's
// cursor (outcome "refused", or the Hub's status once it accepts) and
// counted here; an envelope the Hub accepts on a retry leaves the ledger's
// refusal list and is kept in Cleared (the newest maxClearedRefusals).
//
// The schedule lives in the ledger directory (refusedRetryName), written
// under the ledger lock by rename without fsync: a machine crash can lose
// it, and the refused envelopes are then simply retried sooner. It is a
// separate file because the ledger's own JSON is decoded strictly by
// earlier versions.
const (
	refusedRetryName    = "refused-retries"
	refusedRetryVersion = 1
	// RefusedRetryBase is the wait before a refused envelope's first retry.
	RefusedRetryBase = time.Minute
	// maxRefusedRetryWait bounds the wait between two retries.
	maxRefusedRetryWait = 6 * time.Hour
	maxClearedRefusals  = 64
	maxRetryEntries     = 4096
)

// RefusalRetry is the retry schedule of one refused envelope.
type RefusalRetry struct {
	SpoolSeq uint64 `json:"spool_seq"`
	Digest   string `json:"digest"`
	// Attempts counts the attempts the Hub refused (the first included).
	Attempts int       `json:"attempts"`
	Last     time.Time `json:"last"`
	Next     time.Time `json:"next"`
	Reason   string    `json:"reason"`
}

// ClearedRefusal is a refused envelope the Hub accepted on a retry.
type ClearedRefusal struct {
	RefusalRetry
	// Status is the Hub's answer ("accepted" or "duplicate"), At its time.
	Status string    `json:"status"`
	At     time.Time `json:"at"`
}

// RefusalRetries is the retry state of a spool's refused envelopes.
type RefusalRetries struct {
	Version int              `json:"version"`
	Pending []RefusalRetry   `json:"pending"`
	Cleared []ClearedRefusal `json:"cleared,omitempty"`
}

func readRetries(dir string) RefusalRetries {
	var r RefusalRetries
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, refusedRetryName), 4<<20)
	if err != nil || json.Unmarshal(b, &r) != nil || r.Version != refusedRetryVersion {
		return RefusalRetries{Version: refusedRetryVersion}
	}
	return r
}

func writeRetries(dir string, r *RefusalRetries) error {
	r.Version = refusedRetryVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := writeFast(filepath.Join(dir, refusedRetryName), b); err != nil {
		return fmt.Errorf("refused envelope retries: %w", err)
	}
	return nil
}

// RefusalRetries reads, without the ledger lock, the retry state of
// spoolDir's refused envelopes (change-capture status and inspect).
func (s StateDir) RefusalRetries(spoolDir string) RefusalRetries {
	return readRetries(s.ledgerDir(spoolDir))
}

func (r *RefusalRetries) find(seq uint64, digest string) int {
	for i, p := range r.Pending {
		if p.SpoolSeq == seq && p.Digest == digest {
			return i
		}
	}
	return -1
}

// waiting reports whether the refused envelope's retry time has not come.
func (r *RefusalRetries) waiting(seq uint64, digest string, now time.Time) bool {
	i := r.find(seq, digest)
	return i >= 0 && now.Before(r.Pending[i].Next)
}

// refused counts one refused attempt and schedules the next retry.
func (r *RefusalRetries) refused(env *spool.Envelope, reason string, now time.Time, base time.Duration) {
	if base <= 0 {
		base = RefusedRetryBase
	}
	i := r.find(env.Record.Seq, env.Digest)
	if i < 0 {
		if len(r.Pending) >= maxRetryEntries {
			r.Pending = r.Pending[1:]
		}
		r.Pending = append(r.Pending, RefusalRetry{SpoolSeq: env.Record.Seq, Digest: env.Digest})
		i = len(r.Pending) - 1
	}
	p := &r.Pending[i]
	p.Attempts++
	wait := base
	for n := 1; n < p.Attempts && wait < maxRefusedRetryWait; n++ {
		wait *= 2
	}
	p.Last, p.Next, p.Reason = now.UTC(), now.UTC().Add(min(wait, maxRefusedRetryWait)), reason
}

// accepted moves a refused envelope the Hub accepted to Cleared; it
// reports whether the envelope had been refused.
func (r *RefusalRetries) accepted(env *spool.Envelope, status string, now time.Time) bool {
	i := r.find(env.Record.Seq, env.Digest)
	if i < 0 {
		return false
	}
	c := ClearedRefusal{RefusalRetry: r.Pending[i], Status: status, At: now.UTC()}
	r.Pending = append(r.Pending[:i], r.Pending[i+1:]...)
	r.Cleared = append(r.Cleared, c)
	if len(r.Cleared) > maxClearedRefusals {
		r.Cleared = r.Cleared[len(r.Cleared)-maxClearedRefusals:]
	}
	return true
}

// nextRetry is the earliest retry time of the refused envelopes (zero
// when none waits).
func (r *RefusalRetries) nextRetry() time.Time {
	var t time.Time
	for _, p := range r.Pending {
		if t.IsZero() || p.Next.Before(t) {
			t = p.Next
		}
	}
	return t
}

// clearRefusal removes an envelope the Hub accepted after all from the
// ledger's refusal list (its hub_refused gap stays on the Hub: the record
// says it was refused, then arrived).
func (l *Ledger) clearRefusal(seq uint64, digest string) {
	for i, r := range l.st.Refusals {
		if r.SpoolSeq == seq && r.Digest == digest {
			l.st.Refusals = append(l.st.Refusals[:i], l.st.Refusals[i+1:]...)
			l.dirty, l.durable = true, true
			return
		}
	}
}
