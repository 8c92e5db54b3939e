package capture

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// turn is what one Claude Code turn appends to its transcript: a prompt, a
// ~24 KiB attachment, four assistant messages of two blocks each with tool
// results (about 170 KB in all).
func turn(session string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"type":"user","message":{"role":"user","content":"prompt %d"},"timestamp":"2026-11-29T21:15:49.598Z","sessionId":%q}`+"\n", n, session)
	fmt.Fprintf(&b, `{"type":"attachment","attachment":{"type":"prompt_snapshot","systemPrompt":[%q]},"timestamp":"2026-11-29T21:15:49.595Z","sessionId":%q}`+"\n",
		strings.Repeat("You are an agent working with the user toward their goals. ", 400), session)
	for step := range 4 {
		id := fmt.Sprintf("msg_%06d_%d", n, step)
		for _, block := range []string{`{"type":"text","text":"I will run the tests."}`, `{"type":"tool_use","id":"toolu_` + id + `","name":"Bash","input":{"command":"go test ./..."}}`} {
			fmt.Fprintf(&b, `{"type":"assistant","message":{"id":%q,"model":"claude-opus-5-5","role":"assistant","stop_reason":"tool_use","content":[%s],"usage":{"input_tokens":12000,"output_tokens":300,"cache_creation_input_tokens":0,"cache_read_input_tokens":11000}},"timestamp":"2026-11-29T21:15:49.785Z","sessionId":%q}`+"\n", id, block, session)
		}
		fmt.Fprintf(&b, `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_%s","type":"tool_result","content":%q}]},"timestamp":"2026-11-29T21:15:50.098Z","sessionId":%q}`+"\n",
			id, strings.Repeat("ok  \tgithub.com/example/pkg\t0.123s\n", 80), session)
	}
	return b.String()
}

// BenchmarkTranscriptStep measures what the transcript step adds to one
// hook invocation (spool session already held, as in HandleClaudeHook): a
// hook after which the transcript did not grow, and a Stop hook after a
// whole turn (~170 KB, 4 usage records appended durably, cursor saved). The
// reference is one durable small-file write (fsutil.WriteAtomic).
func BenchmarkTranscriptStep(b *testing.B) {
	const session = "11111111-2222-3333-4444-555555555555"
	setup := func(b *testing.B) (StateDir, *binding.Binding, *spool.Tx, string) {
		dir := b.TempDir()
		history := filepath.Join(dir, "projects")
		os.MkdirAll(filepath.Join(history, "-repo"), 0o700)
		sp, err := spool.Init(filepath.Join(dir, "spool"))
		if err != nil {
			b.Fatal(err)
		}
		ss, err := sp.Begin(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ss.Close)
		bd := &binding.Binding{Spool: filepath.Join(dir, "spool"), ClaudeHistoryRoot: history, CaptureMode: "metadata-only"}
		tr := filepath.Join(history, "-repo", session+".jsonl")
		os.WriteFile(tr, []byte(turn(session, 0)), 0o600)
		return StateDir{Dir: filepath.Join(dir, "cfg")}, bd, ss, tr
	}
	target := Target{WorkID: "wrk_1", Generation: 1, Session: "default"}
	stop := &agent.Payload{SessionID: session, HookEventName: "Stop"}
	raw := []byte(`{"hook_event_name":"Stop"}`)
	b.Run("nothing-new", func(b *testing.B) {
		st, bd, ss, _ := setup(b)
		if _, err := st.TranscriptStep(ss, bd, raw, &agent.Payload{SessionID: session, HookEventName: "SessionStart", Source: "startup"}, target, "metadata-only", time.Now()); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if n, err := st.TranscriptStep(ss, bd, raw, stop, target, "metadata-only", time.Now()); err != nil || n != 0 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("one-turn", func(b *testing.B) {
		st, bd, ss, tr := setup(b)
		if _, err := st.TranscriptStep(ss, bd, raw, &agent.Payload{SessionID: session, HookEventName: "SessionStart", Source: "startup"}, target, "metadata-only", time.Now()); err != nil {
			b.Fatal(err)
		}
		i := 1
		for b.Loop() {
			b.StopTimer()
			f, _ := os.OpenFile(tr, os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString(turn(session, i))
			f.Close()
			i++
			b.StartTimer()
			if n, err := st.TranscriptStep(ss, bd, raw, stop, target, "metadata-only", time.Now()); err != nil || n != 4 {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("reference-one-durable-write", func(b *testing.B) {
		p := filepath.Join(b.TempDir(), "f")
		for b.Loop() {
			if err := fsutil.WriteAtomic(p, []byte(`{"cursor":1}`), fsutil.FileMode); err != nil {
				b.Fatal(err)
			}
		}
	})
}
