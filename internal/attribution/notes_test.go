package attribution

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHooksChainAndRestore: enable keeps the user's hooks (a file, and a
// symlink as hook managers install) as chained and runs them first;
// enabling again changes nothing more; disable puts back exactly what was
// there; a chained name already taken is refused, changing nothing.
func TestHooksChainAndRestore(t *testing.T) {
	ctx := context.Background()
	r := newTestRepo(t, map[string]string{"a.txt": "a\n"})
	hooks := filepath.Join(r.root, ".git", "hooks")
	os.MkdirAll(hooks, 0o755)
	os.WriteFile(filepath.Join(hooks, "managed-post-rewrite"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(hooks, "post-commit"), []byte("#!/bin/sh\necho mine\n"), 0o755)
	if err := os.Symlink("managed-post-rewrite", filepath.Join(hooks, "post-rewrite")); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, hooks)
	for i := 0; i < 2; i++ {
		ch, err := EnableHooks(ctx, r.root, "/opt/agent's scm/agentscm")
		if err != nil {
			t.Fatal(err)
		}
		want := map[int]string{0: "installed", 1: "updated"}[i]
		if len(ch) != 2 || ch[0].Action != want || ch[1].Action != want || ch[0].Chained == "" || ch[1].Chained == "" {
			t.Fatalf("enable %d: %+v", i, ch)
		}
	}
	b, _ := os.ReadFile(filepath.Join(hooks, "post-commit"))
	if !strings.Contains(string(b), `'/opt/agent'\''s scm/agentscm' attribution hook post-commit --root `) {
		t.Fatalf("the hook:\n%s", b)
	}
	if target, err := os.Readlink(filepath.Join(hooks, "post-rewrite"+ChainedSuffix)); err != nil || target != "managed-post-rewrite" {
		t.Fatalf("the chained symlink: %q %v", target, err)
	}
	if _, err := DisableHooks(ctx, r.root); err != nil {
		t.Fatal(err)
	}
	if after := listDir(t, hooks); after != before {
		t.Fatalf("after disable:\n%s\nbefore enable:\n%s", after, before)
	}

	// A chained name already taken: refused before anything changes.
	os.WriteFile(filepath.Join(hooks, "post-rewrite"+ChainedSuffix), []byte("x"), 0o755)
	before = listDir(t, hooks)
	if _, err := EnableHooks(ctx, r.root, "/usr/bin/agentscm"); !errors.Is(err, ErrChainTaken) {
		t.Fatalf("err %v, want ErrChainTaken", err)
	}
	if after := listDir(t, hooks); after != before {
		t.Fatalf("the refused enable changed the hooks:\n%s", after)
	}
}

// listDir describes each entry of dir: name, kind and content or target.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			out = append(out, e.Name()+" -> "+target)
			continue
		}
		b, _ := os.ReadFile(p)
		fi, _ := os.Stat(p)
		out = append(out, e.Name()+" "+fi.Mode().String()+" "+string(b))
	}
	return strings.Join(out, "\n")
}
