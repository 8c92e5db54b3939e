package source

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// Admitter admits staged blobs under the spool lock: *spool.Tx.
type Admitter interface {
	PutBlobs(blobs []spool.Blob) ([]event.ArtifactRef, error)
	ReadStaged(ref event.ArtifactRef) ([]byte, error)
	AdmitStaged(refs []event.ArtifactRef) error
}

// Staged is the binding a capture through a staging store (spool.Staging,
// no lock) records until a lock holder admits its bytes: not retained yet,
// naming bytes_not_retained, partial. A reader that never admits it (an
// older binary) thus records nothing it cannot show.
func Staged(sb *event.SourceBinding) *event.SourceBinding {
	if sb == nil || !sb.Retained {
		return sb
	}
	out := *sb
	out.Retained, out.Partial = false, true
	out.Omissions = append(slices.Clone(sb.Omissions), OmissionNotRetained)
	slices.Sort(out.Omissions)
	return &out
}

// Admit retains, under the spool lock, the working bytes and the manifest
// a binding names but has not retained (Staged, or a digest-only capture
// whose bytes the spool holds), and returns the binding the action start
// records: retained, without bytes_not_retained, when the manifest and
// every working file it names are admitted; stopped with spool_refused and
// no manifest identity (what a capture under the lock gives) when a limit
// refused one; unchanged (bytes_not_retained) when a blob is missing or does
// not verify. It never claims bytes the spool lacks.
//
// inline are bytes the capture kept with the binding instead of staging
// them (the intake record's own blobs): they are retained first, against
// the same limits.
func Admit(ss Admitter, sb *event.SourceBinding, inline []spool.Blob) *event.SourceBinding {
	if sb == nil || sb.Retained || sb.ManifestDigest == "" || sb.Stopped != "" || !slices.Contains(sb.Omissions, OmissionNotRetained) {
		return sb
	}
	var err error
	if len(inline) > 0 {
		_, err = ss.PutBlobs(inline)
	}
	if err == nil {
		err = admitManifest(ss, sb)
	}
	if err != nil && !errors.Is(err, spool.ErrBlobRefused) {
		return sb
	}
	out := *sb
	out.Omissions = slices.DeleteFunc(slices.Clone(sb.Omissions), func(o string) bool { return o == OmissionNotRetained })
	if len(out.Omissions) == 0 {
		out.Omissions = nil
	}
	if err != nil {
		out.Stopped, out.ManifestDigest, out.ManifestBytes, out.Partial = StopSpoolRefused, "", 0, true
		return &out
	}
	out.Retained, out.Partial = true, len(out.Omissions) > 0
	return &out
}

// admitManifest admits every working file the staged manifest names, then
// the manifest.
func admitManifest(ss Admitter, sb *event.SourceBinding) error {
	mref := event.ArtifactRef{Digest: "sha256:" + sb.ManifestDigest, Bytes: sb.ManifestBytes, MediaType: ManifestMediaType}
	b, err := ss.ReadStaged(mref)
	if err != nil {
		return err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	refs := make([]event.ArtifactRef, 0, len(m.Entries)+1)
	for _, e := range m.Entries {
		if e.Kind == "file" {
			refs = append(refs, event.ArtifactRef{Digest: "sha256:" + e.SHA256, Bytes: e.Size, MediaType: FileMediaType})
		}
	}
	return ss.AdmitStaged(append(refs, mref))
}
