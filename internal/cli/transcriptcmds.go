package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/capability"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/redact"
	"github.com/agentscm/agentscm/internal/spool"
	"github.com/agentscm/agentscm/internal/transcript"
)

// transcriptCommands are the change-capture commands about transcripts and
// adapter capabilities: import and capabilities.
func transcriptCommands() []*Command {
	return []*Command{
		{Name: "import", Summary: "import one explicit Claude Code JSONL transcript of one session into a spool", Run: runImport},
		{Name: "capabilities", Summary: "show what each agent adapter can observe (Claude Code, Codex CLI, Gemini CLI)", Run: runCapabilities},
	}
}

// importResult is the JSON output of import.
type importResult struct {
	Session     string `json:"session"`
	File        string `json:"file"`
	Spool       string `json:"spool"`
	CaptureMode string `json:"capture_mode"`
	Bytes       int64  `json:"bytes"`
	Lines       int    `json:"lines"`
	Records     int    `json:"records"`
	Usage       int    `json:"usage"`
	Gaps        int    `json:"gaps"`
	FirstSeq    uint64 `json:"first_seq"`
	LastSeq     uint64 `json:"last_seq"`
	// Attributed is always false: imported history stays local and
	// unattributed to any Work.
	Attributed bool `json:"attributed"`
}

func runImport(ctx context.Context, env *Env, args []string) error {
	var session, file, mode *string
	dir, format, _, err := spoolArgs(env, "agentscm change-capture import", "--spool ABS --session ID --file PATH [--capture-mode metadata-only|local-conversation] [--format text|json]",
		`Import one explicit local Claude Code JSONL transcript of one session into
the spool. Only that file is read (no-follow, regular, at most 1 GiB), never
the provider data directory. Saved history is not proof of live
observation: the import starts with an adapter_started_late gap. It selects
provider usage, visible user text, assistant text, tool use and tool
results, keeping the transcript's own timestamps; thinking blocks are never
selected. Malformed, oversized (over 2 MiB) and foreign-session records are
skipped with a capture_interrupted gap. Bodies are kept only with
--capture-mode local-conversation. Imported records stay local: they are
attributed to no Work and never delivered.`, args, true, false, func(fs *flag.FlagSet) {
			session = fs.String("session", "", "the native session id the transcript belongs to")
			file = fs.String("file", "", "path of the JSONL transcript")
			mode = fs.String("capture-mode", event.ModeMetadataOnly, "metadata-only or local-conversation")
		})
	if err != nil {
		return err
	}
	switch {
	case *session == "":
		return usagef("--session is required")
	case *file == "":
		return usagef("--file is required")
	case !strings.HasPrefix(*file, "/"):
		return usagef("--file must be an absolute path, not %q", *file)
	case *mode != event.ModeMetadataOnly && *mode != event.ModeLocalConversation:
		return usagef("--capture-mode must be metadata-only or local-conversation, not %q", *mode)
	}
	local := *mode == event.ModeLocalConversation
	sel := transcript.Selection{Prompts: true, AssistantText: true, Tools: true, Bodies: local}
	res, err := transcript.ImportFile(*file, *session, sel, 0, env.Now())
	if err != nil {
		return err
	}
	sp, err := spool.OpenContext(ctx, dir)
	if err != nil {
		return err
	}
	out := importResult{Session: *session, File: *file, Spool: dir, CaptureMode: *mode, Bytes: res.Bytes, Lines: res.Lines}
	for i := range res.Records {
		r := &res.Records[i]
		r.CaptureMode = *mode
		redact.ForMode(r.CaptureMode, r.Body) // the one redaction (a no-op: imported bodies are local-conversation, kept unredacted)
		seq, err := sp.AppendContext(ctx, r)
		if seq != 0 {
			if out.FirstSeq == 0 {
				out.FirstSeq = seq
			}
			out.LastSeq = seq
			out.Records++
			switch r.Kind {
			case event.KindUsage:
				out.Usage++
			case event.KindGap:
				out.Gaps++
			}
		}
		if err != nil {
			return fmt.Errorf("import stopped after %d of %d records: %w", out.Records, len(res.Records), err)
		}
	}
	if format == "json" {
		return writeJSON(env.Stdout, out)
	}
	fmt.Fprintf(env.Stdout, "imported %d records of session %s from %s\n", out.Records, out.Session, out.File)
	fmt.Fprintf(env.Stdout, "usage records: %d\ngaps:          %d (the first is adapter_started_late)\n", out.Usage, out.Gaps)
	fmt.Fprintf(env.Stdout, "sequences:     %d to %d in %s\n", out.FirstSeq, out.LastSeq, dir)
	fmt.Fprintf(env.Stdout, "capture mode:  %s\n", out.CaptureMode)
	fmt.Fprintln(env.Stdout, "attributed:    no (imported history stays local and is never delivered)")
	return nil
}

func runCapabilities(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture capabilities", "[--agent claude-code|codex] [--format text|json]",
		`Show each agent adapter's capability declaration: which facts its host
integration exposes and which it does not, as measured with the live
payloads of the pinned hosts (docs/agents.md). Codex CLI hooks carry no exit
code (it is read from the rollout file when there) and a patch that fails
to apply fires no finish, so complete Codex session capture is never
claimed.`)
	agent := fs.String("agent", "", "claude-code, codex or gemini (default: all)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	var decls []capability.Declaration
	for _, a := range adapter.All() {
		if *agent == "" || *agent == a.Name() {
			decls = append(decls, a.Capabilities())
		}
	}
	if len(decls) == 0 {
		return usagef("--agent must be claude-code, codex or gemini, not %q", *agent)
	}
	if *format == "json" {
		return writeJSON(env.Stdout, map[string]any{"agents": decls})
	}
	for i, d := range decls {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		printDeclaration(env.Stdout, d)
	}
	return nil
}

func printDeclaration(w io.Writer, d capability.Declaration) {
	fmt.Fprintf(w, "%s: %s\n", d.Agent, d.Summary)
	fmt.Fprintf(w, "  complete capture: %v\n", map[bool]string{true: "possible (within the supported visible scope)", false: "never claimed"}[d.CompleteCapture])
	for _, f := range d.Fields {
		state := "unavailable"
		if f.Available {
			state = "available"
		}
		fmt.Fprintf(w, "  %-26s %-11s %s\n", f.Name, state, f.Note)
	}
}
