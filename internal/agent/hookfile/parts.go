package hookfile

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
)

// CombinedSubcommand marks the one hook entry of an event on which both
// the capture and the changelog are on: one process runs the capture and
// then the changelog increment (internal/hookrun's one hook pipeline).
const CombinedSubcommand = HookSubcommand + " --changelog"

// ChangelogEvents are the Claude Code events the changelog hook needs
// (changelog.HookEvents): the two tool finishes take an increment; a tool
// call's start and prompt submission capture the work done outside the
// agent since the last increment; prompt submission and the turn's or
// session's end keep the running-turn marker.
var ChangelogEvents = [...]string{"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit", "Stop", "SessionEnd"}

// Parts are the agentscm parts a settings file's Claude Code hooks run.
type Parts struct {
	Capture   bool `json:"capture"`
	Changelog bool `json:"changelog"`
}

// claudeMarkers are the markers of the Claude Code parts' entries.
var claudeMarkers = [...]string{HookSubcommand, ChangelogSubcommand, CombinedSubcommand}

// partsOf returns the parts a marker runs.
func partsOf(marker string) Parts {
	switch marker {
	case HookSubcommand:
		return Parts{Capture: true}
	case ChangelogSubcommand:
		return Parts{Changelog: true}
	case CombinedSubcommand:
		return Parts{Capture: true, Changelog: true}
	}
	return Parts{}
}

// subcommandFor returns the marker of an event's one entry for parts on
// it, "" for none.
func subcommandFor(p Parts) string {
	switch {
	case p.Capture && p.Changelog:
		return CombinedSubcommand
	case p.Capture:
		return HookSubcommand
	case p.Changelog:
		return ChangelogSubcommand
	}
	return ""
}

// InstalledParts reports which parts the marked Claude Code entries of the
// settings file at path run (a missing file runs none), and the executable
// (shell-quoted, as in the command) of the first such entry.
func InstalledParts(path string) (Parts, string, error) {
	root, err := readSettings(path)
	if err != nil || root == nil {
		return Parts{}, "", err
	}
	hooks, err := hooksObject(root)
	if err != nil {
		return Parts{}, "", err
	}
	var p Parts
	exe := ""
	for _, ev := range hooks.keys() {
		groups, err := decodeGroups(hooks, ev)
		if err != nil {
			return Parts{}, "", err
		}
		for _, g := range groups {
			items, err := entries(g)
			if err != nil {
				return Parts{}, "", err
			}
			for _, it := range items {
				var e hookEntry
				if json.Unmarshal(it, &e) != nil || e.Type != "command" {
					continue
				}
				m := markerOf(e.Command)
				ep := partsOf(m)
				if ep == (Parts{}) {
					continue
				}
				p.Capture, p.Changelog = p.Capture || ep.Capture, p.Changelog || ep.Changelog
				if exe == "" {
					exe = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(e.Command), " "+m))
				}
			}
		}
	}
	return p, exe, nil
}

// InstallParts makes the settings file at path run want: every Claude Code
// event of a part that is on holds exactly one marked agentscm entry, whose
// subcommand runs every part on that event (CombinedSubcommand where both
// are: one process per event), running exe; every other marked capture,
// changelog or combined entry is removed (an upgrade of an install that
// had two entries on the changelog's events). Entries that are not
// agentscm's, and other agents' marked entries, are kept untouched. An
// empty exe keeps the executable of the installed entries (InstalledParts).
// It reports whether the file changed; a missing file is created only when
// some part is on.
func InstallParts(path, exe string, want Parts) (bool, error) {
	quoted := ""
	if exe != "" {
		quoted = shellQuote(exe)
	} else if _, q, err := InstalledParts(path); err != nil {
		return false, err
	} else {
		quoted = q
	}
	on := want.Capture || want.Changelog
	if on && quoted == "" {
		return false, errors.New("no executable for the hook entries: none is installed and none was given")
	}
	// The capture-only events run the intake binary when it sits next to
	// the full hook binary; every other entry runs the full one.
	quoted, intake := hookExecutables(quoted)
	return editSettings(path, on, func(hooks *object) (bool, error) {
		events := append([]string(nil), hooks.keys()...)
		for _, ev := range HookEvents {
			if !slices.Contains(events, ev) {
				events = append(events, ev)
			}
		}
		changed := false
		for _, ev := range events {
			var p Parts
			p.Capture = want.Capture && slices.Contains(HookEvents[:], ev)
			p.Changelog = want.Changelog && slices.Contains(ChangelogEvents[:], ev)
			sub := subcommandFor(p)
			for _, m := range claudeMarkers {
				if m == sub {
					continue
				}
				c, err := removeEvent(hooks, ev, m)
				if err != nil {
					return false, err
				}
				changed = changed || c
			}
			if sub == "" {
				continue
			}
			run := quoted
			if p == (Parts{Capture: true}) {
				run = intake
			}
			c, err := installEvent(hooks, ev, run+" "+sub, HookTimeoutSeconds)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	})
}

// hookExecutables returns, for the shell-quoted executable of the hook
// entries, the one of the entries that run the changelog (the full hook
// binary) and the one of the capture-only entries: IntakeBinary when it is
// an executable regular file next to HookBinary, else the same. An
// installed IntakeBinary (as InstalledParts may report it) stands for the
// HookBinary next to it.
func hookExecutables(quoted string) (full, intake string) {
	raw := shellUnquote(quoted)
	if raw == "" || !filepath.IsAbs(raw) {
		return quoted, quoted
	}
	dir, base := filepath.Split(raw)
	if base == IntakeBinary {
		raw = filepath.Join(dir, HookBinary)
		quoted, base = shellQuote(raw), HookBinary
	}
	if base != HookBinary {
		return quoted, quoted
	}
	if in := filepath.Join(dir, IntakeBinary); isExecutableFile(in) {
		return quoted, shellQuote(in)
	}
	return quoted, quoted
}

// shellUnquote undoes shellQuote ("" when s is not in its form).
func shellUnquote(s string) string {
	if !strings.HasPrefix(s, "'") {
		if strings.ContainsAny(s, "'\" \t") {
			return ""
		}
		return s
	}
	if len(s) < 2 || !strings.HasSuffix(s, "'") {
		return ""
	}
	inner := s[1 : len(s)-1]
	out := strings.ReplaceAll(inner, `'\''`, "'")
	if shellQuote(out) != s {
		return ""
	}
	return out
}
