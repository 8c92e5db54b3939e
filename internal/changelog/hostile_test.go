package changelog

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// hostileMember is one member of a hand-made archive.
type hostileMember struct {
	name, link string
	flag       byte
	body       string
}

func buildArchive(t *testing.T, meta *incmeta.Meta, ms []hostileMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if meta != nil {
		b, _ := json.Marshal(meta)
		tw.WriteHeader(&tar.Header{Name: incmeta.Member, Typeflag: tar.TypeReg, Size: int64(len(b)), Mode: 0o600, Format: tar.FormatGNU, ModTime: time.Now()})
		tw.Write(b)
	}
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Typeflag: m.flag, Linkname: m.link, Mode: 0o644, Format: tar.FormatGNU, ModTime: time.Now()}
		if m.flag == tar.TypeReg || m.flag == typeDumpdir {
			h.Size = int64(len(m.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m.body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// paxRecord encodes one PAX extended-header record ("LEN key=value\n").
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for {
		s := fmt.Sprintf("%d %s=%s\n", n, k, v)
		if len(s) == n {
			return s
		}
		n = len(s)
	}
}

// sparseArchive is an archive whose file member is a PAX 1.0 sparse file
// claiming 100 GB of real size in 1 KiB of data. Go's tar writer refuses
// to encode one, so the extended header is written as a plain member and
// its typeflag patched to 'x' afterwards.
func sparseArchive(t *testing.T, meta *incmeta.Meta, name string) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	b, _ := json.Marshal(meta)
	tw.WriteHeader(&tar.Header{Name: incmeta.Member, Typeflag: tar.TypeReg, Size: int64(len(b)), Mode: 0o600, Format: tar.FormatUSTAR})
	tw.Write(b)
	tw.Flush() // pads the metadata member: the next header starts at off
	off := raw.Len()
	rec := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", "100000000000")
	tw.WriteHeader(&tar.Header{Name: "PaxHeaders/x", Typeflag: tar.TypeReg, Size: int64(len(rec)), Mode: 0o644, Format: tar.FormatUSTAR})
	tw.Write([]byte(rec))
	body := append([]byte("1\n99999999488\n512\n"), make([]byte, 512-18)...)
	body = append(body, bytes.Repeat([]byte("x"), 512)...)
	tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: int64(len(body)), Mode: 0o644, Format: tar.FormatUSTAR})
	tw.Write(body)
	tw.Close()
	hdr := raw.Bytes()[off : off+512]
	hdr[156] = tar.TypeXHeader
	copy(hdr[148:156], "        ")
	sum := 0
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:156], fmt.Sprintf("%06o\x00 ", sum))
	var out bytes.Buffer
	gz := gzip.NewWriter(&out)
	gz.Write(raw.Bytes())
	gz.Close()
	return out.Bytes()
}

