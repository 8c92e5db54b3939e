package changelog

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// randomStep changes the tree under root at random among a few names, so
// files become directories and back, symlinks replace files, and
// directories vanish with their contents.
func randomStep(t *testing.T, rng *rand.Rand, root string, step int) {
	t.Helper()
	names := []string{"a", "b", "d/x", "d/y", "d/e/z", "d/e", "f", "d"}
	p := filepath.Join(root, names[rng.Intn(len(names))])
	clear := func(p string) {
		// Make every ancestor a directory.
		for a := filepath.Dir(p); a != root && len(a) > len(root); a = filepath.Dir(a) {
			if fi, err := os.Lstat(a); err == nil && !fi.IsDir() {
				os.Remove(a)
			}
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
	}
	switch k := rng.Intn(10); {
	case k < 4:
		clear(p)
		os.RemoveAll(p)
		if err := os.WriteFile(p, []byte(fmt.Sprintf("step %d %s", step, strings.Repeat("x", rng.Intn(50)))), 0o644); err != nil {
			t.Fatal(err)
		}
	case k < 6:
		os.RemoveAll(p)
	case k < 7:
		clear(p)
		os.RemoveAll(p)
		if err := os.Symlink("a", p); err != nil {
			t.Fatal(err)
		}
	case k < 8:
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			os.Chmod(p, 0o600)
		}
	case k < 9:
		clear(p)
		os.RemoveAll(p)
		os.MkdirAll(filepath.Join(p, "inner"), 0o755)
		os.WriteFile(filepath.Join(p, "inner", "w"), []byte(fmt.Sprint(step)), 0o644)
	default:
		if rng.Intn(2) == 0 {
			os.RemoveAll(root) // the root goes (and may come back)
		} else {
			os.MkdirAll(root, 0o755)
			os.WriteFile(filepath.Join(root, "back"), []byte(fmt.Sprint(step)), 0o644)
		}
	}
}

// TestMergeEqualsSequentialReplay: for random sequences, the merge of the
// increments i..j, applied after 0..i-1, leaves exactly the tree that
// increments 0..j leave (ours and GNU tar's extraction both), and the
// merged metadata carries the last part's position and the merged ranges.
func TestMergeEqualsSequentialReplay(t *testing.T) {
	gnu := true
	if out, err := execTarVersion(); err != nil || !strings.Contains(out, "GNU tar") {
		gnu = false
	}
	for seed := int64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			base := t.TempDir()
			roots := []Root{{Name: "checkout", Path: filepath.Join(base, "co")}, {Name: "t", Path: filepath.Join(base, "t")}}
			for _, r := range roots {
				os.MkdirAll(r.Path, 0o755)
				os.WriteFile(filepath.Join(r.Path, "a"), []byte("a0"), 0o644)
			}
			c, err := Open(filepath.Join(base, "cl"), Options{Roots: roots})
			if err != nil {
				t.Fatal(err)
			}
			const steps = 10
			var want [][]tree
			var bodies [][]byte
			for k := 0; k < steps; k++ {
				if k > 0 {
					for n := rng.Intn(3) + 1; n > 0; n-- {
						randomStep(t, rng, roots[rng.Intn(2)].Path, k)
					}
				}
				inc := mustCapture(t, c, k)
				b, err := os.ReadFile(inc.Path)
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, b)
				want = append(want, []tree{snapshot(t, roots[0].Path, true, nil), snapshot(t, roots[1].Path, true, nil)})
			}
			for i := 1; i < steps; i++ {
				for j := i + 1; j < steps; j++ {
					merged, err := mergeIncrements(bodies[i:j+1], roots, []incmeta.Merged{{From: i, To: j - 1, Reason: "test"}})
					if err != nil {
						t.Fatalf("merge %d..%d: %v", i, j, err)
					}
					dir := t.TempDir()
					var paths []string
					for p := 0; p < i; p++ {
						paths = append(paths, c.incrementPath(p))
					}
					mp := filepath.Join(dir, IncrementName(j))
					os.WriteFile(mp, merged, 0o600)
					paths = append(paths, mp)
					checkFlags(t, merged, roots)
					m, err := ReadMeta(mp)
					if err != nil || m.Position != j || m.MergedFrom() != i || m.CheckMerged() != nil {
						t.Fatalf("merged metadata %+v %v", m, err)
					}
					out := []Root{{Name: "checkout", Path: filepath.Join(dir, "co")}, {Name: "t", Path: filepath.Join(dir, "t")}}
					if err := Replay(context.Background(), paths, out); err != nil {
						t.Fatalf("replay 0..%d + merge %d..%d: %v", i-1, i, j, err)
					}
					for r := range out {
						if d := diffTrees(want[j][r], snapshot(t, out[r].Path, true, nil)); d != "" {
							t.Fatalf("root %s: 0..%d + merge %d..%d differs from 0..%d:\n%s", out[r].Name, i-1, i, j, j, d)
						}
					}
					if !gnu || (i+j)%3 != 0 {
						continue
					}
					g := t.TempDir()
					for _, ip := range paths {
						m, _ := ReadMeta(ip)
						for _, name := range m.RemovedRoots {
							for _, r := range roots {
								if r.Name == name {
									os.RemoveAll(filepath.Join(g, strings.TrimPrefix(r.Path, "/")))
								}
							}
						}
						run(t, g, "tar", "--incremental", "--anchored", "--exclude="+incmeta.Dir, "-xzf", ip, "-C", g)
					}
					for r := range roots {
						got := snapshot(t, filepath.Join(g, strings.TrimPrefix(roots[r].Path, "/")), true, nil)
						if d := diffTrees(want[j][r], got); d != "" {
							t.Fatalf("root %s: GNU tar's 0..%d + merge %d..%d differs from 0..%d:\n%s", roots[r].Name, i-1, i, j, j, d)
						}
					}
				}
			}
		})
	}
}

func execTarVersion() (string, error) {
	out, err := runQuiet("tar", "--version")
	return out, err
}

func runQuiet(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// checkFlags asserts that every file or symlink a merged increment stores
// below a directory it dumps is flagged 'Y' in that dumpdir, as GNU tar
// writes it.
func checkFlags(t *testing.T, b []byte, roots []Root) {
	t.Helper()
	allowed, _ := metaRoots(roots)
	a, err := readArchive(bytes.NewReader(b), allowed)
	if err != nil {
		t.Fatal(err)
	}
	dumps := map[string]map[string]byte{}
	for _, m := range a.Members {
		if m.Type == typeDumpdir {
			l := map[string]byte{}
			for _, d := range m.Dumpdir {
				l[d.Name] = d.Flag
			}
			dumps[vkey(m.Root, m.Rel)] = l
		}
	}
	for _, m := range a.Members {
		if m.Type == typeDumpdir {
			continue
		}
		if l, ok := dumps[vkey(m.Root, parentOf(m.Rel))]; ok && l[path.Base(m.Rel)] != flagInArchive {
			t.Fatalf("member %s is stored but flagged %q in its directory's dumpdir", m.Name, l[path.Base(m.Rel)])
		}
	}
}
