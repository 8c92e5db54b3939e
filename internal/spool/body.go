package spool

import (
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/event"
)

// ReadBody reads and verifies the retained body artifact of ref from the
// spool at dir (a no-follow read of an immutable, content-addressed file;
// no lock is needed). The bytes are exactly those ref's digest names: for
// a shared-conversation record, its redacted body.
func ReadBody(dir string, ref *event.ArtifactRef) ([]byte, error) {
	if ref == nil || ref.Availability != event.AvailabilityRetained {
		return nil, errors.New("the body was not retained")
	}
	if ref.Bytes <= 0 || ref.Bytes > maxBodyRead {
		return nil, fmt.Errorf("body of %d bytes is out of range", ref.Bytes)
	}
	return (&Spool{dir: dir}).readArtifact(ref)
}

// maxBodyRead bounds ReadBody (the largest artifact the spool admits by
// default is 16 MiB; bodies that upload are at most 1 MiB).
const maxBodyRead = 64 << 20