func TestHostileArchivesAreRefusedWithNothingWritten(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	writeFile(t, filepath.Join(root, "keep.txt"), "keep")
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	if err := os.Symlink(outside, filepath.Join(root, "disklink")); err != nil {
		t.Fatal(err)
	}
	roots := []Root{{Name: "r", Path: root}}
	prefix := strings.TrimPrefix(root, "/")
	meta := func() *incmeta.Meta {
		return &incmeta.Meta{Version: 1, Kind: KindCall, Roots: []incmeta.Root{{Name: "r", Path: root, Prefix: prefix, Exists: true}}, RemovedRoots: []string{}}
	}
	dump := func(entries ...dumpEntry) string { return string(encodeDumpdir(entries)) }
	good := buildArchive(t, meta(), []hostileMember{
		{name: prefix + "/", flag: typeDumpdir, body: dump(dumpEntry{'Y', "new.txt"}, dumpEntry{'N', "keep.txt"}, dumpEntry{'N', "disklink"})},
		{name: prefix + "/new.txt", flag: tar.TypeReg, body: "new"},
	})
	gz := func(b []byte) []byte { return b }
	cases := map[string][]byte{
		"absolute name":                   buildArchive(t, meta(), []hostileMember{{name: "/etc/agentscm-pwned", flag: tar.TypeReg, body: "x"}}),
		"PAX sparse file claiming 100 GB": sparseArchive(t, meta(), prefix+"/big"),
		"dot-dot":                         buildArchive(t, meta(), []hostileMember{{name: prefix + "/../outside/pwned", flag: tar.TypeReg, body: "x"}}),
		"outside every root":              buildArchive(t, meta(), []hostileMember{{name: strings.TrimPrefix(outside, "/") + "/pwned", flag: tar.TypeReg, body: "x"}}),
		"symlink then file through it": buildArchive(t, meta(), []hostileMember{
			{name: prefix + "/l", flag: tar.TypeSymlink, link: outside},
			{name: prefix + "/l/pwned", flag: tar.TypeReg, body: "x"},
		}),
		"file through a symlink on disk": buildArchive(t, meta(), []hostileMember{{name: prefix + "/disklink/pwned", flag: tar.TypeReg, body: "x"}}),
		"dumpdir keeps a disk symlink then a file through it": buildArchive(t, meta(), []hostileMember{
			{name: prefix + "/", flag: typeDumpdir, body: dump(dumpEntry{'N', "disklink"}, dumpEntry{'N', "keep.txt"})},
			{name: prefix + "/disklink/pwned", flag: tar.TypeReg, body: "x"},
		}),
		"file below a file": buildArchive(t, meta(), []hostileMember{{name: prefix + "/keep.txt/pwned", flag: tar.TypeReg, body: "x"}}),
		"hard link":         buildArchive(t, meta(), []hostileMember{{name: prefix + "/h", flag: tar.TypeLink, link: "etc/passwd"}}),
		"device":            buildArchive(t, meta(), []hostileMember{{name: prefix + "/dev", flag: tar.TypeChar}}),
		"dumpdir with a slash": buildArchive(t, meta(), []hostileMember{
			{name: prefix + "/", flag: typeDumpdir, body: "Ya/b\x00\x00"},
		}),
		"dumpdir with dot-dot": buildArchive(t, meta(), []hostileMember{
			{name: prefix + "/", flag: typeDumpdir, body: "N..\x00\x00"},
		}),
		"duplicate member": buildArchive(t, meta(), []hostileMember{
			{name: prefix + "/a", flag: tar.TypeReg, body: "1"},
			{name: prefix + "/a", flag: tar.TypeReg, body: "2"},
		}),
		"unknown root in metadata": buildArchive(t, &incmeta.Meta{Version: 1, Roots: []incmeta.Root{{Name: "evil", Prefix: "etc"}}}, []hostileMember{
			{name: "etc/pwned", flag: tar.TypeReg, body: "x"},
		}),
		"removed root not configured": buildArchive(t, &incmeta.Meta{Version: 1, Roots: meta().Roots, RemovedRoots: []string{"evil"}}, nil),
		"metadata not first": buildArchive(t, nil, []hostileMember{
			{name: prefix + "/a", flag: tar.TypeReg, body: "1"},
			{name: incmeta.Member, flag: tar.TypeReg, body: "{}"},
		}),
		"not gzip":  []byte("this is not an archive"),
		"truncated": gz(good[:len(good)/2]),
		"empty":     {},
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			before := snapshot(t, base, true, nil)
			dir := t.TempDir()
			p0 := filepath.Join(dir, "000000.tgz")
			p1 := filepath.Join(dir, "000001.tgz")
			os.WriteFile(p0, good, 0o600)
			os.WriteFile(p1, data, 0o600)
			err := Replay(context.Background(), []string{p0, p1}, roots)
			if !errors.Is(err, ErrUnreadableArchive) {
				t.Fatalf("Replay = %v, want ErrUnreadableArchive", err)
			}
			t.Log(err)
			if d := diffTrees(before, snapshot(t, base, true, nil)); d != "" {
				t.Errorf("a refused archive wrote:\n%s", d)
			}
			if _, err := os.Lstat("/etc/agentscm-pwned"); err == nil {
				t.Errorf("wrote /etc/agentscm-pwned")
			}
		})
	}
	// The good archive alone applies.
	p := filepath.Join(t.TempDir(), "000000.tgz")
	os.WriteFile(p, good, 0o600)
	if err := Replay(context.Background(), []string{p}, roots); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "new.txt")); string(b) != "new" {
		t.Errorf("good archive not applied")
	}
}

func TestApplyRefusesUnreadableIncrementBeforeChangingAnything(t *testing.T) {
	s := newScenario(t)
	s.calls(t)
	if err := os.WriteFile(s.c.incrementPath(2), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, s.base, true, func(rel string) bool { return strings.HasPrefix(rel, "changelog") })
	list0, _ := s.c.List()
	_, err := s.c.Apply(context.Background(), ApplyRequest{To: 3})
	if !errors.Is(err, ErrUnreadableArchive) {
		t.Fatalf("Apply = %v, want ErrUnreadableArchive", err)
	}
	if d := diffTrees(before, snapshot(t, s.base, true, func(rel string) bool { return strings.HasPrefix(rel, "changelog") })); d != "" {
		t.Errorf("refused apply changed the roots:\n%s", d)
	}
	if list1, _ := s.c.List(); len(list1) != len(list0) {
		t.Errorf("refused apply stored increments: %d -> %d", len(list0), len(list1))
	}
	if list0[2].Err == "" {
		t.Errorf("List does not flag the unreadable increment")
	}
}
