package changelog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Root is one capture root.
type Root struct {
	// Name labels the root in increments ("checkout", "transcripts", ...).
	Name string `json:"name"`
	// Path is the root's absolute path.
	Path string `json:"path"`
	// Git marks a git checkout: ".git" entries are never captured and,
	// unless IncludeIgnored, neither are git-ignored paths.
	Git            bool `json:"git,omitempty"`
	IncludeIgnored bool `json:"include_ignored,omitempty"`
}

// Options configure a changelog.
type Options struct {
	Roots []Root
	// Reservation, when set, bounds stored increments by a grant across
	// processes; nil stores without limit.
	Reservation *Reservation
	// Now returns the current time; nil uses time.Now.
	Now func() time.Time
	// Git is the git binary; "" uses "git" from PATH.
	Git string
	// Exclude lists absolute paths never captured nor changed by a rewind
	// (the agentscm config directory when it lies inside a root); the
	// changelog directory itself is always excluded.
	Exclude []string
	// Watch, when set, tells a capture which directories changed since the
	// previous one (a filesystem watcher, see internal/watch): only those
	// are listed. When it cannot vouch, or fails, the capture lists every
	// directory. nil always lists every directory.
	Watch ChangeSource
	// Failpoint, for failure tests, is FailpointEnv's value ("" none).
	Failpoint string
	// ConversationRefs keeps no copy of the conversation roots (a checkout
	// in metadata-only mode): an increment then records, for its session's
	// transcript, a reference (Meta.TranscriptRefs) instead of its bytes,
	// and a rewind leaves the live transcripts alone.
	ConversationRefs bool
}

// ChangeSource reports what changed below capture roots since a token.
type ChangeSource interface {
	// Since returns a token for the present (taken once every change made
	// before the call is accounted for) and, per root of roots (absolute
	// paths), the directories changed since the token since, or nil for a
	// root it cannot vouch for (unknown or stale token, a lost event, a
	// gap in its coverage). A token "" means none could be taken.
	Since(ctx context.Context, roots []string, since string) (token string, hints []*Hint, err error)
}

// Changelog is one checkout's changelog directory.
type Changelog struct {
	dir  string
	opts Options

	// Counters of this instance's captures (for tests and benchmarks).
	fastCaptures, hintedRoots int
	forceFull                 bool // tests: always take the full path
}

// Increment describes one stored increment.
type Increment struct {
	Position int
	Path     string
	Size     int64
	Meta     incmeta.Meta
	// Warning, when set, says why this increment is a full one although
	// earlier increments exist (a damaged capture state).
	Warning string
	// Watched: the watcher vouched for every existing root, so the capture
	// listed only the directories it reported changed.
	Watched bool
	// Warm: the watch server took this capture for the hook (see
	// CaptureOps).
	Warm bool
}

// Layout inside the changelog directory.
const (
	incrementsDir = "increments"
	quarantineDir = "quarantine"
	stateFile     = "state" // with journalFile (see journal.go)
	lockFile      = "lock"
)

// ErrBadDirectory reports a changelog directory that is a link, not a
// directory, not private, owned by another user, or that is or holds a
// capture root (one below a root is excluded from it).
var ErrBadDirectory = errors.New("unusable changelog directory")

// IncrementName is the file name of the increment at position.
func IncrementName(position int) string { return fmt.Sprintf("%06d.tgz", position) }

