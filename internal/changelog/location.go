package changelog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// LocationFile, in a checkout's DefaultDir, names the directory its
// changelog lives in when that is another one (`changelog enable --dir`):
// the hooks, which know only the checkout, find it through DirFor. Without
// the file the changelog is DefaultDir itself (every changelog before the
// file existed).
const LocationFile = "location.json"

type location struct {
	Version int    `json:"version"`
	Dir     string `json:"dir"`
}

// DirFor returns the changelog directory of the checkout at root: the one
// its LocationFile names, else DefaultDir. An unreadable location file
// reads as DefaultDir (whose missing config then says there is no
// changelog).
func DirFor(configDir, root string) string {
	def := DefaultDir(configDir, root)
	if _, err := os.Lstat(filepath.Join(def, configFile)); err == nil {
		return def
	}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(def, LocationFile), 64<<10)
	if err != nil {
		return def
	}
	var l location
	if json.Unmarshal(b, &l) != nil || l.Version != 1 || !filepath.IsAbs(l.Dir) || filepath.Clean(l.Dir) != l.Dir {
		return def
	}
	return l.Dir
}

// ErrOtherLocation reports a checkout whose changelog already lives in
// another directory than the one asked for.
var ErrOtherLocation = errors.New("the checkout's changelog lives in another directory")

// SaveLocation makes dir the changelog directory of the checkout at root
// for every later DirFor (the hooks included): DefaultDir itself drops the
// location file. It refuses with ErrOtherLocation when the checkout already
// has a changelog elsewhere (one per checkout: the hooks write to one).
func SaveLocation(configDir, root, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("changelog directory %q is not absolute", dir)
	}
	dir = filepath.Clean(dir)
	def := DefaultDir(configDir, root)
	if cur := DirFor(configDir, root); cur != dir {
		if _, err := os.Lstat(filepath.Join(cur, configFile)); err == nil {
			return fmt.Errorf("%w: %s holds the changelog of %s; use --dir %s, or none for the default", ErrOtherLocation, cur, root, cur)
		}
	}
	if dir == def {
		err := os.Remove(filepath.Join(def, LocationFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := fsutil.MkdirPrivate(filepath.Dir(def)); err != nil {
		return err
	}
	if err := fsutil.MkdirPrivate(def); err != nil {
		return err
	}
	b, err := json.Marshal(location{Version: 1, Dir: dir})
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(def, LocationFile), b, fsutil.FileMode)
}
