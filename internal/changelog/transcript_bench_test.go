package changelog

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// sessionStorage runs a synthetic Claude Code session of calls tool calls
// against a checkout and a transcript root named root (TranscriptRootName:
// stored as appended bytes; any other name outside ~/.claude/projects: the
// whole transcript again in every increment, as before) and returns the
// total bytes of the stored increments, the final transcript's size and the
// bytes the calls wrote to the workspace. Each call appends its tool_use
// and tool_result lines (1-3 KB each, incompressible base64 like real
// tool output) and writes one file of 0.5-4 KB (every tenth call rewrites
// an earlier one).
func sessionStorage(tb testing.TB, calls int, root string) (total, transcript, workspace int64) {
	tb.Helper()
	base := tb.TempDir()
	co := filepath.Join(base, "repo")
	tr := filepath.Join(base, "home", ".claude", "projects", "-repo")
	if root != TranscriptRootName {
		tr = filepath.Join(base, "transcripts")
	}
	if err := os.MkdirAll(co, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(tr, 0o700); err != nil {
		tb.Fatal(err)
	}
	c, err := Open(filepath.Join(base, "changelog"), Options{Roots: []Root{{Name: "checkout", Path: co}, {Name: root, Path: tr}}})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	text := func(n int) string {
		b := make([]byte, n*3/4)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	tpath := filepath.Join(tr, "S.jsonl")
	f, err := os.OpenFile(tpath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, `{"type":"user","sessionId":"S","message":{"role":"user","content":%q}}`+"\n", text(400))
	ctx := context.Background()
	for i := range calls {
		fmt.Fprintf(f, `{"type":"assistant","sessionId":"S","message":{"content":[{"type":"tool_use","id":"t%d","input":%q}]}}`+"\n", i, text(1000+rng.IntN(2000)))
		name := fmt.Sprintf("f%03d.txt", i)
		if i%10 == 9 {
			name = fmt.Sprintf("f%03d.txt", rng.IntN(i))
		}
		content := text(512 + rng.IntN(3584))
		if err := os.WriteFile(filepath.Join(co, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
		workspace += int64(len(content))
		inc, err := c.Capture(ctx, CaptureRequest{Position: i, SessionID: "S", ToolUseID: fmt.Sprintf("t%d", i), Tool: "Bash"})
		if err != nil {
			tb.Fatal(err)
		}
		total += inc.Size
		// The host appends the result after the hook ran.
		fmt.Fprintf(f, `{"type":"user","sessionId":"S","message":{"content":[{"type":"tool_result","tool_use_id":"t%d","content":%q}]}}`+"\n", i, text(1000+rng.IntN(2000)))
	}
	fi, err := os.Stat(tpath)
	if err != nil {
		tb.Fatal(err)
	}
	return total, fi.Size(), workspace
}

// TestSessionStorageLinear: a 200-call session's increments total at most
// 1.5x the final transcript plus the bytes the calls wrote (issue 13).
func TestSessionStorageLinear(t *testing.T) {
	total, tr, ws := sessionStorage(t, 200, TranscriptRootName)
	ratio := float64(total) / float64(tr+ws)
	t.Logf("200 calls: increments %d bytes, final transcript %d + workspace %d bytes: ratio %.3f", total, tr, ws, ratio)
	if ratio > 1.5 {
		t.Fatalf("increments total %d bytes, %.2fx the final transcript (%d) plus the workspace bytes written (%d); want at most 1.5x", total, ratio, tr, ws)
	}
}

// BenchmarkSessionStorage200 reports a 200-call session's total increment
// bytes against (final transcript + workspace bytes written): with the
// transcript stored as appended bytes (delta) and, as the reference in the
// same run, whole in every increment (whole).
//
//	go test -run '^$' -bench SessionStorage -count 5 ./internal/changelog/
func BenchmarkSessionStorage200(b *testing.B) {
	for _, tc := range []struct{ name, root string }{{"delta", TranscriptRootName}, {"whole", "transcripts"}} {
		b.Run(tc.name, func(b *testing.B) {
			var total, tr, ws int64
			for b.Loop() {
				total, tr, ws = sessionStorage(b, 200, tc.root)
			}
			b.ReportMetric(float64(total), "increment-bytes")
			b.ReportMetric(float64(tr+ws), "transcript+workspace-bytes")
			b.ReportMetric(float64(total)/float64(tr+ws), "ratio")
		})
	}
}
