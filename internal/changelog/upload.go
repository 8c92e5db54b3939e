package changelog

import (
	"fmt"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// uploadBody returns the bytes of the local increment at pos that may leave
// the machine: the one place that decides what an upload to the Hub holds
// (every upload, merged or not, is built from these bodies). Today it is
// the local increment as stored.
func (c *Changelog) uploadBody(pos int) ([]byte, error) {
	b, err := fsutil.ReadFileNoFollow(c.incrementPath(pos), MaxRemoteBytes)
	if err != nil {
		return nil, fmt.Errorf("read increment %d for upload: %w", pos, err)
	}
	return b, nil
}
