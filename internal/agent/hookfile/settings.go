// Package hookfile reads and writes the marked hook entries agentscm
// installs in a host's settings JSON (Claude Code's .claude/settings.local.json,
// Codex CLI's hooks.json, Gemini CLI's settings.json share the shape), and
// the Claude Code hook parts (capture, changelog) those entries run.
package hookfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// HookEvents are the eleven Claude Code lifecycle groups agentscm captures.
var HookEvents = [...]string{
	"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse",
	"PostToolUseFailure", "MessageDisplay", "Stop", "PreCompact",
	"SubagentStart", "SubagentStop", "SessionEnd",
}

// HookTimeoutSeconds is the host timeout of every installed hook.
const HookTimeoutSeconds = 20

// HookSubcommand is the agentscm command line (after the executable) that
// marks an installed capture hook.
const HookSubcommand = "change-capture hook-claude"

// ChangelogSubcommand marks an installed changelog hook.
const ChangelogSubcommand = "changelog hook-claude"

// markers are every subcommand that marks an agentscm hook entry.
// The other agents' adapters (internal/agent/codex, internal/agent/gemini)
// install their own marked subcommands into hook files of the same shape.
var markers = [...]string{HookSubcommand, ChangelogSubcommand, CombinedSubcommand,
	"change-capture hook-codex", "changelog hook-codex",
	"change-capture hook-gemini", "changelog hook-gemini"}

// maxSettingsBytes bounds a settings file we read and rewrite.
const maxSettingsBytes = 8 << 20

// toolEvents take a tool-name matcher.
func toolEvent(ev string) bool {
	return ev == "PreToolUse" || ev == "PostToolUse" || ev == "PostToolUseFailure" ||
		ev == "BeforeTool" || ev == "AfterTool" // Gemini CLI
}

// HookCommand returns the shell command of a marked capture hook that runs
// exe.
func HookCommand(exe string) string { return CommandFor(exe, HookSubcommand) }

// HookBinary is the lean capture hook binary (cmd/agentscm-hook): the same
// hook as `agentscm change-capture hook-claude`, linking only what the hook
// needs, so that the process started on every tool call starts faster.
const HookBinary = "agentscm-hook"

// IntakeBinary is the capture hook's intake binary (cmd/agentscm-hook-intake):
// only `change-capture hook-claude`, linking neither the Hub's store and
// client nor the changelog. When it sits next to HookBinary, the events on
// which the capture runs without the changelog run it (IntakeExecutable);
// it hands what needs the Hub to HookBinary.
const IntakeBinary = "agentscm-hook-intake"

// HookExecutable returns the executable an installed capture hook runs for
// the agentscm binary exe: the lean HookBinary in exe's directory when it is
// a regular file executable by someone, else exe itself. The hook command
// keeps the marking subcommand either way (agentscm-hook accepts exactly
// `change-capture hook-claude`).
func HookExecutable(exe string) string {
	if !filepath.IsAbs(exe) {
		return exe
	}
	lean := filepath.Join(filepath.Dir(exe), HookBinary)
	if isExecutableFile(lean) {
		return lean
	}
	return exe
}

// IntakeExecutable returns the executable an installed capture-only hook
// entry runs for the agentscm binary exe: IntakeBinary when it sits next
// to HookExecutable(exe) (it starts faster, and hands what needs the Hub
// to HookBinary), else HookExecutable(exe).
func IntakeExecutable(exe string) string {
	lean := HookExecutable(exe)
	if filepath.Base(lean) != HookBinary {
		return lean
	}
	if in := filepath.Join(filepath.Dir(lean), IntakeBinary); isExecutableFile(in) {
		return in
	}
	return lean
}

// isExecutableFile reports whether path is a regular file executable by
// someone.
func isExecutableFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// CommandFor returns the shell command of a marked hook: exe followed by
// the marking subcommand.
func CommandFor(exe, subcommand string) string {
	return shellQuote(exe) + " " + subcommand
}

// IsMarkedCommand reports whether a hook command is one agentscm installed:
// an executable followed by exactly one of the marking subcommands.
func IsMarkedCommand(cmd string) bool { return markerOf(cmd) != "" }

