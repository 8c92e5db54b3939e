package transcript

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/event"
)

func TestImportFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := Selection{Prompts: true, AssistantText: true, Tools: true, Bodies: true}
	good := userLine(sess, "the prompt") +
		assistantLine(sess, "msg_1", `{"type":"thinking","thinking":"hidden"}`, 10, 2) +
		assistantLine(sess, "msg_1", textBlock("answer"), 10, 2) +
		assistantLine(sess, "msg_1", `{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}`, 10, 2) +
		toolResultLine(sess, "toolu_1", "out", false)
	cases := []struct {
		name    string
		content string
		maxLine int
		kinds   string
		gaps    string
	}{
		{"complete session", good, 0, "gap,prompt_submit,usage,message_display,tool_start,tool_finish", "transcript_import"},
		{"no trailing newline", strings.TrimSuffix(good, "\n"), 0, "gap,prompt_submit,usage,message_display,tool_start,tool_finish", "transcript_import"},
		{"malformed record", "{oops\n" + good, 0, "gap,prompt_submit,usage,message_display,tool_start,tool_finish,gap", "transcript_import," + ReasonMalformed},
		{"oversized record", assistantLine(sess, "msg_0", textBlock(strings.Repeat("z", 200<<10)), 1, 1) + good, 100 << 10,
			"gap,prompt_submit,usage,message_display,tool_start,tool_finish,gap", "transcript_import," + ReasonOversized},
		{"foreign session", assistantLine("other", "msg_9", textBlock("x"), 1, 1) + good, 0,
			"gap,prompt_submit,usage,message_display,tool_start,tool_finish,gap", "transcript_import," + ReasonForeign},
		{"empty file", "", 0, "gap", "transcript_import"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(tc.name, " ", "_")+".jsonl", tc.content)
			res, err := ImportFile(p, sess, all, tc.maxLine, now)
			if err != nil {
				t.Fatal(err)
			}
			var kinds, gaps []string
			for _, r := range res.Records {
				kinds = append(kinds, string(r.Kind))
				if r.Kind == event.KindGap {
					gaps = append(gaps, r.Gap.Reason)
				}
				if r.Body != nil && strings.Contains(r.Body.Message+string(r.Body.ToolInput), "hidden") {
					t.Fatal("thinking selected")
				}
			}
			if strings.Join(kinds, ",") != tc.kinds || strings.Join(gaps, ",") != tc.gaps {
				t.Fatalf("kinds %v gaps %v", kinds, gaps)
			}
			if res.Records[0].Gap.Kind != event.GapAdapterStartedLate {
				t.Fatalf("first record %+v", res.Records[0])
			}
			if len(res.Records) > 1 && res.Records[1].ObservedAt.Format(time.RFC3339Nano) != "2026-11-29T21:15:49.598Z" {
				t.Fatalf("transcript timestamp not kept: %v", res.Records[1].ObservedAt)
			}
		})
	}
	p := write("ok.jsonl", good)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(p, link)
	for _, bad := range []struct{ path, session string }{{link, sess}, {dir, sess}, {"rel.jsonl", sess}, {p, "../x"}} {
		if _, err := ImportFile(bad.path, bad.session, all, 0, now); err == nil {
			t.Fatalf("%+v: imported", bad)
		} else if bad.path != dir && !errors.Is(err, ErrRefused) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}
