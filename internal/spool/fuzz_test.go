package spool

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

func FuzzDecodeFrame(f *testing.F) {
	r := testRec(event.PromptSubmit)
	r.Seq = 7
	f.Add(encodeEnvelope(r, classEvent))
	f.Add(encodeFrame(typeAck, "0000000000000001", []byte("sha256:"+strings.Repeat("a", 64))))
	f.Add([]byte("AGSPOOL1 envelope 1-e 3 x\nabc"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to exactly the same bytes.
		if got := encodeFrame(fr.typ, fr.key, fr.body); string(got) != string(b) {
			t.Fatalf("re-encoding differs")
		}
		if fr.typ == typeEnvelope {
			env, err := decodeEnvelopeBody(fr.body)
			if err == nil && env.Record.Seq == 0 {
				t.Fatal("accepted an envelope without a sequence")
			}
		}
		if fr.typ == typeIndex {
			decodeIndex(b)
		}
	})
}

func FuzzParseNames(f *testing.F) {
	for _, s := range []string{outboxName(3, classEvent, 120), ackName(4), artifactName(strings.Repeat("ab", 32), 99), indexName(2, 9, true), "x", "0000000000000001-e-.rec"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) {
		if e, ok := parseOutboxName(n); ok && outboxName(e.seq, e.class, e.size) != n {
			t.Fatalf("outbox name %q does not round-trip", n)
		}
		if seq, ok := parseAckName(n); ok && ackName(seq) != n {
			t.Fatalf("ack name %q does not round-trip", n)
		}
		if d, size, ok := parseArtifactName(n); ok && artifactName(d, size) != n {
			t.Fatalf("artifact name %q does not round-trip", n)
		}
		if e, ok := parseIndexName(n); ok && indexName(e.gen, e.high, e.pending) != n {
			t.Fatalf("index name %q does not round-trip", n)
		}
	})
}

// FuzzRecoveryScanner drops a random debris file (random name, random
// content, possibly a temporary file or a valid-looking frame) into a random
// spool directory and runs recovery: it must not fail or panic, must leave no
// temporary file, must keep every retained record, and the spool must stay
// usable.
func FuzzRecoveryScanner(f *testing.F) {
	r := testRec(event.PromptSubmit)
	r.Seq = 3
	env := encodeEnvelope(r, classEvent)
	f.Add(uint8(1), ".tmp-x", env)
	f.Add(uint8(1), outboxName(3, classEvent, int64(len(env))), env)
	f.Add(uint8(1), outboxName(2, classEvent, int64(len(env))), env)
	f.Add(uint8(2), ".tmp-y", encodeFrame(typeAck, "0000000000000001", []byte("sha256:"+strings.Repeat("0", 64))))
	f.Add(uint8(4), ".tmp-z", encodeFrame(typeIndex, "1-9", []byte(`{"generation":1}`)))
	f.Add(uint8(0), ".tmp-c", encodeFrame(typeCursor, "cursor", []byte(`{"last_seq":1,"attempts_total":1,"recent":[]}`)))
	f.Add(uint8(3), "junk", []byte("hello"))
	base := mustInit(f, Limits{})
	base.SetNoSync(true)
	base.Append(testRec(event.SessionStart))
	base.Append(testRec(event.PromptSubmit))
	f.Fuzz(func(t *testing.T, where uint8, name string, content []byte) {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 200 {
			return
		}
		dir := filepath.Join(t.TempDir(), "spool")
		copyDir(t, base.dir, dir)
		// Copies have new inodes: rebind the commit for this scratch spool.
		rebind(t, dir)
		sub := []string{"", outboxDir, acksDir, artifactsDir, compactDir}[int(where)%5]
		p := filepath.Join(dir, sub, name)
		if _, err := os.Lstat(p); err == nil {
			return // do not overwrite the fixed layout
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return
		}
		// Open without fsync (the fuzzer runs thousands of iterations):
		// the same checks, lock and recovery as Open.
		sp, err := openCommitted(dir, false)
		if err == nil {
			sp.noSync = true
			err = sp.checkRetainedFiles()
		}
		if err == nil {
			var g *guard
			if g, err = sp.acquire(context.Background()); err == nil {
				g.release()
			}
		}
		if err != nil {
			// Only a damaged fixed layout may refuse; the debris itself
			// never makes recovery fail.
			if sub == compactDir {
				return
			}
			t.Fatalf("open with debris %s/%q: %v", sub, name, err)
		}
		noTemps(t, dir)
		// The full recovery also validates content behind valid names.
		if _, err := sp.Recover(context.Background()); err != nil {
			t.Fatalf("recover: %v", err)
		}
		evs, err := sp.Events()
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		if len(evs) < 2 {
			t.Fatalf("recovery lost records: %d", len(evs))
		}
		if _, err := sp.Append(testRec(event.PromptSubmit)); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		if _, err := Inspect(dir, 0); err != nil {
			t.Fatal(err)
		}
	})
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(to, func(p string, fi os.FileInfo, err error) error {
		if fi.IsDir() {
			os.Chmod(p, 0o700)
		} else {
			os.Chmod(p, 0o600)
		}
		return nil
	})
}

// rebind rewrites a copied spool's commit with the copy's identities (a
// test-only shortcut; agentscm itself never rewrites a commit).
func rebind(t *testing.T, dir string) {
	t.Helper()
	c, _, err := readCommit(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		n  string
		id *FileID
	}{{"", &c.Root}, {spoolLockFile, &c.SpoolLock}, {captureLockFile, &c.CaptureLock}} {
		fi, _ := os.Lstat(filepath.Join(dir, x.n))
		*x.id = fileID(fi)
	}
	os.WriteFile(filepath.Join(dir, commitFile), encodeFrame(typeCommit, "v4", mustJSON(c)), 0o600)
}