// markerOf returns the marking subcommand of a hook command, or "".
func markerOf(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	for _, m := range markers {
		if rest, ok := strings.CutSuffix(cmd, " "+m); ok && strings.TrimSpace(rest) != "" {
			return m
		}
	}
	return ""
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// InstallHooks adds a marked hook running command for each of events to the
// settings file at path, creating it (and its directory) when missing. It
// keeps every other key and hook entry unchanged, replaces an existing marked
// entry instead of adding a second one, and reports whether the file changed.
func InstallHooks(path, command string, events []string) (bool, error) {
	return InstallHooksWith(path, command, events, HookTimeoutSeconds)
}

// InstallHooksWith is InstallHooks with the entries' timeout value (in the
// host's unit: seconds for Claude Code and Codex, milliseconds for Gemini
// CLI).
func InstallHooksWith(path, command string, events []string, timeout int) (bool, error) {
	if markerOf(command) == "" {
		return false, fmt.Errorf("hook command %q is not a marked agentscm hook", command)
	}
	return editSettings(path, true, func(hooks *object) (bool, error) {
		changed := false
		for _, ev := range events {
			c, err := installEvent(hooks, ev, command, timeout)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	})
}

// RemoveHooks removes every marked agentscm hook entry (capture and
// changelog) from the settings file at path, keeping everything else. A
// missing file is not an error.
func RemoveHooks(path string) (bool, error) { return RemoveHooksFor(path, "") }

// RemoveHooksFor removes the marked entries of one subcommand (every marker
// when subcommand is empty) from the settings file at path.
func RemoveHooksFor(path, subcommand string) (bool, error) {
	return editSettings(path, false, func(hooks *object) (bool, error) {
		changed := false
		for _, ev := range hooks.keys() {
			c, err := removeEvent(hooks, ev, subcommand)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
		return changed, nil
	})
}

// MarkedEvents lists the events of path that have a marked agentscm hook.
func MarkedEvents(path string) ([]string, error) { return MarkedEventsFor(path, "") }

// MarkedEventsFor lists the events of path with a marked hook of one
// subcommand (any marker when subcommand is empty). The combined entry
// (CombinedSubcommand) counts for HookSubcommand and ChangelogSubcommand
// too: it runs both.
func MarkedEventsFor(path, subcommand string) ([]string, error) {
	root, err := readSettings(path)
	if err != nil || root == nil {
		return nil, err
	}
	hooks, err := hooksObject(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range hooks.keys() {
		groups, err := decodeGroups(hooks, ev)
		if err != nil {
			return nil, err
		}
		for _, g := range groups {
			if n, _ := countCovering(g, subcommand); n > 0 {
				out = append(out, ev)
				break
			}
		}
	}
	return out, nil
}

func readSettings(path string) (*object, error) {
	b, err := fsutil.ReadFileNoFollow(path, maxSettingsBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return &object{}, nil
	}
	o, err := parseObject(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return o, nil
}

func editSettings(path string, create bool, fn func(hooks *object) (bool, error)) (bool, error) {
	root, err := readSettings(path)
	if err != nil {
		return false, err
	}
	if root == nil {
		if !create {
			return false, nil
		}
		root = &object{}
	}
	hooks, err := hooksObject(root)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	changed, err := fn(hooks)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return false, nil
	}
	if len(hooks.fields) == 0 {
		root.del("hooks")
	} else {
		raw, err := hooks.marshal()
		if err != nil {
			return false, err
		}
		root.set("hooks", raw)
	}
	out, err := root.marshal()
	if err != nil {
		return false, err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return false, fmt.Errorf("format settings: %w", err)
	}
	pretty.WriteByte('\n')
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	perm := fs.FileMode(0o644)
	if fi, err := os.Lstat(path); err == nil {
		perm = fi.Mode().Perm()
	}
	if err := fsutil.WriteAtomic(path, pretty.Bytes(), perm); err != nil {
		return false, err
	}
	return true, nil
}

func hooksObject(root *object) (*object, error) {
	raw, ok := root.get("hooks")
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return &object{}, nil
	}
	h, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("\"hooks\" is not a JSON object: %w", err)
	}
	return h, nil
}

// group is one matcher group of an event: {"matcher": ..., "hooks": [...]}.
type group = *object

func decodeGroups(hooks *object, ev string) ([]group, error) {
	raw, ok := hooks.get(ev)
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("hooks.%s is not an array: %w", ev, err)
	}
	out := make([]group, 0, len(items))
	for i, it := range items {
		g, err := parseObject(it)
		if err != nil {
			return nil, fmt.Errorf("hooks.%s[%d]: %w", ev, i, err)
		}
		out = append(out, g)
	}
	return out, nil
}

func encodeGroups(hooks *object, ev string, groups []group) error {
	if len(groups) == 0 {
		hooks.del(ev)
		return nil
	}
	items := make([]json.RawMessage, len(groups))
	for i, g := range groups {
		b, err := g.marshal()
		if err != nil {
			return err
		}
		items[i] = b
	}
	b, err := json.Marshal(items)
	if err != nil {
		return err
	}
	hooks.set(ev, b)
	return nil
}

type hookEntry struct {
	Type    string `json:"type"`
	Command string `json:"command"`
}

// entries decodes a group's hook list, keeping each entry's raw bytes.
func entries(g group) ([]json.RawMessage, error) {
	raw, ok := g.get("hooks")
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("a hook group's \"hooks\" is not an array: %w", err)
	}
	return items, nil
}

