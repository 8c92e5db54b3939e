package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hookrun"
)

// agentFlagHelp documents --agent on enable and changelog enable.
const agentFlagHelp = "the agent whose hooks to install: claude-code or codex (default: the one agent whose config exists in the checkout, else in HOME; claude-code when both or neither)"

// detectAgent picks the agent of a checkout when --agent is not given: the
// one agent whose config directory exists in the checkout (.claude, .codex),
// else the one in HOME; Claude Code when both or neither exist.
func detectAgent(env *Env, root string) string {
	exists := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}
	pick := func(base string) string {
		cl, cx := exists(filepath.Join(base, ".claude")), exists(filepath.Join(base, ".codex"))
		switch {
		case cx && !cl:
			return codex.AgentName
		case cl && !cx:
			return claude.AgentName
		}
		return ""
	}
	if a := pick(root); a != "" {
		return a
	}
	if home := env.Getenv("HOME"); filepath.IsAbs(home) {
		if a := pick(home); a != "" {
			return a
		}
	}
	return claude.AgentName
}

// resolveAgent validates --agent (empty: detection) and returns the adapter.
func resolveAgent(env *Env, flag, root string) (adapter.Adapter, error) {
	if flag == "" {
		flag = detectAgent(env, root)
	}
	a, err := adapter.For(flag)
	if err != nil {
		return nil, usagef("--agent: %v", err)
	}
	return a, nil
}

// runHookCodex is `agentscm change-capture hook-codex`: the Codex CLI
// capture hook (fails open, exit 0).
func runHookCodex(ctx context.Context, env *Env) int {
	return hookrun.AgentCapture(ctx, adapter.Codex{}, env.Stdin, env.Stderr, env.Getenv, env.Now())
}

// codexHome is $CODEX_HOME, else $HOME/.codex.
func codexHome(env *Env) (string, error) {
	if d := env.Getenv("CODEX_HOME"); d != "" {
		if !filepath.IsAbs(d) {
			return "", usagef("CODEX_HOME %q is not absolute", d)
		}
		return filepath.Clean(d), nil
	}
	home := env.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", usagef("--resume-conversation --agent codex needs an absolute CODEX_HOME or HOME (where Codex keeps rollouts)")
	}
	return filepath.Join(home, ".codex"), nil
}

// resumeCodex binds the Codex conversation of the rewound call to a fresh
// session: the rollout cut right after the call's output.
func resumeCodex(env *Env, target changelog.Meta, now time.Time) (*changelog.Resumed, error) {
	dir, err := codexHome(env)
	if err != nil {
		return nil, err
	}
	r, err := codex.ResumeConversation(dir, target.SessionID, target.ToolUseID, now)
	if err != nil {
		return nil, err
	}
	return &changelog.Resumed{SessionID: r.SessionID, Transcript: r.Transcript, FromSession: r.FromSession, IncludesResult: r.IncludesResult, Command: r.Command}, nil
}

// rewindAgent is the agent whose conversation a rewind resumes: --agent,
// else the agent whose changelog hooks the checkout holds (Codex when only
// .codex/hooks.json has them).
func rewindAgent(env *Env, flag, root string) (adapter.Adapter, error) {
	if flag != "" {
		a, err := adapter.For(flag)
		if err != nil {
			return nil, usagef("--agent: %v", err)
		}
		return a, nil
	}
	cx, _ := claude.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(codex.HookFile)), codex.ChangelogSubcommand)
	var cl []string
	for _, f := range []string{".claude/settings.local.json", ".claude/settings.json"} {
		ev, _ := claude.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(f)), claude.ChangelogSubcommand)
		cl = append(cl, ev...)
	}
	if len(cx) > 0 && len(cl) == 0 {
		return adapter.Codex{}, nil
	}
	return adapter.Claude{}, nil
}

var _ = fmt.Sprintf
