package changelog

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// craftOver replaces the stored increment at pos with one carrying the same
// metadata and the extra members.
func craftOver(t *testing.T, s *scenario, pos int, ms []hostileMember) {
	t.Helper()
	m, err := ReadMeta(s.c.incrementPath(pos))
	if err != nil {
		t.Fatal(err)
	}
	var prefix string
	for _, r := range m.Roots {
		if r.Name == "checkout" {
			prefix = r.Prefix
		}
	}
	for i := range ms {
		ms[i].name = prefix + "/" + ms[i].name
	}
	if err := os.WriteFile(s.c.incrementPath(pos), buildArchive(t, m, ms), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestApplyRefusesHostileIncrementBeforeTheUndoPoint: an increment that
// could never be extracted (a name no file system holds) or that unpacks
// past the bound is refused as a hostile archive (exit 4 in the CLI) before
// the undo point is stored or any root changes.
func TestApplyRefusesHostileIncrementBeforeTheUndoPoint(t *testing.T) {
	cases := []struct {
		name    string
		members []hostileMember
		req     ApplyRequest
		want    string
	}{
		{name: "300-character member name", members: []hostileMember{{name: strings.Repeat("n", 300), flag: tar.TypeReg, body: "x"}},
			want: "longer than any file name"},
		{name: "300-character directory in a name", members: []hostileMember{{name: strings.Repeat("d", 300) + "/f", flag: tar.TypeReg, body: "x"}},
			want: "longer than any file name"},
		{name: "symlink target of 4096 bytes", members: []hostileMember{{name: "l", flag: tar.TypeSymlink, link: strings.Repeat("t", 4096)}},
			want: "invalid target"},
		{name: "unpacks past the request's bound", members: []hostileMember{{name: "big.bin", flag: tar.TypeReg, body: strings.Repeat("\x00", 4<<20)}},
			req: ApplyRequest{Unpack: UnpackBound{Max: 2 << 20, By: "over the test's bound"}}, want: "over the test's bound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t)
			s.calls(t)
			craftOver(t, s, 1, tc.members)
			skipCL := func(rel string) bool { return strings.HasPrefix(rel, "changelog") }
			before := snapshot(t, s.base, true, skipCL)
			list0, _ := s.c.List()
			req := tc.req
			req.To = 2
			_, err := s.c.Apply(context.Background(), req)
			if !errors.Is(err, ErrUnreadableArchive) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply = %v, want ErrUnreadableArchive saying %q", err, tc.want)
			}
			if d := diffTrees(before, snapshot(t, s.base, true, skipCL)); d != "" {
				t.Errorf("refused apply changed the roots:\n%s", d)
			}
			if list1, _ := s.c.List(); len(list1) != len(list0) {
				t.Errorf("refused apply stored increments (the undo point): %d -> %d", len(list0), len(list1))
			}
		})
	}
}

// TestUnpackBoundStopsDecompressing: the bound ends the read of a
// compression bomb once it is passed, not after inflating all of it.
func TestUnpackBoundStopsDecompressing(t *testing.T) {
	prefix := "r"
	meta := &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: "r", Path: "/r", Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	b := buildArchive(t, meta, []hostileMember{{name: prefix + "/bomb", flag: tar.TypeReg, body: strings.Repeat("\x00", 64<<20)}})
	if len(b) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed", len(b))
	}
	f := &countingReader{r: strings.NewReader(string(b))}
	_, err := readArchiveHolding(f, []incmeta.Root{{Name: "r", Prefix: prefix}}, nil, UnpackBound{Max: 1 << 20, By: "over 1 MiB"})
	if !errors.Is(err, ErrUnreadableArchive) || !strings.Contains(err.Error(), "unpacks to more than 1048576 bytes, over 1 MiB") {
		t.Fatalf("read = %v", err)
	}
	if f.n > int64(len(b))/8 {
		t.Errorf("read %d of the %d compressed bytes past a bound of 1 MiB (1/64 of what it unpacks to)", f.n, len(b))
	}
	if _, err := readArchiveHolding(strings.NewReader(string(b)), []incmeta.Root{{Name: "r", Prefix: prefix}}, nil, UnpackBound{Max: 65 << 20, By: "x"}); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestFreeSpaceBound: a local apply's bound is the space free where the
// first root is (or would be created), named in the refusal.
func TestFreeSpaceBound(t *testing.T) {
	dir := t.TempDir()
	b := FreeSpaceBound([]Root{{Name: "r", Path: filepath.Join(dir, "not", "yet")}})
	if b.Max <= 0 || !strings.Contains(b.By, "bytes free on the file system of "+dir) {
		t.Fatalf("bound %+v", b)
	}
	c, err := Open(filepath.Join(dir, "cl"), Options{Roots: []Root{{Name: "r", Path: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	if lb := c.LocalUnpackBound(); lb.Max <= 0 || !strings.Contains(lb.By, "free") {
		t.Fatalf("local bound %+v", lb)
	}
}
