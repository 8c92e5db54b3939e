package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// FuzzReadArchive feeds arbitrary bytes to the archive reader and, when it
// accepts them, replays them into a temporary root: nothing may panic, and
// nothing may be written outside the root.
func FuzzReadArchive(f *testing.F) {
	const prefix = "fuzz/root"
	meta := &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: "r", Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	t := &testing.T{}
	f.Add(buildArchive(t, meta, []hostileMember{
		{name: prefix + "/", flag: typeDumpdir, body: string(encodeDumpdir([]dumpEntry{{'Y', "a"}, {'D', "d"}, {'N', "x"}}))},
		{name: prefix + "/d/", flag: typeDumpdir, body: "Yb\x00\x00"},
		{name: prefix + "/a", flag: tar.TypeReg, body: "a"},
		{name: prefix + "/d/b", flag: tar.TypeSymlink, link: "../a"},
	}))
	f.Add(buildArchive(t, meta, []hostileMember{
		{name: prefix + "/l", flag: tar.TypeSymlink, link: "/"},
		{name: prefix + "/l/x", flag: tar.TypeReg, body: "x"},
	}))
	f.Add(buildArchive(t, meta, []hostileMember{
		{name: prefix + "/", flag: typeDumpdir, body: "Rfuzz/root/d\x00Tfuzz/root/e\x00De\x00\x00"},
	}))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(fuzzReplay)
}

// FuzzReadTar fuzzes the tar layer under a valid gzip stream, which random
// bytes almost never reach.
func FuzzReadTar(f *testing.F) {
	const prefix = "fuzz/root"
	meta := &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: "r", Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	t := &testing.T{}
	for _, ms := range [][]hostileMember{
		{
			{name: prefix + "/", flag: typeDumpdir, body: string(encodeDumpdir([]dumpEntry{{'Y', "a"}, {'D', "d"}, {'N', "x"}}))},
			{name: prefix + "/d/", flag: typeDumpdir, body: "Yb\x00\x00"},
			{name: prefix + "/a", flag: tar.TypeReg, body: "a"},
			{name: prefix + "/d/b", flag: tar.TypeSymlink, link: "../a"},
		},
		{
			{name: prefix + "/l", flag: tar.TypeSymlink, link: "/"},
			{name: prefix + "/l/x", flag: tar.TypeReg, body: "x"},
		},
		{
			{name: prefix + "/", flag: typeDumpdir, body: "Rfuzz/root/d\x00Tfuzz/root/e\x00De\x00\x00"},
		},
	} {
		gzData := buildArchive(t, meta, ms)
		zr, _ := gzip.NewReader(bytes.NewReader(gzData))
		raw, _ := io.ReadAll(zr)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(raw)
		zw.Close()
		fuzzReplay(t, buf.Bytes())
	})
}

func fuzzReplay(t *testing.T, data []byte) {
	const prefix = "fuzz/root"
	{
		a, err := readArchive(bytes.NewReader(data), []incmeta.Root{{Name: "r", Prefix: prefix}})
		if err != nil {
			return
		}
		for _, m := range a.Members {
			if m.Root != "r" || strings.Contains("/"+m.Rel+"/", "/../") || strings.HasPrefix(m.Rel, "/") {
				t.Fatalf("accepted member %q (root %q rel %q)", m.Name, m.Root, m.Rel)
			}
		}
		base := t.TempDir()
		root := filepath.Join(base, "root")
		outside := filepath.Join(base, "outside")
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(outside, "sentinel"), []byte("s"), 0o644)
		p := filepath.Join(base, "000000.tgz")
		os.WriteFile(p, data, 0o600)
		_ = Replay(context.Background(), []string{p}, []Root{{Name: "r", Path: root}})
		ents, _ := os.ReadDir(base)
		for _, e := range ents {
			if n := e.Name(); n != "root" && n != "outside" && n != "000000.tgz" {
				t.Fatalf("replay wrote %s outside the root", n)
			}
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("replay wrote into a directory outside the root: %v", ents)
		}
	}
}

func FuzzDecodeDumpdir(f *testing.F) {
	f.Add([]byte("Ya\x00Dd\x00Nx\x00\x00"))
	f.Add([]byte("Ra/b\x00Ta/c\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, _, err := decodeDumpdir(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to a listing that decodes the same.
		again, _, err := decodeDumpdir(encodeDumpdir(append([]dumpEntry(nil), ents...)))
		if err != nil || len(again) != len(ents) {
			t.Fatalf("re-encoding %q: %v (%d vs %d entries)", b, err, len(again), len(ents))
		}
	})
}
