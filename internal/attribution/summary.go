package attribution

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
)

// Count is the lines one author added.
type Count struct {
	// Kind is KindAgent (with Session), KindOutside, KindBeforeCapture or
	// KindRewind.
	Kind    string `json:"kind"`
	Session string `json:"session_id,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Lines   int    `json:"lines"`
}

// FileSummary is the lines added to one file, by author.
type FileSummary struct {
	Path    string  `json:"path"`
	OldPath string  `json:"old_path,omitempty"`
	Added   int     `json:"added"`
	By      []Count `json:"by"`
}

// Summary is the lines the working tree adds against a revision, per file
// and in total, by author.
type Summary struct {
	Since    string        `json:"since"`
	Revision string        `json:"revision"`
	Added    int           `json:"added"`
	Total    []Count       `json:"total"`
	Files    []FileSummary `json:"files"`
	// Skipped lists changed files not attributed (binary, or unreadable
	// by the changelog), with why.
	Skipped []string `json:"skipped,omitempty"`
}

// key groups owners into authors.
func key(o *Owner) Count {
	if o.Kind == KindAgent {
		return Count{Kind: KindAgent, Session: o.Session, Agent: o.Agent}
	}
	return Count{Kind: o.Kind}
}

// tally adds the owners of the added lines to counts.
func tally(counts map[Count]int, owners []*Owner, added []bool) int {
	n := 0
	for i, o := range owners {
		if added[i] {
			counts[key(o)]++
			n++
		}
	}
	return n
}

func sorted(counts map[Count]int) []Count {
	out := []Count{}
	for c, n := range counts {
		c.Lines = n
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Lines != out[j].Lines {
			return out[i].Lines > out[j].Lines
		}
		return out[i].Kind+out[i].Session < out[j].Kind+out[j].Session
	})
	return out
}

// addedLines marks the lines of cur that old does not keep.
func addedLines(old, cur []string) []bool {
	out := make([]bool, len(cur))
	for i, k := range Match(old, cur) {
		out[i] = k < 0
	}
	return out
}

// Summarize counts, per file and in total, the lines the working tree adds
// against the revision since (renames followed as git detects them), by
// the session that wrote them or outside the agent.
func (r *Repo) Summarize(ctx context.Context, since string) (*Summary, error) {
	rev, err := gitOutput(ctx, r.root, "rev-parse", "--verify", since+"^{commit}")
	if err != nil {
		return nil, err
	}
	s := &Summary{Since: since, Revision: strings.TrimSpace(string(rev)), Files: []FileSummary{}}
	changed, err := r.changedFiles(ctx, s.Revision)
	if err != nil {
		return nil, err
	}
	var rels []string
	for _, ch := range changed {
		rels = append(rels, ch.path)
	}
	r.Prefetch(rels)
	total := map[Count]int{}
	for _, ch := range changed {
		cur, err := readFileIn(r.root, ch.path)
		if err != nil {
			continue // deleted: adds nothing
		}
		var old []byte
		if ch.old != "" {
			old, _ = r.gitShow(ctx, s.Revision, ch.old)
		}
		if bytes.IndexByte(cur, 0) >= 0 || bytes.IndexByte(old, 0) >= 0 {
			s.Skipped = append(s.Skipped, ch.path+": binary")
			continue
		}
		b, err := r.Blame(ctx, ch.path, -1)
		if err != nil {
			s.Skipped = append(s.Skipped, fmt.Sprintf("%s: %v", ch.path, err))
			continue
		}
		owners := make([]*Owner, len(b.Lines))
		lines := make([]string, len(b.Lines))
		for i, l := range b.Lines {
			owners[i], lines[i] = l.Owner, l.Text
		}
		counts := map[Count]int{}
		n := tally(counts, owners, addedLines(SplitLines(old), lines))
		if n == 0 {
			continue
		}
		for c, k := range counts {
			total[c] += k
		}
		fs := FileSummary{Path: ch.path, Added: n, By: sorted(counts)}
		if ch.old != ch.path {
			fs.OldPath = ch.old
		}
		s.Files = append(s.Files, fs)
		s.Added += n
	}
	s.Total = sorted(total)
	return s, nil
}

type changedFile struct{ path, old string }

// parseNameStatus reads git's `--name-status -z` output: renamed and
// copied files with their old names, added ones without, deleted ones
// left out, every other one under its own name.
func parseNameStatus(out []byte) []changedFile {
	var files []changedFile
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for i := 0; i < len(f); i++ {
		st := f[i]
		if st == "" {
			continue
		}
		switch st[0] {
		case 'R', 'C':
			if i+2 < len(f) {
				files = append(files, changedFile{path: f[i+2], old: f[i+1]})
			}
			i += 2
		case 'A':
			if i+1 < len(f) {
				files = append(files, changedFile{path: f[i+1]})
			}
			i++
		case 'D':
			i++
		default:
			if i+1 < len(f) {
				files = append(files, changedFile{path: f[i+1], old: f[i+1]})
			}
			i++
		}
	}
	return files
}

// changedFiles lists the files of the working tree that differ from rev
// (tracked, with renames, and untracked not ignored).
func (r *Repo) changedFiles(ctx context.Context, rev string) ([]changedFile, error) {
	out, err := gitOutput(ctx, r.root, "diff", "--name-status", "-z", "-M", "--relative", rev, "--")
	if err != nil {
		return nil, err
	}
	files := parseNameStatus(out)
	un, err := gitOutput(ctx, r.root, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, err
	}
	for _, p := range strings.Split(string(un), "\x00") {
		if p != "" {
			files = append(files, changedFile{path: p})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}
