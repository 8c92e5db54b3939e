package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

func stageTestBlobs() []Blob {
	return []Blob{{Data: []byte("staged one")}, {Data: []byte("staged two")}, {Data: []byte(strings.Repeat("staged three ", 100))}}
}

// recount checks that the usage a lock holder tracks equals what a full
// recovery scan counts, and returns it.
func recount(t *testing.T, dir string, counted Usage) {
	t.Helper()
	sp, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	if u, _ := ss.Usage(); u.Usage != counted {
		t.Fatalf("recounted usage %+v, counted %+v", u.Usage, counted)
	}
}

func stagedNames(t *testing.T, sp *Spool) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(sp.dir, stagedDir))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestStageBlobsConcurrent: hooks staging the same bytes at once, each
// through its own open spool and without the lock, all succeed with the
// same identities and leave one staged file per blob; admission retains
// each once, counted once, and removes the staged copies.
func TestStageBlobsConcurrent(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := ss.Usage()
	ss.Close()
	const n = 16
	refs := make([][]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := Open(sp.dir)
			if err != nil {
				t.Error(err)
				return
			}
			got, err := h.StageBlobs(stageTestBlobs())
			if err != nil {
				t.Error(err)
				return
			}
			for _, r := range got {
				refs[i] = append(refs[i], r.Digest)
			}
		}()
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if strings.Join(refs[i], ",") != strings.Join(refs[0], ",") {
			t.Fatalf("identities differ: %v, %v", refs[i], refs[0])
		}
	}
	if names := stagedNames(t, sp); len(names) != 3 {
		t.Fatalf("staged files %v", names)
	}
	got, err := sp.StageBlobs(stageTestBlobs())
	if err != nil {
		t.Fatal(err)
	}
	ss, err = sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second admission of the same refs costs nothing
		if err := ss.AdmitStaged(got); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := ss.Usage()
	ss.Close()
	if after.Usage.Records != before.Usage.Records+3 {
		t.Fatalf("usage %+v -> %+v", before.Usage, after.Usage)
	}
	for _, r := range got {
		if _, err := sp.ReadBlob(r); err != nil {
			t.Fatal(err)
		}
	}
	if names := stagedNames(t, sp); len(names) != 0 {
		t.Fatalf("staged files left after admission %v", names)
	}
	recount(t, sp.dir, after.Usage)
	// Retained bytes are not staged again.
	if _, err := sp.StageBlobs(stageTestBlobs()); err != nil || len(stagedNames(t, sp)) != 0 {
		t.Fatalf("restaged retained bytes: %v %v", stagedNames(t, sp), err)
	}
}

// TestStageBlobsLimits: the per-artifact limit refuses at staging; with a
// lock holder's recorded usage the staging store refuses what the limits
// leave no room for (nothing written); admission refuses a staged blob
// past the limits (ErrBlobRefused) and a staged blob that does not verify
// is quarantined (ErrBlobMissing). Staged files count in the usage.
func TestStageBlobsLimits(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{Records: 64, Bytes: 64 << 10, ArtifactBytes: 40 << 10})
	if _, err := sp.StageBlobs([]Blob{{Data: make([]byte, 41<<10)}}); !errors.Is(err, ErrBlobRefused) {
		t.Fatalf("above the per-artifact limit: %v", err)
	}
	// No summary: staged without an estimate, refused at admission.
	big := []Blob{{Data: []byte(strings.Repeat("a", 30<<10))}, {Data: []byte(strings.Repeat("b", 30<<10))}}
	refs, err := sp.StageBlobs(big)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = ss.AdmitStaged(refs)
	var q *QuotaError
	if !errors.Is(err, ErrBlobRefused) || !errors.As(err, &q) || q.Bound != "byte_limit" {
		t.Fatalf("admission past the byte limit: %v", err)
	}
	// Both staged files count until reclaimed, so even the first does not fit.
	if _, err := sp.ReadBlob(refs[0]); err == nil {
		t.Fatal("a refused blob is retained")
	}
	u, _ := ss.Usage()
	ss.Close()
	recount(t, sp.dir, u.Usage)

	// With a summary the staging store refuses up front.
	ld := filepath.Join(t.TempDir(), "ledger")
	if err := os.Mkdir(ld, 0o700); err != nil {
		t.Fatal(err)
	}
	sp2 := withSummary(t, mustInit(t, Limits{Records: 64, Bytes: 64 << 10, ArtifactBytes: 40 << 10}).dir, filepath.Join(ld, "summary"))
	if ss, err := sp2.Begin(ctx); err != nil {
		t.Fatal(err)
	} else {
		ss.Close()
	}
	if _, err := sp2.StageBlobs(big); !errors.Is(err, ErrBlobRefused) || len(stagedNames(t, sp2)) != 0 {
		t.Fatalf("staging past the recorded usage: %v, staged %v", err, stagedNames(t, sp2))
	}

	// A staged file whose bytes do not match its name.
	sp3 := mustInit(t, Limits{})
	refs, err = sp3.StageBlobs([]Blob{{Data: []byte("genuine")}})
	if err != nil {
		t.Fatal(err)
	}
	names := stagedNames(t, sp3)
	if err := os.WriteFile(filepath.Join(sp3.dir, stagedDir, names[0]), []byte("forged"), 0o600); err != nil {
		t.Fatal(err)
	}
	ss, err = sp3.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.AdmitStaged(refs); !errors.Is(err, ErrBlobMissing) {
		t.Fatalf("a forged staged blob: %v", err)
	}
	u, _ = ss.Usage()
	ss.Close()
	if _, err := sp3.ReadBlob(refs[0]); err == nil {
		t.Fatal("the forged blob was retained")
	}
	if q := quarantined(t, sp3); len(q) != 1 {
		t.Fatalf("quarantine %v", q)
	}
	recount(t, sp3.dir, u.Usage)
}

