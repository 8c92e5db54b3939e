package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Positions are tool-call ordinals: a tool call (or an outside capture)
// takes its position when its capture runs, and keeps it even when its
// increment cannot be stored. The holes file records those positions; the
// next stored increment, which carries their writes (the capture state only
// advances once an increment is stored), lists them in Meta.Holds, and no
// later increment takes their numbers. Entries at or below the state's last
// position are already carried and are ignored (a crash between storing the
// next increment and clearing the file leaves them behind harmlessly).
const holesFile = "holes.json"

type holesState struct {
	Version int            `json:"version"`
	Holes   []incmeta.Held `json:"holes"`
}

// FailpointEnv names a changelog failpoint for crash and failure tests:
// "store:N" fails the store of the increment at position N just before it
// is linked into place (the hooks read it from their environment).
const FailpointEnv = "AGENTSCM_CHANGELOG_FAILPOINT"

// errFailpoint is the failure a failpoint injects.
var errFailpoint = errors.New("failpoint")

// loadHoles returns the recorded holes (none when the file is missing or
// unreadable: a lost holes file costs only the numbering, never writes).
func (c *Changelog) loadHoles() []incmeta.Held {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(c.dir, holesFile), 1<<20)
	if err != nil {
		return nil
	}
	var h holesState
	if json.Unmarshal(b, &h) != nil || h.Version != 1 {
		return nil
	}
	return h.Holes
}

// lastHole is the highest recorded hole position (-1: none).
func lastHole(holes []incmeta.Held) int {
	last := -1
	for _, h := range holes {
		last = max(last, h.Position)
	}
	return last
}

// pendingHoles are the holes past last, the state's last position: the
// positions the next stored increment carries.
func pendingHoles(holes []incmeta.Held, last int) []incmeta.Held {
	var out []incmeta.Held
	for _, h := range holes {
		if h.Position > last {
			out = append(out, h)
		}
	}
	return out
}

// addHole records that the increment at h.Position could not be stored.
func (c *Changelog) addHole(h incmeta.Held) error {
	holes := append(c.loadHoles(), h)
	if len(holes) > 10000 {
		holes = holes[len(holes)-10000:]
	}
	b, err := json.Marshal(holesState{Version: 1, Holes: holes})
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(c.dir, holesFile), b, fsutil.FileMode)
}

// clearHoles removes the holes file once an increment carried its holes.
func (c *Changelog) clearHoles() {
	if err := os.Remove(filepath.Join(c.dir, holesFile)); err == nil || !errors.Is(err, fs.ErrNotExist) {
		_ = fsutil.SyncDir(c.dir)
	}
}

// nextFreePosition is the position after every stored increment and every
// recorded hole: what a capture that failed before its position was fixed
// is recorded at.
func (c *Changelog) nextFreePosition(holes []incmeta.Held) (int, error) {
	pos, err := c.positions()
	if err != nil {
		return 0, err
	}
	last := lastHole(holes)
	if len(pos) > 0 {
		last = max(last, pos[len(pos)-1])
	}
	return last + 1, nil
}

// failpoint returns the injected failure at point name for position pos,
// nil when none is set.
func (c *Changelog) failpoint(name string, pos int) error {
	if c.opts.Failpoint == "" || c.opts.Failpoint != fmt.Sprintf("%s:%d", name, pos) {
		return nil
	}
	return fmt.Errorf("%w %s at position %d", errFailpoint, name, pos)
}
