// Package buildinfo names the build a binary came from, the same way in
// every agentscm binary (the hook binaries included, so it links nothing
// but runtime/debug and debug/buildinfo), so that binaries of one build can
// be matched.
package buildinfo

import (
	"debug/buildinfo"
	"fmt"
	"runtime/debug"
	"strings"
)

// Stamp is set at link time by scripts/install.sh (-ldflags -X) to one
// value for every binary of one install; empty in a plain go build.
var Stamp string

// Version describes the running binary: the module version, the install
// stamp, the VCS revision and time, and whether the tree was modified.
func Version(prog string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return prog + " (no build information)"
	}
	return versionOf(prog, Stamp, bi)
}

func versionOf(prog, stamp string, bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", prog, v)
	if stamp != "" {
		fmt.Fprintf(&b, " build %s", stamp)
	}
	if rev != "" {
		fmt.Fprintf(&b, " commit %s%s", rev, modified)
	}
	if when != "" {
		fmt.Fprintf(&b, " (committed %s)", when)
	}
	fmt.Fprintf(&b, " %s", bi.GoVersion)
	if rev == "" && stamp == "" {
		b.WriteString(" (no VCS stamp: built with -buildvcs=false or outside a checkout)")
	}
	return b.String()
}

// BuildOf is the build a --version line names: the line without its
// program name, so that two binaries of one build (one install, or one
// go build of one tree) give the same string.
func BuildOf(versionLine string) string {
	line := strings.TrimSpace(versionLine)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	_, rest, _ := strings.Cut(line, " ")
	return strings.TrimSpace(rest)
}

// stampFlag is how scripts/install.sh sets Stamp, as the linker flags
// recorded in a binary's build information show it.
const stampFlag = "-X github.com/agentscm/agentscm/internal/buildinfo.Stamp="

// BuildOfFile is the build the binary at path names (what BuildOf gives
// for its --version line), read from its build information without
// running it: a hook can afford it.
func BuildOfFile(path string) (string, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return "", err
	}
	var stamp string
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		if _, rest, ok := strings.Cut(s.Value, stampFlag); ok {
			stamp, _, _ = strings.Cut(rest, " ")
			stamp = strings.Trim(stamp, `"'`)
		}
	}
	return BuildOf(versionOf("x", stamp, bi)), nil
}