// Open opens (creating it 0700 when missing) the changelog directory dir for
// the given capture roots. It refuses a directory that is a link, not a
// directory, owned by another user, not private, or that is or holds a
// capture root; one below a root (through a symlink too) is excluded from it.
func Open(dir string, opts Options) (*Changelog, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: %s is not absolute", ErrBadDirectory, dir)
	}
	dir = filepath.Clean(dir)
	if len(opts.Roots) == 0 {
		return nil, errors.New("changelog: no capture roots")
	}
	if _, err := metaRoots(opts.Roots); err != nil {
		return nil, err
	}
	for _, r := range opts.Roots {
		// A changelog directory below a root is excluded from it; one that
		// is or holds a root is refused.
		if within(r.Path, dir) {
			return nil, fmt.Errorf("%w: %s overlaps the capture root %s", ErrBadDirectory, dir, r.Path)
		}
		if real, err := filepath.EvalSymlinks(r.Path); err == nil {
			if realDir, err := filepath.EvalSymlinks(filepath.Dir(dir)); err == nil {
				rd := filepath.Join(realDir, filepath.Base(dir))
				if within(real, rd) || (within(rd, real) && !within(dir, r.Path)) {
					return nil, fmt.Errorf("%w: %s overlaps the capture root %s", ErrBadDirectory, dir, r.Path)
				}
			}
		}
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := fsutil.MkdirPrivate(dir); err != nil {
			return nil, err
		}
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadDirectory, err)
	}
	for _, sub := range []string{incrementsDir, quarantineDir} {
		if err := fsutil.MkdirPrivate(filepath.Join(dir, sub)); err != nil {
			return nil, err
		}
		if err := fsutil.CheckPrivateDir(filepath.Join(dir, sub)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadDirectory, err)
		}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Git == "" {
		opts.Git = "git"
	}
	return &Changelog{dir: dir, opts: opts}, nil
}

// Dir returns the changelog directory.
func (c *Changelog) Dir() string { return c.dir }

// within reports whether p is base or lies below it.
func within(p, base string) bool {
	return p == base || strings.HasPrefix(p, strings.TrimSuffix(base, "/")+"/")
}

// metaRoots validates the configured roots and returns their archive form.
func metaRoots(roots []Root) ([]incmeta.Root, error) {
	var out []incmeta.Root
	for _, r := range roots {
		if r.Name == "" || strings.ContainsAny(r.Name, "/\x00") {
			return nil, fmt.Errorf("changelog: invalid capture root name %q", r.Name)
		}
		if !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path || r.Path == "/" {
			return nil, fmt.Errorf("changelog: capture root %q: path %q must be absolute, clean and not /", r.Name, r.Path)
		}
		out = append(out, incmeta.Root{Name: r.Name, Path: r.Path, Prefix: strings.TrimPrefix(r.Path, "/")})
	}
	if _, err := checkMetaRoots(out, nil); err != nil {
		return nil, fmt.Errorf("changelog: %w", err)
	}
	return out, nil
}

func (c *Changelog) lock() (*fsutil.Lock, error) {
	return fsutil.LockFile(filepath.Join(c.dir, lockFile))
}

func (c *Changelog) incrementPath(pos int) string {
	return filepath.Join(c.dir, incrementsDir, IncrementName(pos))
}

// positions lists the stored increment positions in order.
func (c *Changelog) positions() ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, incrementsDir))
	if err != nil {
		return nil, fmt.Errorf("read increments: %w", err)
	}
	var out []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".tgz") || len(name) != 10 || !e.Type().IsRegular() {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(name, ".tgz"))
		if err != nil || n < 0 {
			continue
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}

// behind reports the stored increments past the state's last position: a
// crash lost the state's last records (the journal is not fsynced, see
// advanceState) or came between storing an increment and advancing the
// state. Each such increment is complete and durable (it is linked into
// place only once fsynced), so it stays in the sequence; the state, behind
// it, cannot say what the next increment must hold, so the next capture
// is a full one (see stateForCapture).
func (c *Changelog) behind(s *captureState) (last int, ok bool, _ error) {
	pos, err := c.positions()
	if err != nil {
		return 0, false, err
	}
	if len(pos) == 0 || pos[len(pos)-1] <= s.LastPosition {
		return 0, false, nil
	}
	return pos[len(pos)-1], true, nil
}

