package spool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// RepairReport is what Repair changed.
type RepairReport struct {
	Spool string `json:"spool"`
	// CompactionsCompleted counts interrupted compactions the lock's
	// recovery completed.
	CompactionsCompleted int `json:"compactions_completed"`
	// Relinked lists evidence files that had another hard link and were
	// replaced by a private copy (one link).
	Relinked []string `json:"relinked"`
	// Acknowledgements lists malformed or unreadable markers moved into
	// the quarantine: their envelopes are delivered again (the Hub keeps
	// one copy per digest).
	Acknowledgements []string `json:"acknowledgements"`
	// Cursor is the quarantine name of a damaged scheduling cursor that
	// was replaced by a fresh one ("" when it was sound). Scheduling then
	// starts from the lowest pending sequence; the attempt history it held
	// is kept in the quarantine only.
	Cursor string `json:"cursor,omitempty"`
	// Quarantined lists what the lock's recovery moved into the quarantine.
	Quarantined []string `json:"quarantined"`
}

// Changed reports whether Repair changed anything.
func (r *RepairReport) Changed() bool {
	return r.CompactionsCompleted > 0 || len(r.Relinked) > 0 || len(r.Acknowledgements) > 0 || r.Cursor != "" || len(r.Quarantined) > 0
}

// Repair fixes, under the spool lock, the conditions that stop delivery and
// that agentscm may fix without deciding anything for the user: its full
// acquisition makes every hook summary untrusted (so one that remembers a
// marker as malformed is rebuilt from the files), completes an interrupted
// compaction (recovery), replaces evidence files
// with a second hard link by a private copy, moves malformed
// acknowledgement markers into the quarantine (their envelopes are sent
// again) and replaces a damaged scheduling cursor (keeping the damaged one
// in the quarantine). It never changes ownership or modes: a spool whose
// authority is unsafe is refused, and the health report names the chown or
// chmod that fixes it.
func (s *Spool) Repair(ctx context.Context) (*RepairReport, error) {
	g, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer g.release()
	st := g.st
	rep := &RepairReport{Spool: s.dir, Relinked: []string{}, Acknowledgements: []string{}, Quarantined: []string{}}
	rep.CompactionsCompleted = st.report.Compactions
	rep.Quarantined = append(rep.Quarantined, st.report.Quarantined...)

	// Evidence files with a second hard link.
	euid := os.Geteuid()
	relink := func(dir, name string, limit int64) error {
		path := filepath.Join(s.dir, dir, name)
		var sys syscall.Stat_t
		if err := syscall.Lstat(path, &sys); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
		var ae *AuthorityError
		if err := checkPrivateStat(path, &sys, euid); err == nil || !errors.As(err, &ae) || !ae.Links {
			return nil // sound, or unsafe in a way only the user fixes
		}
		b, err := fsutil.ReadFileNoFollow(path, limit)
		if err != nil {
			return fmt.Errorf("repair %s: %w", path, err)
		}
		tmp, err := s.writeTemp(filepath.Join(s.dir, dir), b, "repair.relink")
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("repair %s: %w", path, err)
		}
		if err := s.syncDir(filepath.Join(s.dir, dir)); err != nil {
			return err
		}
		rep.Relinked = append(rep.Relinked, filepath.Join(dir, name))
		return nil
	}
	for _, e := range st.sortOutbox() {
		if err := relink(outboxDir, e.name, maxEnvelopeBytes+maxHeaderBytes); err != nil {
			return rep, err
		}
	}
	for _, n := range st.acks {
		if err := relink(acksDir, n, maxSmallFile); err != nil {
			return rep, err
		}
	}
	for d, size := range st.artifacts {
		if err := relink(artifactsDir, artifactName(d, size), st.limits.ArtifactBytes+maxHeaderBytes); err != nil {
			return rep, err
		}
	}

	// Malformed acknowledgement markers (ackedSet stops delivery on them).
	for seq, n := range st.acks {
		if _, err := s.readAck(seq, n); err == nil || !errors.Is(err, ErrMalformedAck) {
			continue
		}
		before := len(st.report.Quarantined)
		if err := s.quarantine(st, acksDir, n); err != nil {
			return rep, err
		}
		delete(st.acks, seq)
		rep.Acknowledgements = append(rep.Acknowledgements, n)
		rep.Quarantined = append(rep.Quarantined, st.report.Quarantined[before:]...)
	}

	// A damaged cursor: keep its bytes in the quarantine, then replace it.
	if _, err := s.readCursor(); err != nil {
		qname := fmt.Sprintf("%d-%s-root-%s", time.Now().UnixNano(), randomHex(4), cursorFile)
		if b, rerr := fsutil.ReadFileNoFollow(filepath.Join(s.dir, cursorFile), maxSmallFile); rerr == nil {
			if err := s.writeNew(filepath.Join(s.dir, quarantineDir), qname, b, "repair.cursor-kept"); err != nil {
				return rep, err
			}
			rep.Quarantined = append(rep.Quarantined, qname)
		} else {
			qname = "(unreadable: " + rerr.Error() + ")"
		}
		data := encodeFrame(typeCursor, typeCursor, mustJSON(cursorRecord{}))
		if err := s.writeReplace(s.dir, cursorFile, data, "repair.cursor"); err != nil {
			return rep, err
		}
		rep.Cursor = qname
	}
	return rep, nil
}
