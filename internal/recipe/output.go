package recipe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// OutputMediaType is the media type of a retained output stream.
const OutputMediaType = "application/octet-stream"

// maxOutputRead bounds reading a stream's copy back: a recipe's
// max_output_bytes is at most 64 MiB for both streams together.
const maxOutputRead = 64 << 20

var outputExts = [2]string{".stdout", ".stderr"}

// blobStore retains blobs under the spool's lock and limits
// (capture.ManagedSpool).
type blobStore interface {
	PutBlobs(ctx context.Context, blobs []spool.Blob) ([]event.ArtifactRef, error)
}

// retainOutputs retains the run's streamed output copies (dir/<action
// id>.stdout and .stderr, written while the child ran) as local-private
// artifacts of the spool, each admitted against the spool's per-artifact,
// record and byte limits, and returns their identities for the finish
// record (nil when the run left no copy at all). A stream the spool does
// not retain (a limit refused it, or it could not be read or written) has
// availability missing and its reason in why; it never fails the finish.
func retainOutputs(ctx context.Context, st blobStore, dir, actionID string) (out *event.ActionOutput, why [2]string) {
	out = &event.ActionOutput{}
	found := false
	for i, ext := range outputExts {
		ref := &out.Stdout
		if i == 1 {
			ref = &out.Stderr
		}
		*ref = event.ArtifactRef{MediaType: OutputMediaType, Retention: "local-private", Availability: event.AvailabilityMissing}
		b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, actionID+ext), maxOutputRead)
		if errors.Is(err, fs.ErrNotExist) {
			why[i] = "the run left no output copy"
			continue
		}
		found = true
		if err != nil {
			why[i] = "read the output copy: " + err.Error()
			continue
		}
		sum := sha256.Sum256(b)
		ref.Digest, ref.Bytes = "sha256:"+hex.EncodeToString(sum[:]), int64(len(b))
		refs, err := st.PutBlobs(ctx, []spool.Blob{{MediaType: OutputMediaType, Data: b}})
		if err != nil {
			why[i] = err.Error()
			continue
		}
		*ref = refs[0]
	}
	if !found {
		return nil, why
	}
	return out, why
}

// dropOutputs removes the output copies beside the markers once the finish
// naming their spool artifacts (or their refusal) is durable: the output
// lives in the spool, under its limits, and nowhere else.
func dropOutputs(dir, actionID string) error {
	var errs []error
	for _, ext := range outputExts {
		if err := os.Remove(filepath.Join(dir, actionID+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := fsutil.SyncDir(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// applyOutputs records what retainOutputs did in the run receipt.
func applyOutputs(rc *Receipt, out *event.ActionOutput, why [2]string) {
	if out == nil {
		return
	}
	for i, o := range []*Output{&rc.Stdout, &rc.Stderr} {
		ref := out.Stdout
		if i == 1 {
			ref = out.Stderr
		}
		o.Path = "" // the copy beside the markers is removed
		o.Artifact = &ref
		o.NotRetained = why[i]
		if ref.Availability == event.AvailabilityRetained {
			o.NotRetained = ""
		}
	}
}
