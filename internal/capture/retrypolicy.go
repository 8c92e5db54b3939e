package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// One retry policy for transient delivery failures (the Hub unreachable,
// restarting or answering an error), whoever makes the attempt: the
// background deliverer, a hook delivering in-process, `change-capture
// deliver`. After a failure the next attempt is due First later, then
// twice the last wait up to Max; the schedule is kept in the spool's
// private ledger directory (deliver-backoff), so that it spans processes:
// a hook never attempts delivery before the next attempt is due (during
// an outage the agent's hooks do not each pay a failed Hub call), and the
// deliverer sleeps until it is due, for at most For since the failures
// began, before it ends its run with outcome "failed". The first
// acknowledgement clears it.
type RetryPolicy struct {
	First, Max, For time.Duration
}

// TransientRetry is the retry policy of every delivery.
var TransientRetry = RetryPolicy{First: deliverRetryFirst, Max: deliverRetryMax, For: DelivererRetryFor}

// next is the wait after one that lasted prev (0: none yet).
func (p RetryPolicy) next(prev time.Duration) time.Duration {
	if prev <= 0 {
		return p.First
	}
	return min(2*prev, p.Max)
}

const backoffName = "deliver-backoff"

// backoffState is the shared schedule after transient failures.
type backoffState struct {
	// Since is the first failure of this run of failures; Next is when
	// the next attempt is due; Wait the last wait.
	Since    time.Time     `json:"since"`
	Next     time.Time     `json:"next"`
	Wait     time.Duration `json:"wait_ns"`
	Failures int           `json:"failures"`
	Detail   string        `json:"detail,omitempty"`
}

// readBackoff reads the ledger directory's schedule (zero: none, or
// unreadable, which must not stop delivery).
func readBackoff(dir string) backoffState {
	var st backoffState
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, backoffName), 4096)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return backoffState{}
	}
	return st
}

// noteFailure records one more transient failure at now and returns the
// schedule: the next attempt is due one wait of p later.
func noteFailure(dir string, p RetryPolicy, now time.Time, cause error) (backoffState, error) {
	st := readBackoff(dir)
	if st.Since.IsZero() {
		st.Since = now
	}
	st.Wait = p.next(st.Wait)
	st.Next = now.Add(st.Wait)
	st.Failures++
	st.Detail = ""
	if cause != nil {
		st.Detail = cause.Error()
		if len(st.Detail) > 300 {
			st.Detail = st.Detail[:300]
		}
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return st, err
	}
	if err := fsutil.WriteAtomic(filepath.Join(dir, backoffName), b, fsutil.FileMode); err != nil {
		return st, fmt.Errorf("record the delivery backoff: %w", err)
	}
	return st, nil
}

// clearBackoff forgets the schedule after an acknowledgement.
func clearBackoff(dir string) {
	if err := os.Remove(filepath.Join(dir, backoffName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return // best effort: a stale schedule only delays one attempt
	}
}

// due reports whether an attempt may be made at now.
func (st backoffState) due(now time.Time) bool { return st.Next.IsZero() || !now.Before(st.Next) }

// waiting is the error a hook reports when it skipped delivery because
// the next attempt is not yet due.
func (st backoffState) waiting() error {
	return fmt.Errorf("the Hub failed %d times since %s (%s); the next delivery attempt is due at %s",
		st.Failures, st.Since.UTC().Format(time.RFC3339), st.Detail, st.Next.UTC().Format(time.RFC3339Nano))
}