// TestReclaimStaged: a staged blob no record names (its hook died after
// staging) and a dead writer's temporary file are removed by the next
// admission once the intake is empty and they are older than the grace
// period; a young one, or any while an intake file waits, is kept.
func TestReclaimStaged(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	if _, err := sp.StageBlobs(stageTestBlobs()); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(sp.dir, stagedDir, ".tmp-deadwriter")
	if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	intake := func(sp *Spool) Usage {
		ss, err := sp.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Close()
		if _, err := ss.Intake(10); err != nil {
			t.Fatal(err)
		}
		u, _ := ss.Usage()
		return u.Usage
	}
	intake(sp) // young: kept
	if n := len(stagedNames(t, sp)); n != 4 {
		t.Fatalf("%d staged files after a young admission, want 4", n)
	}
	sp.intakeGrace = 0
	if _, err := sp.WriteIntake([]byte("a waiting record"), time.Now()); err != nil {
		t.Fatal(err)
	}
	intake(sp) // an intake file waits: kept
	if n := len(stagedNames(t, sp)); n != 4 {
		t.Fatalf("%d staged files while an intake file waits, want 4", n)
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := ss.Intake(10)
	if err != nil || len(files) != 1 {
		t.Fatal(files, err)
	}
	if err := ss.DoneIntake(files[0].Name); err != nil {
		t.Fatal(err)
	}
	ss.Close()
	u := intake(sp)
	if names := stagedNames(t, sp); len(names) != 0 {
		t.Fatalf("staged files left %v", names)
	}
	recount(t, sp.dir, u)
}

// TestCrashStageBlobs kills a real process at each failpoint of staging and
// admission: no corrupt artifact is ever retained, the reopened spool
// counts exactly what it holds, a retry retains every blob, and the debris
// is reclaimed.
func TestCrashStageBlobs(t *testing.T) {
	fps := append(writeFailpoints("stage.blob", false), "stage.synced", "stage.admit.renamed")
	for _, fp := range fps {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			sp := mustInit(t, Limits{})
			out := mustCrash(t, "stage", sp.dir, fp)
			if strings.Contains(out, "admitted") {
				t.Fatalf("the child reported the admission before its failpoint: %s", out)
			}
			sp, err := Open(sp.dir)
			if err != nil {
				t.Fatal(err)
			}
			sp.intakeGrace = 0
			ss, err := sp.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ss.Intake(10); err != nil { // reclaims the debris
				t.Fatal(err)
			}
			ss.Close()
			noTemps(t, sp.dir)
			if names := stagedNames(t, sp); len(names) != 0 {
				t.Fatalf("debris left %v", names)
			}
			refs, err := sp.StageBlobs(stageTestBlobs())
			if err != nil {
				t.Fatal(err)
			}
			ss, err = sp.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := ss.AdmitStaged(refs); err != nil {
				t.Fatal(err)
			}
			u, _ := ss.Usage()
			ss.Close()
			for _, r := range refs {
				if _, err := sp.ReadBlob(r); err != nil {
					t.Fatalf("%+v: %v", r, err)
				}
			}
			recount(t, sp.dir, u.Usage)
			if _, err := Inspect(sp.dir, 0); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWriteIntakeAfter: the intake file is installed only after the
// overlapped step succeeded; its failure leaves no intake file.
func TestWriteIntakeAfter(t *testing.T) {
	sp := mustInit(t, Limits{})
	g := sp.DeferredStaging()
	if _, err := g.PutBlobs(stageTestBlobs()); err != nil {
		t.Fatal(err)
	}
	ran := false
	if _, err := sp.WriteIntakeAfter([]byte("names the blobs"), time.Now(), func() error { ran = true; return g.Sync() }); err != nil || !ran {
		t.Fatalf("%v (ran %v)", err, ran)
	}
	boom := errors.New("the staging directory could not be synced")
	if _, err := sp.WriteIntakeAfter([]byte("second"), time.Now(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed step: %v", err)
	}
	if n, err := sp.WaitingIntake(); err != nil || n != 1 {
		t.Fatalf("%d intake files (%v), want only the first", n, err)
	}
	noTemps(t, filepath.Join(sp.dir, intakeDir))
}

// TestCrashStageReclaimed kills a real process at stage.reclaimed, after
// the reclamation removed the staged debris (orphan blobs, a copy of a
// retained artifact, a dead writer's temporary file) and before it synced
// the staging directory. Inspect then counts exactly what a lock holder
// counts, the next admission completes the reclamation, every retained
// artifact and record is still there once (nothing lost, nothing doubled)
// and the orphans' bytes, staged again, are admitted and counted once.
func TestCrashStageReclaimed(t *testing.T) {
	ctx := context.Background()
	sp := mustInit(t, Limits{})
	kept := stageTestBlobs()
	refs, err := sp.StageBlobs(kept)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.AdmitStaged(refs); err != nil {
		t.Fatal(err)
	}
	ss.Close()
	if _, err := sp.Append(tagged("kept", event.PromptSubmit)); err != nil {
		t.Fatal(err)
	}
	orphans := []Blob{{Data: []byte("orphan one")}, {Data: []byte("orphan two")}}
	if _, err := sp.StageBlobs(orphans); err != nil {
		t.Fatal(err)
	}
	arts, err := os.ReadDir(filepath.Join(sp.dir, artifactsDir))
	if err != nil || len(arts) == 0 {
		t.Fatalf("artifacts %v %v", arts, err)
	}
	copyOf, err := os.ReadFile(filepath.Join(sp.dir, artifactsDir, arts[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.dir, stagedDir, arts[0].Name()), copyOf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.dir, stagedDir, ".tmp-deadwriter"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := len(stagedNames(t, sp)); n != 4 {
		t.Fatalf("%d staged files before the crash, want 4", n)
	}

	out := mustCrash(t, "reclaim", sp.dir, "stage.reclaimed")
	if strings.Contains(out, "reclaimed") {
		t.Fatalf("the child reported the reclamation before its failpoint: %s", out)
	}
	// Inspect, which takes no lock, counts what a lock holder counts.
	rep, err := Inspect(sp.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 0 || rep.DeliveryStopped || !rep.AuthoritySafe {
		t.Fatalf("inspect after the crash: problems %v, delivery stopped %v, authority safe %v", rep.Problems, rep.DeliveryStopped, rep.AuthoritySafe)
	}
	recount(t, sp.dir, rep.Usage)

	// The next admission completes the reclamation.
	sp, err = Open(sp.dir)
	if err != nil {
		t.Fatal(err)
	}
	sp.intakeGrace = 0
	ss, err = sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss.Intake(10); err != nil {
		t.Fatal(err)
	}
	u, _ := ss.Usage()
	ss.Close()
	noTemps(t, sp.dir)
	if names := stagedNames(t, sp); len(names) != 0 {
		t.Fatalf("debris left after the next admission: %v", names)
	}
	recount(t, sp.dir, u.Usage)
	if rep, err := Inspect(sp.dir, 0); err != nil || rep.Usage != u.Usage || rep.Artifacts != len(kept) || len(rep.Problems) != 0 {
		t.Fatalf("inspect after completion: %+v (lock holder counts %+v) %v", rep, u.Usage, err)
	}
	for _, r := range refs {
		if _, err := sp.ReadBlob(r); err != nil {
			t.Fatalf("a retained artifact was lost: %+v: %v", r, err)
		}
	}
	if got := tags(t, sp); len(got) != 1 || got["kept"] == 0 {
		t.Fatalf("records after the crash %v, want the one record once", got)
	}

	// The orphans' bytes, staged again by a later hook, are admitted and
	// counted once.
	orefs, err := sp.StageBlobs(orphans)
	if err != nil {
		t.Fatal(err)
	}
	ss, err = sp.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.AdmitStaged(orefs); err != nil {
		t.Fatal(err)
	}
	u, _ = ss.Usage()
	ss.Close()
	recount(t, sp.dir, u.Usage)
	if rep, err := Inspect(sp.dir, 0); err != nil || rep.Artifacts != len(kept)+len(orphans) || rep.Usage != u.Usage {
		t.Fatalf("inspect after re-admission: %+v (lock holder counts %+v) %v", rep, u.Usage, err)
	}
}
