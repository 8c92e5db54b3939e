package binding

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// maxEmptySettings bounds the settings file forget reads to decide whether
// it is empty.
const maxEmptySettings = 64 << 10

// removeCreatedEmptySettings removes the hook settings file at abs when
// one-step setup created it (its exclude line, which setup adds only for a
// file it creates, was just removed: rel is among excludeRemoved) and it is
// left an empty JSON object, so forget leaves the checkout as it found it.
// It reports whether it removed the file. Anything else in the file keeps it.
func removeCreatedEmptySettings(abs, rel string, excludeRemoved []string) (bool, error) {
	created := false
	for _, l := range excludeRemoved {
		if path.Clean("/"+l) == path.Clean("/"+rel) {
			created = true
		}
	}
	if !created {
		return false, nil
	}
	b, err := fsutil.ReadFileNoFollow(abs, maxEmptySettings)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(b), &obj); err != nil || obj == nil || len(obj) != 0 {
		return false, nil
	}
	if err := os.Remove(abs); err != nil {
		return false, err
	}
	return true, nil
}
