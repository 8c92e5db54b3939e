package spool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// ErrBlobRefused wraps every refusal of PutBlobs: a blob above the
// per-artifact limit or a spool without room for it. Nothing is claimed
// retained for a refused blob.
var ErrBlobRefused = errors.New("spool refused the artifact")

// Blob is one content-addressed artifact a caller retains beside the
// records, e.g. the working bytes and the manifest of a source binding.
type Blob struct {
	MediaType string
	Data      []byte
}

// PutBlobs durably retains each blob as a local-private artifact named by
// the SHA-256 of its bytes (an artifact already retained is not written
// again) and returns their identities in order. Admission counts each new
// artifact file against the spool's limits as an ordinary record would
// (it never dips into the headroom reserved for finishing actions); a
// blob above the per-artifact limit or past the limits is refused with an
// error wrapping ErrBlobRefused and the QuotaError, and the blobs before it
// stay retained (they are counted, never lost). Artifacts are never
// removed by compaction.
func (s *Spool) PutBlobs(ctx context.Context, blobs []Blob) ([]event.ArtifactRef, error) {
	g, err := s.acquireFast(ctx, s.lockWait)
	if err != nil {
		return nil, err
	}
	defer g.release()
	return s.putBlobsLocked(g.st, blobs)
}

// PutBlobs is Spool.PutBlobs under the held lock.
func (ss *Tx) PutBlobs(blobs []Blob) ([]event.ArtifactRef, error) {
	if err := ss.held(); err != nil {
		return nil, err
	}
	return ss.s.putBlobsLocked(ss.g.st, blobs)
}

func (s *Spool) putBlobsLocked(st *state, blobs []Blob) ([]event.ArtifactRef, error) {
	refs := make([]event.ArtifactRef, 0, len(blobs))
	dir := filepath.Join(s.dir, artifactsDir)
	// One directory fsync covers every artifact this call installed
	// (each file is fsynced before its link): many small working files
	// cost one sync, and none is reported retained before it.
	linked := false
	defer func() {
		if linked {
			if err := s.syncDir(dir); err != nil {
				st.suspect = true
			}
		}
	}()
	for i, b := range blobs {
		sum := sha256.Sum256(b.Data)
		hexsum := hex.EncodeToString(sum[:])
		ref := event.ArtifactRef{Digest: "sha256:" + hexsum, Bytes: int64(len(b.Data)), MediaType: b.MediaType,
			Retention: "local-private", Availability: event.AvailabilityRetained}
		if int64(len(b.Data)) > st.limits.ArtifactBytes {
			return refs, fmt.Errorf("%w: blob %d is %d bytes, above the per-artifact limit of %d bytes (%s)", ErrBlobRefused, i, len(b.Data), st.limits.ArtifactBytes, event.GapReasonArtifactLimit)
		}
		art := encodeFrame(typeArtifact, hexsum, b.Data)
		if !s.artifactExists(st, hexsum, int64(len(art))) {
			if err := admit(st.limits, st.usage, Usage{Records: 1, Bytes: int64(len(art))}, false); err != nil {
				return refs, fmt.Errorf("%w: blob %d: %w", ErrBlobRefused, i, err)
			}
			if err := s.linkNew(dir, artifactName(hexsum, int64(len(art))), art, "blob.artifact"); err != nil {
				st.suspect = true // the file may exist without being counted
				return refs, fmt.Errorf("retain blob %d: %w", i, err)
			}
			linked = true
			st.artifacts[hexsum] = int64(len(art))
			st.usage.Records++
			st.usage.Bytes += int64(len(art))
		}
		refs = append(refs, ref)
	}
	if linked {
		linked = false
		if err := s.syncDir(dir); err != nil {
			st.suspect = true
			return nil, fmt.Errorf("sync artifacts: %w", err)
		}
	}
	return refs, nil
}

// linkNew is writeNew without the directory sync (a caller installing
// several files syncs the directory once).
func (s *Spool) linkNew(dir, name string, data []byte, fp string) error {
	tmp, err := s.writeTemp(dir, data, fp)
	if err != nil {
		return err
	}
	target := filepath.Join(dir, name)
	if err := os.Link(tmp, target); err != nil {
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			if old, rerr := fsutil.ReadFileNoFollow(target, int64(len(data))+1); rerr == nil && bytes.Equal(old, data) {
				return nil
			}
		}
		return fmt.Errorf("install %s: %w", name, err)
	}
	s.fail(fp + ".linked")
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("remove temporary file: %w", err)
	}
	return nil
}

// ReadBlob reads and verifies the retained artifact ref names (its digest
// and byte count).
func (s *Spool) ReadBlob(ref event.ArtifactRef) ([]byte, error) {
	b, err := s.readArtifact(&ref)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != ref.Bytes {
		return nil, fmt.Errorf("%w: artifact size", errMalformed)
	}
	return b, nil
}
