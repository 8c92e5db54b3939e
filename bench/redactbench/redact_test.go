// Package redactbench compares the one redaction function (internal/redact)
// with the redaction as it was on main before it (package baseline, a
// verbatim copy), on a realistic 100 KB Claude Code transcript, in the same
// run:
//
//	go test -run '^$' -bench . -count 5 ./bench/redactbench/
//
// Transcript benchmarks redact the JSONL line by line (the changelog's
// transcript copies; baseline: String per line; now: Redact in JSON mode,
// and in text mode for the like-for-like rule cost). HookBody benchmarks
// redact the same content as hook bodies (prompt, tool input, tool
// response; baseline: the old claude redactBody, now: redact.Body).
package redactbench

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/bench/redactbench/baseline"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/redact"
)

// The secrets planted in the transcript; both implementations must remove
// the shape-based ones.
var (
	ghToken     = "ghp_" + strings.Repeat("Ab3x", 9)
	bearerToken = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl"
)

// transcript builds a realistic Claude Code JSONL transcript of about
// target bytes: prompts, assistant text with usage, Bash/Read/Edit tool
// uses, tool results holding real Go source, and a few secrets.
func transcript(tb testing.TB, target int) []string {
	tb.Helper()
	var srcs []string
	for _, p := range []string{"../../internal/capture/hook.go", "../../internal/spool/append.go", "../../internal/delivery/delivery.go"} {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		srcs = append(srcs, string(b))
	}
	line := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		return string(b) + "\n"
	}
	type m = map[string]any
	usage := func(i int) m {
		return m{"input_tokens": 1200 + i, "output_tokens": 80 + i, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 24000 + i}
	}
	base := func(typ string, i int) m {
		return m{"type": typ, "sessionId": "5f0c7a52-3b1e-4c1d-9c7e-1d2f3a4b5c6d", "uuid": fmt.Sprintf("u-%08d", i),
			"timestamp": fmt.Sprintf("2026-12-01T12:%02d:%02d.123Z", i/60%60, i%60), "cwd": "/home/dev/repo", "version": "2.1.0"}
	}
	cmds := []string{"go test ./internal/... -run TestHook -count=1", "git status --short", "go vet ./...",
		"grep -rn 'max_tokens' internal/ | head", "export GITHUB_TOKEN=" + ghToken + " && gh pr list",
		`curl -sS -H "Authorization: Bearer ` + bearerToken + `" https://api.example/v1/items`, "ls -la internal/capture"}
	var out []string
	size := 0
	for i := 0; size < target; i++ {
		var l string
		switch i % 6 {
		case 0:
			u := base("user", i)
			u["message"] = m{"role": "user", "content": "Please look at the failing test in internal/capture and fix the hook so that input_tokens are kept; then run the tests again."}
			l = line(u)
		case 1:
			a := base("assistant", i)
			a["message"] = m{"id": fmt.Sprintf("msg_%d", i), "model": "claude-opus-4", "role": "assistant", "stop_reason": "tool_use",
				"content": []any{m{"type": "text", "text": "I'll read the hook first to see where the token counts are dropped, then run the focused test."}}, "usage": usage(i)}
			l = line(a)
		case 2:
			a := base("assistant", i)
			a["message"] = m{"id": fmt.Sprintf("msg_%d", i), "model": "claude-opus-4", "role": "assistant", "stop_reason": "tool_use",
				"content": []any{m{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i), "name": "Bash", "input": m{"command": cmds[i/6%len(cmds)], "description": "Run the focused test"}}}, "usage": usage(i)}
			l = line(a)
		case 3:
			u := base("user", i)
			u["message"] = m{"role": "user", "content": []any{m{"tool_use_id": fmt.Sprintf("toolu_%d", i-1), "type": "tool_result",
				"content": "ok  \tgithub.com/agentscm/agentscm/internal/capture\t2.837s\n--- PASS: TestHook (0.01s)\n", "is_error": false}}}
			l = line(u)
		case 4:
			a := base("assistant", i)
			a["message"] = m{"id": fmt.Sprintf("msg_%d", i), "model": "claude-opus-4", "role": "assistant", "stop_reason": "tool_use",
				"content": []any{m{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", i), "name": "Read", "input": m{"file_path": "/home/dev/repo/internal/capture/hook.go", "offset": 400, "limit": 120}}}, "usage": usage(i)}
			l = line(a)
		case 5:
			src := srcs[i/6%len(srcs)]
			off := (i * 977) % (len(src) - 3000)
			u := base("user", i)
			u["message"] = m{"role": "user", "content": []any{m{"tool_use_id": fmt.Sprintf("toolu_%d", i-1), "type": "tool_result", "content": src[off : off+2500]}}}
			l = line(u)
		}
		out = append(out, l)
		size += len(l)
	}
	return out
}

func total(lines []string) int64 {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return int64(n)
}

// checkBoth makes sure both implementations remove the planted shapes, so
// the comparison is between two working redactions.
func checkBoth(tb testing.TB, lines []string) {
	var old, now strings.Builder
	for _, l := range lines {
		s, _ := baseline.String(l)
		old.WriteString(s)
		now.WriteString(redact.Redact(l, redact.Options{JSON: true}).Text)
	}
	for name, s := range map[string]string{"baseline": old.String(), "now": now.String()} {
		if strings.Contains(s, ghToken) || strings.Contains(s, bearerToken) {
			tb.Fatalf("%s left a planted secret", name)
		}
	}
}

func BenchmarkTranscript(b *testing.B) {
	lines := transcript(b, 100<<10)
	checkBoth(b, lines)
	run := func(name string, f func(string) int) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(total(lines))
			n := 0
			for b.Loop() {
				for _, l := range lines {
					n += f(l)
				}
			}
			b.ReportMetric(float64(n)/float64(b.N), "redactions/op")
		})
	}
	run("baseline-String", func(l string) int { _, n := baseline.String(l); return n })
	run("Redact-text", func(l string) int { return redact.Redact(l, redact.Options{}).Redactions })
	run("Redact-JSON", func(l string) int { return redact.Redact(l, redact.Options{JSON: true}).Redactions })
}

