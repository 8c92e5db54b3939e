package source

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Transform kinds: what can make the materialized working bytes differ
// from the tree's blobs.
const (
	TransformFilter   = "filter"                // a configured clean/smudge/process filter driver
	TransformEncoding = "working_tree_encoding" // working-tree-encoding attribute
	TransformIdent    = "ident"                 // ident attribute ($Id$ expansion)
	TransformEOL      = "eol"                   // eol=crlf attribute
	TransformCRLF     = "crlf"                  // core.autocrlf=true or core.eol=crlf
)

// settings are the Git settings that bear on transforms.
type settings struct {
	crlf     bool            // core.autocrlf=true or core.eol=crlf
	filters  map[string]bool // filter drivers with a clean, smudge or process command
	attrFile string          // core.attributesFile
}

// readSettings runs one `git config --get-regexp` for the settings that can
// transform working bytes (exit status 1: none set).
func readSettings(ctx context.Context, root string) (settings, error) {
	s := settings{filters: map[string]bool{}}
	out, err := RunGit(ctx, root, 1<<20, "config", "-z", "--get-regexp", `^(core\.(autocrlf|eol|attributesfile)|filter\..*\.(clean|smudge|process))$`)
	if err != nil {
		if exitCode(err) == 1 {
			return s, nil
		}
		return s, err
	}
	for _, kv := range bytes.Split(out, []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "\n")
		switch {
		case k == "core.autocrlf":
			s.crlf = s.crlf || strings.EqualFold(v, "true")
		case k == "core.eol":
			s.crlf = s.crlf || strings.EqualFold(v, "crlf")
		case k == "core.attributesfile":
			s.attrFile = v
		case strings.HasPrefix(k, "filter."):
			if name, ok := strings.CutPrefix(k, "filter."); ok && strings.TrimSpace(v) != "" {
				s.filters[name[:strings.LastIndexByte(name, '.')]] = true
			}
		}
	}
	return s, nil
}

// attributeSourcesOutside reports whether an attributes file outside the
// worktree can apply: $GIT_DIR/info/attributes (infoAttr), core.attributesFile
// or the user's $XDG_CONFIG_HOME/git/attributes, or the system's
// /etc/gitattributes.
func attributeSourcesOutside(infoAttr string, s settings) bool {
	cands := []string{infoAttr, "/etc/gitattributes"}
	if s.attrFile != "" {
		f := s.attrFile
		if rest, ok := strings.CutPrefix(f, "~/"); ok {
			if h, err := os.UserHomeDir(); err == nil {
				f = filepath.Join(h, rest)
			}
		}
		cands = append(cands, f)
	} else if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
		cands = append(cands, filepath.Join(x, "git", "attributes"))
	} else if h, err := os.UserHomeDir(); err == nil {
		cands = append(cands, filepath.Join(h, ".config", "git", "attributes"))
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && st.Size() > 0 {
			return true
		}
	}
	return false
}

// transformCandidates lists the tracked and non-ignored untracked paths
// whose attributes may transform their bytes, through pathspec attribute
// magic so git prints only those (never the whole index): ident, eol=crlf
// and a filter naming a configured driver in one ls-files, a specified
// working-tree-encoding in another (an exclude pathspec cannot share a
// call with the others). Output past maxGitOutput stops the capture
// (path_bound).
func transformCandidates(ctx context.Context, root string, s settings) ([]string, error) {
	specs := []string{":(attr:ident)", ":(attr:eol=crlf)"}
	for _, d := range sortedKeys(s.filters) {
		specs = append(specs, ":(attr:filter="+escapeAttrValue(d)+")")
	}
	var (
		wg    sync.WaitGroup
		outs  [2][]byte
		errs  [2]error
		calls = [2][]string{specs, {".", ":(exclude,attr:!working-tree-encoding)"}}
	)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = RunGit(ctx, root, maxGitOutput, append([]string{"ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"}, calls[i]...)...)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	var paths []string
	for i := range calls {
		if errs[i] != nil {
			if exitCode(errs[i]) < 0 && ctx.Err() == nil {
				return nil, stop(StopPathBound, "", errs[i])
			}
			return nil, errs[i]
		}
		for _, p := range bytes.Split(outs[i], []byte{0}) {
			if len(p) > 0 && !seen[string(p)] {
				seen[string(p)] = true
				paths = append(paths, string(p))
			}
		}
	}
	return paths, nil
}

// escapeAttrValue backslash-escapes every byte of a pathspec attribute
// value that is not a letter, digit, '_', '.' or '-'.
func escapeAttrValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// attrTransforms runs `git check-attr` for paths (NUL-separated input)
// and returns the transform kinds their attributes select.
func attrTransforms(ctx context.Context, root string, paths []string, s settings) (map[string]bool, error) {
	kinds := map[string]bool{}
	if len(paths) == 0 {
		return kinds, nil
	}
	in := []byte(strings.Join(paths, "\x00") + "\x00")
	out, err := runGitIn(ctx, root, maxGitOutput, in, "check-attr", "-z", "--stdin", "filter", "ident", "eol", "working-tree-encoding")
	if err != nil {
		return nil, err
	}
	f := bytes.Split(out, []byte{0})
	for i := 0; i+2 < len(f); i += 3 {
		attr, val := string(f[i+1]), string(f[i+2])
		if val == "unspecified" || val == "unset" {
			continue
		}
		switch attr {
		case "filter":
			if s.filters[val] {
				kinds[TransformFilter] = true
			}
		case "ident":
			if val == "set" {
				kinds[TransformIdent] = true
			}
		case "eol":
			if val == "crlf" {
				kinds[TransformEOL] = true
			}
		case "working-tree-encoding":
			kinds[TransformEncoding] = true
		}
	}
	return kinds, nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