// isMarkedEntry reports a marked entry of subcommand (any marker when
// subcommand is empty).
func isMarkedEntry(raw json.RawMessage, subcommand string) bool {
	var e hookEntry
	if json.Unmarshal(raw, &e) != nil || e.Type != "command" {
		return false
	}
	m := markerOf(e.Command)
	return m != "" && (subcommand == "" || m == subcommand)
}

func countMarked(g group, subcommand string) (int, error) {
	items, err := entries(g)
	n := 0
	for _, it := range items {
		if isMarkedEntry(it, subcommand) {
			n++
		}
	}
	return n, err
}

// countCovering is countMarked where a combined entry also counts for the
// capture and the changelog subcommand.
func countCovering(g group, subcommand string) (int, error) {
	n, err := countMarked(g, subcommand)
	if err == nil && (subcommand == HookSubcommand || subcommand == ChangelogSubcommand) {
		var c int
		c, err = countMarked(g, CombinedSubcommand)
		n += c
	}
	return n, err
}

func markedEntry(command string, timeout int) json.RawMessage {
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}{"command", command, timeout})
	return b
}

func wantMatcher(ev string) string {
	if toolEvent(ev) {
		return "*"
	}
	return ""
}

// installEvent makes ev hold exactly one marked entry with command, in a
// group of its own.
func installEvent(hooks *object, ev, command string, timeout int) (bool, error) {
	marker := markerOf(command)
	groups, err := decodeGroups(hooks, ev)
	if err != nil {
		return false, err
	}
	want := markedEntry(command, timeout)
	found := false
	changed := false
	kept := groups[:0]
	for _, g := range groups {
		items, err := entries(g)
		if err != nil {
			return false, err
		}
		var rest []json.RawMessage
		for _, it := range items {
			if !isMarkedEntry(it, marker) {
				rest = append(rest, it)
				continue
			}
			if !found && bytes.Equal(compact(it), want) && matcherOf(g) == wantMatcher(ev) && len(items) == 1 {
				found = true
				rest = append(rest, it)
				continue
			}
			changed = true // a stale or duplicate marked entry
		}
		if len(rest) == len(items) {
			kept = append(kept, g)
			continue
		}
		if len(rest) == 0 {
			continue
		}
		if err := setEntries(g, rest); err != nil {
			return false, err
		}
		kept = append(kept, g)
	}
	if !found {
		g := &object{}
		if m := wantMatcher(ev); m != "" {
			mb, _ := json.Marshal(m)
			g.set("matcher", mb)
		}
		if err := setEntries(g, []json.RawMessage{want}); err != nil {
			return false, err
		}
		kept = append(kept, g)
		changed = true
	}
	if !changed {
		return false, nil
	}
	return true, encodeGroups(hooks, ev, kept)
}

func matcherOf(g group) string {
	raw, ok := g.get("matcher")
	if !ok {
		return ""
	}
	var m string
	_ = json.Unmarshal(raw, &m)
	return m
}

func setEntries(g group, items []json.RawMessage) error {
	b, err := json.Marshal(items)
	if err != nil {
		return err
	}
	g.set("hooks", b)
	return nil
}

func compact(raw json.RawMessage) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

// removeEvent drops the marked entries of ev, and groups left empty by that.
func removeEvent(hooks *object, ev, subcommand string) (bool, error) {
	groups, err := decodeGroups(hooks, ev)
	if err != nil {
		return false, err
	}
	changed := false
	kept := groups[:0]
	for _, g := range groups {
		items, err := entries(g)
		if err != nil {
			return false, err
		}
		var rest []json.RawMessage
		for _, it := range items {
			if !isMarkedEntry(it, subcommand) {
				rest = append(rest, it)
			}
		}
		if len(rest) == len(items) {
			kept = append(kept, g)
			continue
		}
		changed = true
		if len(rest) == 0 {
			continue
		}
		if err := setEntries(g, rest); err != nil {
			return false, err
		}
		kept = append(kept, g)
	}
	if !changed {
		return false, nil
	}
	return true, encodeGroups(hooks, ev, kept)
}
