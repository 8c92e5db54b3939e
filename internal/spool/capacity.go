package spool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Fractions is a spool's usage as a fraction of each limit (0.5 = half).
type Fractions struct {
	Records float64 `json:"records"`
	Bytes   float64 `json:"bytes"`
}

// Max returns the larger fraction and the name of its bound (records or
// bytes).
func (f Fractions) Max() (float64, string) {
	if f.Bytes > f.Records {
		return f.Bytes, "bytes"
	}
	return f.Records, "records"
}

// FractionsOf returns u as a fraction of l's record and byte limits.
func FractionsOf(u Usage, l Limits) Fractions {
	frac := func(a, b int64) float64 {
		if b <= 0 {
			return 1
		}
		return math.Round(float64(a)/float64(b)*10000) / 10000
	}
	return Fractions{Records: frac(u.Records, l.Records), Bytes: frac(u.Bytes, l.Bytes)}
}

// ErrLimitsBelowUsage refuses limits the spool's current contents do not fit.
var ErrLimitsBelowUsage = errors.New("spool limits below current usage")

// LimitsChange says what SetLimits did.
type LimitsChange struct {
	Old     Limits `json:"old"`
	New     Limits `json:"new"`
	Usage   Usage  `json:"usage"`
	Changed bool   `json:"changed"`
}

// SetLimits changes the limits of an existing spool (the seed: re-enabling
// the same identity may update operational settings such as increased
// limits). Zero fields of want keep the current value. Under the spool lock
// it validates the result against the spool's floor and refuses, changing
// nothing, limits that the spool's current contents do not fit: usage plus
// the reserved headroom, the largest retained artifact, the active action
// starts and the replay index. The new limits file is written atomically
// (temporary file, fsync, rename, directory fsync).
func (s *Spool) SetLimits(ctx context.Context, want Limits) (*LimitsChange, error) {
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	st := g.st
	cur := st.limits
	next := cur
	for _, f := range []struct {
		dst *int64
		v   int64
	}{{&next.Records, want.Records}, {&next.Bytes, want.Bytes}, {&next.ArtifactBytes, want.ArtifactBytes},
		{&next.ActiveOrders, want.ActiveOrders}, {&next.ReplayEntries, want.ReplayEntries}, {&next.ReplayBytes, want.ReplayBytes}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: every limit must be positive", ErrBelowFloor)
		}
		if f.v != 0 {
			*f.dst = f.v
		}
	}
	ch := &LimitsChange{Old: cur, New: next, Usage: st.usage}
	if next == cur {
		return ch, nil
	}
	actionCapable, err := s.actionCapable()
	if err != nil {
		return nil, err
	}
	if err := next.Validate(actionCapable); err != nil {
		return nil, err
	}
	var why []string
	// The limits file itself is rewritten: count its new size.
	data := encodeFrame(typeLimits, "limits", mustJSON(next))
	use := st.usage
	if fi, err := lstatSize(filepath.Join(s.dir, limitsFile)); err == nil {
		use.Bytes += int64(len(data)) - fi
	}
	if use.Records+HeadroomRecords > next.Records {
		why = append(why, fmt.Sprintf("the spool holds %d records (+%d reserved headroom), more than %d", use.Records, HeadroomRecords, next.Records))
	}
	if use.Bytes+HeadroomBytes > next.Bytes {
		why = append(why, fmt.Sprintf("the spool holds %d bytes (+%d reserved headroom), more than %d", use.Bytes, HeadroomBytes, next.Bytes))
	}
	var largest int64
	for _, n := range st.artifacts {
		largest = max(largest, n)
	}
	if largest > next.ArtifactBytes {
		why = append(why, fmt.Sprintf("an artifact of %d bytes is retained, more than the per-artifact limit %d", largest, next.ArtifactBytes))
	}
	if st.activeStarts > next.ActiveOrders {
		why = append(why, fmt.Sprintf("%d action starts are active, more than %d", st.activeStarts, next.ActiveOrders))
	}
	if next.ReplayEntries < cur.ReplayEntries || next.ReplayBytes < cur.ReplayBytes {
		ix, err := s.readIndex(st.index.name)
		if err != nil {
			return nil, err
		}
		if n, b := int64(len(ix.Replay)), ix.replayBytes(); n > next.ReplayEntries || b > next.ReplayBytes {
			why = append(why, fmt.Sprintf("the replay index holds %d entries / %d bytes, more than %d / %d", n, b, next.ReplayEntries, next.ReplayBytes))
		}
	}
	if len(why) > 0 {
		return nil, fmt.Errorf("%w: %s; nothing changed (compact the spool first, or choose larger limits)", ErrLimitsBelowUsage, strings.Join(why, "; "))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.writeReplace(s.dir, limitsFile, data, "limits.set"); err != nil {
		return nil, fmt.Errorf("write spool limits: %w", err)
	}
	ch.Changed = true
	return ch, nil
}

// actionCapable reads the scope's declaration.
func (s *Spool) actionCapable() (bool, error) {
	sc, err := s.readScope()
	if err != nil {
		return false, err
	}
	return sc.ActionCapable, nil
}

func (s *Spool) readScope() (scopeRecord, error) {
	var sc scopeRecord
	b, err := fsutil.ReadFileNoFollow(filepath.Join(s.dir, scopeFile), maxSmallFile)
	if err != nil {
		return sc, fmt.Errorf("%w: read scope: %v", ErrDamaged, err)
	}
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeScope {
		return sc, fmt.Errorf("%w: scope file does not decode", ErrDamaged)
	}
	if err := strictJSON(f.body, &sc); err != nil {
		return sc, fmt.Errorf("%w: scope: %v", ErrDamaged, err)
	}
	return sc, nil
}

func lstatSize(path string) (int64, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// OrdinaryRoom reports whether n more ordinary records of about 1 KiB each
// fit under the held lock without the reserved headroom: capture is not
// paused by quota pressure. Callers that record losses noted elsewhere
// (capture's interrupted slot) wait for it, so that their gaps never spend
// the headroom acknowledgement and compaction need.
func (ss *Tx) OrdinaryRoom(n int) bool {
	if ss.held() != nil {
		return false
	}
	st := ss.g.st
	return admit(st.limits, st.usage, Usage{Records: int64(n), Bytes: int64(n) << 10}, false) == nil
}
