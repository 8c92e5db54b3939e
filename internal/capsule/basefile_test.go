package capsule

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func TestParseNumbers(t *testing.T) {
	for _, s := range []string{"0", "1", "42", "-1", "-9223372036854775808", "9223372036854775807"} {
		want, _ := strconv.ParseInt(s, 10, 64)
		if got, ok := parseInt([]byte(s)); !ok || got != want {
			t.Errorf("parseInt(%q) = %d %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "-", "01", "+1", "9223372036854775808", "-9223372036854775809", "1a", " 1"} {
		if _, ok := parseInt([]byte(s)); ok {
			t.Errorf("parseInt(%q) accepted", s)
		}
	}
	if v, ok := parseUint([]byte("18446744073709551615")); !ok || v != 1<<64-1 {
		t.Error("max uint64")
	}
	if _, ok := parseUint([]byte("18446744073709551616")); ok {
		t.Error("uint64 overflow accepted")
	}
}

func TestWalkCompare(t *testing.T) {
	// scan.List's order: a directory before its contents, names in byte order.
	order := []string{"a", "a/b", "a/b/c", "a/c", "a!", "a-b", "a.txt", "ab", "b"}
	for i := range order {
		for j := range order {
			got := walkCompare(order[i], order[j])
			if (i < j && got >= 0) || (i > j && got <= 0) || (i == j && got != 0) {
				t.Errorf("walkCompare(%q, %q) = %d", order[i], order[j], got)
			}
		}
	}
}

func TestBaseLineRoundTrip(t *testing.T) {
	ents := []ManifestEntry{
		{Path: "d", Type: "dir", Mode: "0755", MtimeNS: -5},
		{Path: "d/f \"x\"\n", Type: "file", Mode: "4755", Size: 7, MtimeNS: 1, ctimeNS: 2, dev: 3, ino: 4, Nlink: 2, Backup: true, SHA256: strings.Repeat("0f", 32)},
		{Path: "d/l", Type: "symlink", Mode: "0777", Target: "../ü\\x"},
		{Path: "d/p", Type: "other", Mode: "0600", Size: 0},
	}
	var b []byte
	for i := range ents {
		b = appendEntryLine(b, &ents[i])
	}
	got, err := readBase(bytes.NewReader(append([]byte(baseHeader), b...)), "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range ents {
		w, g := ents[i], got[i]
		if g.Path != w.Path || g.Type != w.Type || g.Mode != w.Mode || g.Size != w.Size || g.MtimeNS != w.MtimeNS || g.ctimeNS != w.ctimeNS ||
			g.dev != w.dev || g.ino != w.ino || g.Nlink != w.Nlink || g.Backup != w.Backup || g.SHA256 != w.SHA256 || g.Target != w.Target {
			t.Errorf("entry %d: got %+v want %+v", i, g, w)
		}
	}
	// Out of walk order, a file without a hash, trailing garbage: refused.
	for _, bad := range []string{
		"d 0755 0 0 0 0 0 0 0 - \"b\"\nd 0755 0 0 0 0 0 0 0 - \"a\"\n",
		"f 0644 0 0 0 0 0 0 0 - \"a\"\n",
		"d 0755 0 0 0 0 0 0 0 - \"a\" x\n",
		"d 0755 0 0 0 0 0 0 1 - \"a\"\n",
		"d 0755 0 0 0 0 0 0 0 - \"a\"",
	} {
		if _, err := readBase(strings.NewReader(baseHeader+bad), ""); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, err := readBase(bytes.NewReader(append([]byte(baseHeader), b...)), strings.Repeat("0", 64)); err == nil {
		t.Error("digest mismatch accepted")
	}
}
