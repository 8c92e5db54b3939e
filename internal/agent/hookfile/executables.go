package hookfile

import (
	"encoding/json"
	"slices"
	"strings"
)

// MarkedHook is one marked agentscm hook entry of a settings file: its
// event, its subcommand (the marker) and the executable it runs, unquoted
// ("" when the command's executable is not in the form agentscm writes).
type MarkedHook struct {
	Event      string `json:"event"`
	Subcommand string `json:"subcommand"`
	Executable string `json:"executable"`
}

// MarkedHooks lists the marked agentscm hook entries (of every agent) of
// the settings or hooks file at path, in file order; a missing file has
// none.
func MarkedHooks(path string) ([]MarkedHook, error) {
	root, err := readSettings(path)
	if err != nil || root == nil {
		return nil, err
	}
	hooks, err := hooksObject(root)
	if err != nil {
		return nil, err
	}
	var out []MarkedHook
	for _, ev := range hooks.keys() {
		groups, err := decodeGroups(hooks, ev)
		if err != nil {
			return nil, err
		}
		for _, g := range groups {
			items, err := entries(g)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				var e hookEntry
				if json.Unmarshal(it, &e) != nil || e.Type != "command" {
					continue
				}
				m := markerOf(e.Command)
				if m == "" {
					continue
				}
				quoted := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(e.Command), " "+m))
				out = append(out, MarkedHook{Event: ev, Subcommand: m, Executable: shellUnquote(quoted)})
			}
		}
	}
	return out, nil
}

// HookExecutables is the distinct executables the marked hooks run, in
// first-seen order.
func HookExecutables(hooks []MarkedHook) []string {
	var out []string
	for _, h := range hooks {
		if h.Executable != "" && !slices.Contains(out, h.Executable) {
			out = append(out, h.Executable)
		}
	}
	return out
}
