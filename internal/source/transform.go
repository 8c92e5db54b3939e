package source

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
