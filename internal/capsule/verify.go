package capsule

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/scan"
)

// VerifyReport is the outcome of checking a capsule against its seal.
type VerifyReport struct {
	RunID      string   `json:"run_id"`
	OK         bool     `json:"ok"`
	Sealed     bool     `json:"sealed"`
	Rollbacks  int      `json:"post_seal_extensions"`
	Missing    []string `json:"missing"`
	Unexpected []string `json:"unexpected"`
	Mismatched []string `json:"mismatched"`
	Problems   []string `json:"problems"`
	// ClearedTemporaries names the temporary copies an interrupted rollback
	// left in .agentdiff/tmp, which this verify removed.
	ClearedTemporaries []string `json:"cleared_temporaries,omitempty"`
}

// ErrUnverified is returned by operations that need a verified capsule.
var ErrUnverified = errors.New("capsule failed verification")

// CapsuleDir returns the capsule directory of id below root, refusing a
// malformed id and a .agentdiff or .agentdiff/runs that is not a real
// directory (a symlink is refused, as run refuses it).
func CapsuleDir(root, id string) (string, error) {
	if !ValidRunID(id) {
		return "", fmt.Errorf("%w: %q", ErrBadRunID, id)
	}
	if err := checkStateDirs(root); err != nil {
		return "", err
	}
	return filepath.Join(root, StateDir, "runs", id), nil
}

// ErrStateSymlink reports a .agentdiff, .agentdiff/runs or capsule
// directory that is a symlink or another non-directory.
var ErrStateSymlink = errors.New("is not a directory (symlinks are refused)")

// checkStateDirs refuses a .agentdiff or .agentdiff/runs below root that
// exists and is not a directory; absent ones are left to the caller.
func checkStateDirs(root string) error {
	for _, d := range []string{filepath.Join(root, StateDir), filepath.Join(root, StateDir, "runs")} {
		fi, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s %w", d, ErrStateSymlink)
		}
	}
	return nil
}

// readSeal reads and validates one seal file.
func readSeal(dir, name string) (*Integrity, []byte, error) {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, name), MaxCapsuleFileBytes)
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var in Integrity
	if err := dec.Decode(&in); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if in.SchemaVersion != SchemaVersion || in.Algorithm != "sha256" {
		return nil, nil, fmt.Errorf("%s: unsupported schema or algorithm", name)
	}
	return &in, b, nil
}

// hashPrefix hashes the first n bytes of the capsule file rel (no-follow) and
// returns the digest and the file's full size.
func hashPrefix(dir, rel string, n int64) (string, int64, error) {
	f, err := scan.OpenFile(dir, rel)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	h := sha256.New()
	got, err := io.Copy(h, io.LimitReader(f, n))
	if err != nil {
		return "", 0, err
	}
	if got != n {
		return "", fi.Size(), errors.New("short")
	}
	return hex.EncodeToString(h.Sum(nil)), fi.Size(), nil
}

// Verify checks the capsule directory against integrity.json and the chain of
// post-seal rollback extensions: every sealed file must exist with its sealed
// digest, events.jsonl must be exactly the sealed prefix plus sealed appends,
// and no other object may be present. It then runs every check rollback runs
// on the capsule's content (safe paths, manifests that agree with
// result.json), so a consistently resealed capsule naming "../x" fails here
// exactly as rollback refuses it. dir must be CapsuleDir's answer: when no
// run or rollback holds the root's lock, Verify also removes the temporary
// copies an interrupted rollback left in <root>/.agentdiff/tmp and reports
// them.
func Verify(ctx context.Context, dir, id string) (*VerifyReport, error) {
	var cleared []string
	state := filepath.Dir(filepath.Dir(dir))
	if filepath.Base(state) == StateDir {
		if lock, err := tryLock(state); err == nil {
			cleared, _ = clearRollbackTemps(state)
			lock.Close()
		}
	}
	r, err := verifyCapsule(ctx, dir, id)
	if r != nil {
		r.ClearedTemporaries = cleared
	}
	return r, err
}

