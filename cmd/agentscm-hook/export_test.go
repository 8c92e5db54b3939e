package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/cli"
	"github.com/agentscm/agentscm/internal/spool"
)

// sameTree compares every entry of src with the archive's copy, byte for
// byte; skip names entries that may legitimately differ.
func sameTree(t *testing.T, src, archive string, skip func(rel string) bool) int {
	t.Helper()
	tree := filepath.Join(archive, spool.ExportTreeName)
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() || skip(rel) {
			return nil
		}
		a, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(tree, rel))
		if err != nil {
			return fmt.Errorf("%s is not in the archive: %w", rel, err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("%s differs from its archived copy", rel)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *burstFixture) export(t *testing.T, dest string) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal([]byte(f.agentscm(t, "change-capture", "export", "--spool", f.spool, "--destination", dest, "--format", "json")), &out); err != nil {
		t.Fatal(err)
	}
	if out["exported"] != true {
		t.Fatalf("export: %v", out)
	}
	f.agentscm(t, "change-capture", "verify-export", "--archive", dest)
	return out
}

// TestExportOfHookSpool exports a spool the real hook processes wrote, once
// at rest (the archive equals the spool byte for byte) and repeatedly while
// a burst of hook processes runs (every hook exits 0, every archive
// verifies, and the immutable envelope, marker and artifact files are
// byte-identical to the spool's afterwards).
func TestExportOfHookSpool(t *testing.T) {
	f := newBurstFixture(t)
	for i := range 8 {
		id := fmt.Sprintf("toolu_export_%02d", i)
		for _, p := range []string{
			f.pre("export-s", id),
			`{"session_id":"export-s","cwd":"` + f.root + `","hook_event_name":"PostToolUse","tool_name":"Read","tool_use_id":"` + id + `","tool_input":{"file_path":"/etc/hostname"},"tool_response":"x"}`,
			`{"session_id":"export-s","cwd":"` + f.root + `","hook_event_name":"UserPromptSubmit","prompt":"p"}`,
		} {
			if out, err := f.hookCmd(p).CombinedOutput(); err != nil {
				t.Fatalf("hook: %v %s", err, out)
			}
		}
	}
	f.drain(t, "export-drain")
	rest := filepath.Join(f.dir, "rest")
	out := f.export(t, rest)
	files := sameTree(t, f.spool, rest, func(string) bool { return false })
	res := out["result"].(map[string]any)
	if int(res["files"].(float64)) != files || files < 20 {
		t.Fatalf("compared %d files, export says %v", files, res["files"])
	}
	if n := len(f.toolStarts(t)); n != 8 {
		t.Fatalf("%d tool starts", n)
	}

	// Exports while hooks run: the hooks never fail, the archives verify.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var archives []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			dest := filepath.Join(f.dir, fmt.Sprintf("live-%d", i))
			var o, e bytes.Buffer
			env := &cli.Env{Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e, Getenv: func(k string) string { return f.vars[k] }, Now: time.Now}
			if code := cli.Main(context.Background(), env, []string{"change-capture", "export", "--spool", f.spool, "--destination", dest}); code != 0 {
				t.Errorf("export during hooks: exit %d: %s", code, e.String())
				return
			}
			archives = append(archives, dest)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	burstOn(t, f, 60, false, "live")
	close(stop)
	wg.Wait()
	f.drain(t, "export-drain-2")
	if len(archives) == 0 {
		t.Fatal("no export ran during the burst")
	}
	for _, a := range archives {
		if _, err := spool.VerifyExport(a); err != nil {
			t.Fatal(err)
		}
		// Envelopes, markers and artifacts are never rewritten: each one
		// archived is byte-identical to the spool's (later ones are
		// simply newer than the snapshot).
		tree := filepath.Join(a, spool.ExportTreeName)
		for _, dir := range []string{"outbox", "acks", "artifacts"} {
			ents, err := os.ReadDir(filepath.Join(tree, dir))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				x, _ := os.ReadFile(filepath.Join(tree, dir, e.Name()))
				y, err := os.ReadFile(filepath.Join(f.spool, dir, e.Name()))
				if err != nil || !bytes.Equal(x, y) {
					t.Fatalf("%s/%s of %s differs from the spool's: %v", dir, e.Name(), a, err)
				}
			}
		}
	}
	t.Logf("%d exports ran during a burst of 60 hook processes", len(archives))
}
