package attribution

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/agentscm/agentscm/internal/changelog"
)

// Line is one line of a blamed file and who last wrote it.
type Line struct {
	Number int    `json:"line"`
	Text   string `json:"text"`
	Owner  *Owner `json:"owner"`
}

// FileBlame is who last wrote each line of one file.
type FileBlame struct {
	Path string `json:"path"`
	// At is the position the file was blamed at (nil: as it is now).
	At          *int     `json:"at,omitempty"`
	RenamedFrom []string `json:"renamed_from,omitempty"`
	Lines       []Line   `json:"lines"`
}

// ErrNoFile reports a file that does not exist (now, or at the position
// asked for).
var ErrNoFile = errors.New("no such file")

// ErrNoPosition reports a position the changelog does not hold.
var ErrNoPosition = errors.New("no such position in the changelog")

// Blame attributes each line of the file rel (a slash path in the
// checkout): as it is now when at < 0, else as it was right after
// position at.
func (r *Repo) Blame(ctx context.Context, rel string, at int) (*FileBlame, error) {
	if at >= 0 && !slices.ContainsFunc(r.infos, func(i changelog.Info) bool { return i.Position == at }) {
		return nil, fmt.Errorf("position %d: %w", at, ErrNoPosition)
	}
	h, err := r.FileHistory(ctx, rel, at)
	if err != nil {
		return nil, err
	}
	if at < 0 {
		b, err := os.ReadFile(filepath.Join(r.root, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", rel, ErrNoFile)
		}
		if err != nil {
			return nil, err
		}
		h.add(Version{Owner: ownerUncaptured, Present: true, Lines: SplitLines(b)}, -1)
	}
	n := len(h.Versions)
	if n == 0 || !h.Versions[n-1].Present {
		return nil, fmt.Errorf("%s at position %d: %w", rel, at, ErrNoFile)
	}
	owners := Attribute(h.Versions)
	fb := &FileBlame{Path: rel, RenamedFrom: h.RenamedFrom, Lines: []Line{}}
	if at >= 0 {
		fb.At = &at
	}
	for i, text := range h.Versions[n-1].Lines {
		fb.Lines = append(fb.Lines, Line{Number: i + 1, Text: text, Owner: r.Owner(owners[n-1][i])})
	}
	return fb, nil
}

// OwnersOf attributes content (the file rel as a commit or another
// revision holds it) against rel's captured history: lines the captured
// versions hold keep their owners; every other line is outside the agent,
// not captured.
func (r *Repo) OwnersOf(ctx context.Context, rel string, content []byte) ([]*Owner, error) {
	h, err := r.FileHistory(ctx, rel, -1)
	if err != nil {
		return nil, err
	}
	h.add(Version{Owner: ownerUncaptured, Present: true, Lines: SplitLines(content)}, -1)
	owners := Attribute(h.Versions)
	last := owners[len(owners)-1]
	out := make([]*Owner, len(last))
	for i, o := range last {
		out[i] = r.Owner(o)
	}
	return out, nil
}

// readFileIn reads the slash path rel under root.
func readFileIn(root, rel string) ([]byte, error) {
	return os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
}