// hookBodies turns the transcript's content into the bodies hooks carry:
// user text as a prompt, tool inputs, tool results as responses.
func hookBodies(tb testing.TB, lines []string) []event.Body {
	var out []event.Body
	for _, l := range lines {
		var v struct {
			Message struct {
				Content json.RawMessage `json:"content"`
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			tb.Fatal(err)
		}
		var s string
		if json.Unmarshal(v.Message.Content, &s) == nil {
			out = append(out, event.Body{Prompt: s})
			continue
		}
		var blocks []map[string]json.RawMessage
		json.Unmarshal(v.Message.Content, &blocks)
		for _, bl := range blocks {
			switch {
			case bl["input"] != nil:
				out = append(out, event.Body{ToolInput: bl["input"]})
			case bl["content"] != nil:
				resp, _ := json.Marshal(map[string]json.RawMessage{"stdout": bl["content"]})
				out = append(out, event.Body{ToolResponse: resp})
			case bl["text"] != nil:
				var t string
				json.Unmarshal(bl["text"], &t)
				out = append(out, event.Body{Message: t})
			}
		}
	}
	return out
}

// baselineBody is claude's redactBody as it was on main (baseline.Value on
// the decoded tool input and response, baseline.String on text fields).
func baselineBody(b *event.Body) {
	n := 0
	str := func(s string) string {
		out, c := baseline.String(s)
		n += c
		return out
	}
	js := func(raw json.RawMessage) json.RawMessage {
		if len(raw) == 0 {
			return raw
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return json.RawMessage(strconv.Quote(str(string(raw))))
		}
		out, c := baseline.Value(v)
		n += c
		enc, err := json.Marshal(out)
		if err != nil {
			return nil
		}
		return enc
	}
	b.Prompt, b.Error, b.Message = str(b.Prompt), str(b.Error), str(b.Message)
	b.ToolInput, b.ToolResponse = js(b.ToolInput), js(b.ToolResponse)
	b.Redactions = n
}

func BenchmarkHookBody(b *testing.B) {
	lines := transcript(b, 100<<10)
	bodies := hookBodies(b, lines)
	run := func(name string, f func(*event.Body)) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(total(lines))
			n := 0
			for b.Loop() {
				for _, bd := range bodies {
					c := bd
					f(&c)
					n += c.Redactions
				}
			}
			b.ReportMetric(float64(n)/float64(b.N), "redactions/op")
		})
	}
	run("baseline-redactBody", baselineBody)
	run("redact.Body", func(bd *event.Body) { redact.Body(bd) })
}

// The benchmark input is what it claims: about 100 KB with the planted
// secrets, which both implementations remove.
func TestTranscriptInput(t *testing.T) {
	lines := transcript(t, 100<<10)
	if n := total(lines); n < 100<<10 || n > 110<<10 {
		t.Fatalf("transcript is %d bytes", n)
	}
	checkBoth(t, lines)
	if len(hookBodies(t, lines)) < len(lines) {
		t.Fatal("too few hook bodies")
	}
}
