package codex

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// benchRollout writes a rollout of about size bytes whose last call is
// call_last (exit 3), as a long session's rollout looks at its PostToolUse.
func benchRollout(b *testing.B, size int) string {
	dir := filepath.Join(b.TempDir(), "sessions", "2026", "12", "01")
	os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, "rollout-2026-12-01T11-57-45-"+session+".jsonl")
	var sb strings.Builder
	line := `{"type":"response_item","payload":{"type":"function_call_output","call_id":"call_old","output":"` + strings.Repeat("x", 2000) + `"}}` + "\n"
	for sb.Len() < size {
		sb.WriteString(line)
	}
	sb.WriteString(`{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"CommandExecution","id":"call_last","status":"failed","exit_code":3}}}` + "\n")
	os.WriteFile(path, []byte(sb.String()), 0o600)
	return path
}

// BenchmarkRolloutExitCode is the exit-code lookup of one PostToolUse in a
// 32 MiB rollout; BenchmarkRolloutWholeRead is the reference: reading that
// rollout whole (what a lookup without the tail window costs at least).
func BenchmarkRolloutExitCode(b *testing.B) {
	path := benchRollout(b, 32<<20)
	b.ResetTimer()
	for range b.N {
		if c, _ := RolloutExitCode(path, session, "call_last"); c == nil || *c != 3 {
			b.Fatal("not found")
		}
	}
}

func BenchmarkRolloutWholeRead(b *testing.B) {
	path := benchRollout(b, 32<<20)
	b.ResetTimer()
	for range b.N {
		if _, err := fsutil.ReadFileNoFollow(path, maxRolloutBytes); err != nil {
			b.Fatal(err)
		}
	}
}
