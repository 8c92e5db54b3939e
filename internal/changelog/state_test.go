package changelog

import (
	"errors"
	"reflect"
	"testing"

	"github.com/agentscm/agentscm/internal/scan"
)

func TestStateRoundTripAndCorruption(t *testing.T) {
	h := [32]byte{1, 2, 3}
	s := &captureState{LastPosition: 41, Roots: []*rootState{
		{Name: "checkout", Path: "/w/repo", Exists: true, Stamp: "index:1;", Entries: []entry{
			{Path: "", Type: scan.Dir, Mode: 0o755, MTime: 5, Dev: 1, Ino: 2},
			{Path: ".git", Type: scan.Dir, Excluded: true},
			{Path: "a", Type: scan.Dir, Mode: 0o700, MTime: -3, Dev: 1, Ino: 3},
			{Path: "a/b", Type: scan.File, Mode: 0o644, Size: 12, MTime: 1 << 60, Dev: 1, Ino: 4, Hash: &h},
			{Path: "a/bc", Type: scan.Symlink, Mode: 0o777, Target: "../x"},
		}},
		{Name: "transcripts", Path: "/h/t"},
	}}
	b := s.encode()
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Roots[1].Entries == nil {
		got.Roots[1].Entries = nil
	}
	if len(got.Roots[1].Entries) == 0 {
		got.Roots[1].Entries = s.Roots[1].Entries
	}
	got.baseSize = 0 // bookkeeping, not encoded
	if !reflect.DeepEqual(s, got) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got.Roots[0].Entries, s.Roots[0].Entries)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := decodeState(c); !errors.Is(err, errBadState) {
			t.Fatalf("flipping byte %d: %v, want errBadState", i, err)
		}
	}
	if _, err := decodeState(b[:len(b)-1]); !errors.Is(err, errBadState) {
		t.Errorf("truncated state accepted")
	}
}

func TestComparePathsFollowsWalkOrder(t *testing.T) {
	ordered := []string{"", "a", "a/b", "a/b/c", "a/c", "a-b", "a.b", "b", "b/a"}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := comparePaths(ordered[i], ordered[j]); got != want {
				t.Errorf("comparePaths(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
