package delivery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// BenchmarkHookAction measures one in-process PreToolUse hook (resolve,
// append, deliver to the embedded Hub) for Bash without a rule and with
// Bash=execution:partial:process_exit_code (source binding of a clean
// 200-file repository, receipt, action start append and delivery), next to
// the one-durable-write reference (fsutil.WriteNew). Run with
// -benchtime=100x: every iteration is a new tool call in the spool.
func BenchmarkHookAction(b *testing.B) {
	for _, withRule := range []bool{false, true} {
		name := "PreToolUse/no-rule"
		if withRule {
			name = "PreToolUse/rule"
		}
		b.Run(name, func(b *testing.B) {
			t := b
			f := newFixture(t)
			for i := range 200 {
				p := filepath.Join(f.root, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d.go", i))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte("package p\n"), 0o644)
			}
			f.gitRepo(t)
			var rules []action.Rule
			if withRule {
				rules = []action.Rule{action.DefaultRule}
			} else {
				rules = []action.Rule{{Tool: "Other", Kind: "execution", Coverage: "unknown", ResultSource: "unverified"}}
			}
			f.setBinding(t, strings.Repeat("a", 64), rules...)
			f.startWork(t)
			i := 0
			for b.Loop() {
				i++
				r, err := capture.HandleClaudeHook(context.Background(), f.store, Opener{f.cfg}, strings.NewReader(f.payload("PreToolUse",
					tool("Bash", fmt.Sprintf("toolu_%d", i), `{"command":"go test ./..."}`, ""))), time.Now())
				if err != nil || r.Failed != 0 || (withRule != (r.Action == action.Started)) {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
	b.Run("fsyncref", func(b *testing.B) {
		dir := b.TempDir()
		i := 0
		for b.Loop() {
			i++
			if err := fsutil.WriteNew(filepath.Join(dir, fmt.Sprint(i)), []byte("x"), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
}
