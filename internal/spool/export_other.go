//go:build !linux

package spool

import (
	"context"
	"fmt"
	"runtime"
)

// Export is implemented on Linux only. On macOS the seed requires clearing
// the anchor's extended ACL through its descriptor and re-reading it before
// any archive byte exists; that step is not implemented, so export fails
// closed here before creating anything.
func Export(ctx context.Context, o ExportOptions) (*ExportResult, error) {
	err := fmt.Errorf("%w: change-capture export is not supported on this OS (%s): the anchor ACL step is not implemented", ErrExportUnsupported, runtime.GOOS)
	return nil, &ExportError{Step: "arguments", Err: err, Message: err.Error(), Artifacts: []ExportArtifact{}}
}
