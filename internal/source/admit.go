package source

import (
	"encoding/json"
	"errors"
	"slices"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// Admitter admits staged blobs under the spool lock: *spool.Session.
type Admitter interface {
	ReadStaged(ref event.ArtifactRef) ([]byte, error)
	AdmitStaged(refs []event.ArtifactRef) error
}

// Admit retains, under the spool lock, the working bytes and the manifest
// that a capture with a staging store (spool.Staging, no lock) wrote, and
// returns the binding the action start records. A binding that retained
// nothing is returned unchanged. When the spool's limits refuse a blob the
// result is what a capture under the lock gives: stopped with
// spool_refused, no manifest identity. When a staged blob is missing or
// does not verify (or the manifest cannot be read) the result keeps the
// manifest identity, is not retained and names bytes_not_retained. Either
// way the binding is partial and never claims bytes the spool lacks.
func Admit(ss Admitter, sb *event.SourceBinding) *event.SourceBinding {
	if sb == nil || !sb.Retained || sb.ManifestDigest == "" {
		return sb
	}
	out := *sb
	out.Omissions = slices.Clone(sb.Omissions)
	err := admitManifest(ss, sb)
	switch {
	case err == nil:
		return sb
	case errors.Is(err, spool.ErrBlobRefused):
		out.Stopped, out.ManifestDigest, out.ManifestBytes = StopSpoolRefused, "", 0
	default:
		if !slices.Contains(out.Omissions, OmissionNotRetained) {
			out.Omissions = append(out.Omissions, OmissionNotRetained)
			slices.Sort(out.Omissions)
		}
	}
	out.Retained, out.Partial = false, true
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