// verifyCapsule is Verify without the clearing of rollback temporaries.
func verifyCapsule(ctx context.Context, dir, id string) (*VerifyReport, error) {
	r := &VerifyReport{RunID: id, Missing: []string{}, Unexpected: []string{}, Mismatched: []string{}, Problems: []string{}}
	stat := os.Lstat
	if strings.HasPrefix(dir, "/proc/self/fd/") {
		stat = os.Stat // a directory rollback holds open (heldPath)
	}
	if fi, err := stat(dir); err != nil {
		return nil, fmt.Errorf("capsule %s not found: %w", id, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("capsule %s %w", id, ErrStateSymlink)
	}
	seals := map[string]bool{}
	in, raw, err := readSeal(dir, FileIntegrity)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			r.Problems = append(r.Problems, "capsule is not sealed (no integrity.json)")
			r.Missing = append(r.Missing, FileIntegrity)
		} else {
			r.Problems = append(r.Problems, "integrity.json unreadable: "+err.Error())
			r.Mismatched = append(r.Mismatched, FileIntegrity)
		}
		return finish(r, dir, nil, seals), nil
	}
	r.Sealed = true
	seals[FileIntegrity] = true
	if in.RunID != id || in.Sequence != 0 {
		r.Problems = append(r.Problems, "integrity.json names another run or sequence")
		r.Mismatched = append(r.Mismatched, FileIntegrity)
	}
	// Expected state: latest sealed digest per file.
	expect := map[string]fileSum{}
	for _, f := range in.Files {
		if err := validCapsuleRel(f.Path); err != nil {
			r.Problems = append(r.Problems, err.Error())
			continue
		}
		expect[f.Path] = f
	}
	prev := sumBytes(raw)
	for n := 1; ; n++ {
		name := RollbackSealPrefix + strconv.Itoa(n) + ".json"
		ext, eraw, err := readSeal(dir, name)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		seals[name] = true
		if err != nil {
			r.Problems = append(r.Problems, err.Error())
			r.Mismatched = append(r.Mismatched, name)
			break
		}
		if ext.Sequence != n || ext.PreviousSHA256 != prev || ext.RunID != id {
			r.Problems = append(r.Problems, name+" does not chain to the previous seal")
			r.Mismatched = append(r.Mismatched, name)
			break
		}
		for _, f := range ext.Files {
			if f.Path != FileEvents && f.Path != FileRollbackResult {
				r.Problems = append(r.Problems, fmt.Sprintf("%s may only extend %s and %s, not %q", name, FileEvents, FileRollbackResult, f.Path))
				continue
			}
			if old, ok := expect[f.Path]; ok && f.Path == FileEvents && f.Size < old.Size {
				r.Problems = append(r.Problems, name+" shrinks events.jsonl")
				continue
			}
			expect[f.Path] = f
		}
		r.Rollbacks = n
		prev = sumBytes(eraw)
	}
	paths := make([]string, 0, len(expect))
	for p := range expect {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := expect[p]
		sum, size, err := hashPrefix(dir, p, f.Size)
		switch {
		case errors.Is(err, os.ErrNotExist):
			r.Missing = append(r.Missing, p)
		case err != nil || sum != f.SHA256:
			r.Mismatched = append(r.Mismatched, p)
		case size != f.Size:
			r.Mismatched = append(r.Mismatched, p)
			if f.AppendOnly {
				r.Problems = append(r.Problems, fmt.Sprintf("%s has %d unsealed bytes after the sealed %d", p, size-f.Size, f.Size))
			}
		}
	}
	r = finish(r, dir, expect, seals)
	if r.OK {
		// The seal holds: run rollback's content checks too.
		if _, _, _, err := checkCapsule(dir); err != nil {
			r.Problems = append(r.Problems, "capsule content refused: "+err.Error())
			r.OK = false
		} else if r.Rollbacks > 0 {
			var rr RollbackResult
			if err := readJSON(dir, FileRollbackResult, &rr); err != nil {
				r.Problems = append(r.Problems, "capsule content refused: "+err.Error())
				r.OK = false
			}
		}
	}
	return r, nil
}

// finish lists unexpected objects and sets OK.
func finish(r *VerifyReport, dir string, expect map[string]fileSum, seals map[string]bool) *VerifyReport {
	err := scan.Walk(context.Background(), dir, scan.Options{}, func(e *scan.Entry) error {
		if e.Type == scan.Dir && e.Path == DirBackups {
			return nil
		}
		if _, ok := expect[e.Path]; ok && e.Type == scan.File {
			return nil
		}
		if seals[e.Path] && e.Type == scan.File {
			return nil
		}
		r.Unexpected = append(r.Unexpected, e.Path)
		return nil
	})
	if err != nil {
		r.Problems = append(r.Problems, "listing capsule: "+err.Error())
	}
	r.OK = r.Sealed && err == nil && len(r.Missing) == 0 && len(r.Unexpected) == 0 && len(r.Mismatched) == 0 && len(r.Problems) == 0
	return r
}

func validCapsuleRel(p string) error {
	if _, err := scan.SplitRel(p); err != nil {
		return fmt.Errorf("sealed path %q is unsafe", p)
	}
	switch {
	case p == FileMetadata, p == FilePolicy, p == FileBefore, p == FileAfter, p == FileRuntime, p == FileResult, p == FileEvents, p == FileBase:
		return nil
	case strings.HasPrefix(p, DirBackups+"/") && validSum(strings.TrimPrefix(p, DirBackups+"/")):
		return nil
	}
	return fmt.Errorf("sealed path %q is not a capsule artifact", p)
}

// readJSON decodes a capsule JSON file strictly (bounded, no-follow).
func readJSON(dir, name string, v any) error {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, name), MaxCapsuleFileBytes)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
