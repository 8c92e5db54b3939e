package redact

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// The secret-file set: files whose bytes never leave the machine, whatever
// the capture mode. The changelog keeps them in its local increments only
// (an uploaded increment names each by path and digest, without its bytes);
// docs/privacy.md lists the set. It is the one definition: every path that
// sends a workspace file off the machine asks FileSet.Withheld.

// DefaultWithheld are the patterns withheld by default: environment files,
// keys and key stores, credential files, infrastructure state, and the
// agents' own settings (which hold hooks, tokens in "env" blocks and
// permissions).
var DefaultWithheld = []string{
	".env",
	".env.*",
	"*.pem",
	"*.key",
	"*.p12",
	"*.pfx",
	"id_rsa*",
	"id_dsa*",
	"id_ecdsa*",
	"id_ed25519*",
	".ssh/",
	".netrc",
	"_netrc",
	".npmrc",
	".pypirc",
	".pgpass",
	".git-credentials",
	".docker/config.json",
	".aws/credentials",
	".config/gcloud/",
	"application_default_credentials.json",
	".azure/",
	".kube/config",
	"*.tfstate",
	"*.tfstate.*",
	".claude/settings*.json",
	".codex/",
	".gemini/",
}

// DefaultTemplates are the files the default patterns match that are
// templates, not secrets: they are shared unless a --withhold pattern names
// them.
var DefaultTemplates = []string{
	".env.example",
	".env.*.example",
	".env.sample",
	".env.*.sample",
	".env.template",
	".env.*.template",
	".env.dist",
}

// FileSet is the secret-file set of one checkout: the defaults adjusted by
// the user's Withhold and Share patterns (changelog enable --withhold,
// --share).
//
// A pattern is matched against a slash path relative to its capture root,
// one path element per pattern element, with path.Match's wildcards in each;
// "**" stands for any number of elements. A pattern is unanchored (it
// matches the trailing elements of a path at any depth) unless it starts
// with "/". A pattern ending in "/" names a directory: it matches every
// path below it.
type FileSet struct {
	// Withhold patterns are withheld even when a Share pattern or a
	// template matches.
	Withhold []string `json:"withhold,omitempty"`
	// Share patterns take paths out of the default set.
	Share []string `json:"share,omitempty"`
}

// ErrBadPattern reports a pattern FileSet cannot match with.
var ErrBadPattern = errors.New("invalid secret-file pattern")

// CheckPattern reports whether p is a usable pattern.
func CheckPattern(p string) error {
	if strings.TrimSpace(p) == "" || strings.Trim(p, "/") == "" {
		return fmt.Errorf("%w %q: empty", ErrBadPattern, p)
	}
	for _, el := range patternElems(p) {
		if _, err := path.Match(el, ""); err != nil {
			return fmt.Errorf("%w %q: %v", ErrBadPattern, p, err)
		}
	}
	return nil
}

// Withheld reports whether the file at rel (a slash path relative to its
// capture root) is withheld, and the pattern that decided it.
func (s FileSet) Withheld(rel string) (pattern string, withheld bool) {
	if rel == "" {
		return "", false
	}
	elems := strings.Split(rel, "/")
	for _, p := range s.Withhold {
		if matchPattern(p, elems) {
			return p, true
		}
	}
	for _, p := range s.Share {
		if matchPattern(p, elems) {
			return "", false
		}
	}
	for _, p := range DefaultTemplates {
		if matchPattern(p, elems) {
			return "", false
		}
	}
	for _, p := range DefaultWithheld {
		if matchPattern(p, elems) {
			return p, true
		}
	}
	return "", false
}

// Empty reports whether s only holds the defaults.
func (s FileSet) Empty() bool { return len(s.Withhold) == 0 && len(s.Share) == 0 }

// patternElems splits p into the elements it matches, "**" first when it is
// unanchored and last when it names a directory.
func patternElems(p string) []string {
	p = strings.TrimPrefix(p, "./")
	var out []string
	if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "**/") {
		out = append(out, "**")
	}
	dir := strings.HasSuffix(p, "/")
	for _, el := range strings.Split(strings.Trim(p, "/"), "/") {
		if el != "" && el != "." {
			out = append(out, el)
		}
	}
	if dir {
		out = append(out, "*", "**")
	}
	return out
}

func matchPattern(p string, elems []string) bool {
	return matchElems(patternElems(p), elems)
}

func matchElems(pat, elems []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(elems); i++ {
				if matchElems(pat[1:], elems[i:]) {
					return true
				}
			}
			return false
		}
		if len(elems) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], elems[0]); err != nil || !ok {
			return false
		}
		pat, elems = pat[1:], elems[1:]
	}
	return len(elems) == 0
}