// Info summarises one stored increment for listing.
type Info struct {
	Position int    `json:"position"`
	Kind     string `json:"kind"`
	Session  string `json:"session_id,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
	Files    int    `json:"files"`
	Deleted  int    `json:"deleted"`
	Bytes    int64  `json:"bytes"`
	Size     int64  `json:"size"`
	// Removed names the capture roots this increment removes.
	Removed   []string  `json:"removed_roots,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Changes names the paths the call created, modified and deleted and
	// the bytes it changed (nil for increments captured before it was
	// recorded).
	Changes *incmeta.Changes `json:"changes,omitempty"`
	// ToolUseID is the host's id of the tool call that made the increment.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// Concurrent names the other sessions whose turn ran when the position
	// was taken (parallel sessions): their writes may be mixed into it.
	Concurrent []string `json:"concurrent_sessions,omitempty"`
	// Hub is what the checkout's Hub holds of the position, as the upload
	// queue last heard (nil when nothing was ever uploaded).
	Hub *HubStatus `json:"hub,omitempty"`
	// Outside, on an increment of kind "outside", says where the work
	// done outside the agent was found (see CaptureOutside).
	Outside *incmeta.Outside `json:"outside,omitempty"`
	// Holds lists the earlier positions whose increments could not be
	// stored and whose writes this increment carries.
	Holds []incmeta.Held `json:"holds,omitempty"`
	// Reverted is the tool call a revert increment undid.
	Reverted *int   `json:"reverted,omitempty"`
	Err      string `json:"error,omitempty"`
}

// List reads the metadata of every stored increment, in position order. An
// unreadable increment is listed with Err set.
func (c *Changelog) List() ([]Info, error) {
	pos, err := c.positions()
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, p := range pos {
		inf := Info{Position: p}
		path := c.incrementPath(p)
		if fi, err := os.Lstat(path); err == nil {
			inf.Size = fi.Size()
		}
		m, err := ReadMeta(path)
		if err != nil {
			inf.Err = err.Error()
		} else {
			inf.Kind, inf.Session, inf.Tool, inf.Failed = m.Kind, m.SessionID, m.Tool, m.Failed
			inf.Files, inf.Deleted, inf.Bytes, inf.Removed, inf.CreatedAt = m.Files, m.Deleted, m.Bytes, m.RemovedRoots, m.CreatedAt
			inf.Changes, inf.ToolUseID, inf.Concurrent = m.Changes, m.ToolUseID, m.ConcurrentSessions
			inf.Outside, inf.Holds, inf.Reverted = m.Outside, m.Holds, m.Reverted
		}
		out = append(out, inf)
	}
	if hs := c.hubStatuses(pos); hs != nil {
		for i := range out {
			out[i].Hub = hs[out[i].Position]
		}
	}
	return out, nil
}

// configFile holds the capture roots of a changelog directory.
const configFile = "config.json"

type dirConfig struct {
	Version int    `json:"version"`
	Roots   []Root `json:"roots"`
}

// DefaultDir returns the changelog directory of the checkout at root under
// the agentscm config directory: one per checkout, outside every root.
func DefaultDir(configDir, root string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(configDir, "changelog", hex.EncodeToString(sum[:8]))
}

// LoadRoots reads the capture roots recorded in the changelog directory dir;
// it returns fs.ErrNotExist (wrapped) when none were recorded yet.
func LoadRoots(dir string) ([]Root, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, configFile), 1<<20)
	if err != nil {
		return nil, err
	}
	var c dirConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("changelog config %s: %w", filepath.Join(dir, configFile), err)
	}
	if c.Version != 1 {
		return nil, fmt.Errorf("changelog config version %d is not supported", c.Version)
	}
	if _, err := metaRoots(c.Roots); err != nil {
		return nil, err
	}
	return c.Roots, nil
}

// SaveRoots records the changelog's capture roots in its directory.
func (c *Changelog) SaveRoots() error {
	b, err := json.MarshalIndent(dirConfig{Version: 1, Roots: c.opts.Roots}, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(c.dir, configFile), append(b, '\n'), fsutil.FileMode)
}

// Roots returns the capture roots.
func (c *Changelog) Roots() []Root { return append([]Root(nil), c.opts.Roots...) }
