package capsule

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A file name need not be valid UTF-8, but a JSON string holds only UTF-8:
// encoding/json writes each invalid byte as U+FFFD. A capsule keeps such a
// name byte-exact beside its display form: the JSON field holds what
// encoding/json writes, and a raw name (base64 in JSON) holds the bytes.
// The base manifest and the stat cache quote names byte-exactly already.

// RawName is the exact bytes of one name in a manifest's changes or removed
// list whose JSON string cannot hold them.
type RawName struct {
	// Field is changes.path, changes.target or removed.
	Field string `json:"field"`
	Index int    `json:"index"`
	Bytes []byte `json:"bytes"`
}

// maxRawNames bounds the raw names a manifest may list.
const maxRawNames = maxEntries

// rawNamesOf lists the names of m's changes and removed paths that are not
// valid UTF-8 (nil when there are none).
func rawNamesOf(m *Manifest) []RawName {
	var out []RawName
	for i := range m.Changes {
		e := &m.Changes[i]
		if !utf8.ValidString(e.Path) {
			out = append(out, RawName{Field: "changes.path", Index: i, Bytes: []byte(e.Path)})
		}
		if !utf8.ValidString(e.Target) {
			out = append(out, RawName{Field: "changes.target", Index: i, Bytes: []byte(e.Target)})
		}
	}
	for i, p := range m.Removed {
		if !utf8.ValidString(p) {
			out = append(out, RawName{Field: "removed", Index: i, Bytes: []byte(p)})
		}
	}
	return out
}

// applyRawNames puts the raw names of a manifest read from JSON back in
// place. Each must be invalid UTF-8 and stand where a display form of
// exactly those bytes stands, so a tampered list cannot rename a path.
func (m *Manifest) applyRawNames() error {
	if len(m.RawNames) > maxRawNames {
		return fmt.Errorf("too many raw names")
	}
	for _, rn := range m.RawNames {
		var slot *string
		switch {
		case rn.Field == "changes.path" && rn.Index >= 0 && rn.Index < len(m.Changes):
			slot = &m.Changes[rn.Index].Path
		case rn.Field == "changes.target" && rn.Index >= 0 && rn.Index < len(m.Changes):
			slot = &m.Changes[rn.Index].Target
		case rn.Field == "removed" && rn.Index >= 0 && rn.Index < len(m.Removed):
			slot = &m.Removed[rn.Index]
		default:
			return fmt.Errorf("raw name %s[%d] names nothing", rn.Field, rn.Index)
		}
		if err := putRaw(slot, rn.Bytes); err != nil {
			return fmt.Errorf("raw name %s[%d]: %w", rn.Field, rn.Index, err)
		}
	}
	return nil
}

// putRaw replaces the display form in *slot by raw, after checking that
// raw is invalid UTF-8 and displays as *slot.
func putRaw(slot *string, raw []byte) error {
	if utf8.Valid(raw) {
		return fmt.Errorf("is valid UTF-8")
	}
	if displayName(string(raw)) != *slot {
		return fmt.Errorf("does not match its display form %q", *slot)
	}
	*slot = string(raw)
	return nil
}

// displayName is the string a name reads back as from JSON: encoding/json
// replaces each byte of an invalid sequence by U+FFFD.
func displayName(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

// setRawPaths records the raw bytes of every change path that JSON cannot
// hold (before result.json is written).
func setRawPaths(changes []Change) {
	for i := range changes {
		if !utf8.ValidString(changes[i].Path) {
			changes[i].PathRaw = []byte(changes[i].Path)
		}
	}
}

// applyRawPaths puts the raw change paths of a result read from JSON back.
func (r *Result) applyRawPaths() error {
	for i := range r.Changes {
		c := &r.Changes[i]
		if c.PathRaw == nil {
			continue
		}
		if err := putRaw(&c.Path, c.PathRaw); err != nil {
			return fmt.Errorf("result.json change %d path_raw: %w", i, err)
		}
	}
	return nil
}

// QuoteName is a name as text output shows it: as it is when it is valid
// UTF-8, else Go-quoted (bad\xffname as "bad\xffname"), byte-exact.
func QuoteName(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}
