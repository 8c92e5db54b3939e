package cli

import (
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// agentFlagHelp documents --agent on enable and changelog enable.
const agentFlagHelp = "the agent whose hooks to install: claude-code, codex or gemini (default: the one agent whose config directory exists in the checkout, else in HOME; claude-code when several or none); on a checkout already captured for other agents it is added beside them, their hooks kept"

// detectAgent picks the agent of a checkout when --agent is not given: the
// one agent whose config directory exists in the checkout (.claude, .codex),
// else the one in HOME; Claude Code when both or neither exist.
func detectAgent(env *Env, root string) string {
	exists := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}
	pick := func(base string) string {
		found := ""
		for _, a := range adapter.All() {
			if exists(filepath.Join(base, a.ConfigDir())) {
				if found != "" {
					return "" // several: no detection
				}
				found = a.Name()
			}
		}
		return found
	}
	if a := pick(root); a != "" {
		return a
	}
	if home := env.Getenv("HOME"); filepath.IsAbs(home) {
		if a := pick(home); a != "" {
			return a
		}
	}
	return adapter.All()[0].Name()
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
func resumeCodex(env *Env, target incmeta.Meta, now time.Time) (*changelog.Resumed, error) {
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
	cx, _ := hookfile.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(codex.HookFile)), codex.ChangelogSubcommand)
	gm, _ := hookfile.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(gemini.HookFile)), gemini.ChangelogSubcommand)
	var cl []string
	for _, f := range []string{".claude/settings.local.json", ".claude/settings.json"} {
		ev, _ := hookfile.MarkedEventsFor(filepath.Join(root, filepath.FromSlash(f)), hookfile.ChangelogSubcommand)
		cl = append(cl, ev...)
	}
	switch {
	case len(cx) > 0 && len(cl) == 0 && len(gm) == 0:
		return adapter.Codex{}, nil
	case len(gm) > 0 && len(cl) == 0 && len(cx) == 0:
		return adapter.Gemini{}, nil
	}
	return adapter.Claude{}, nil
}

// resumeGemini binds the Gemini conversation of the rewound call (its
// order id) to a fresh session: the chat cut after the call's result.
func resumeGemini(env *Env, target incmeta.Meta, now time.Time) (*changelog.Resumed, error) {
	home := env.Getenv("HOME")
	if !filepath.IsAbs(home) {
		return nil, usagef("--resume-conversation --agent gemini needs an absolute HOME (where Gemini CLI keeps chats)")
	}
	r, err := gemini.ResumeConversation(filepath.Join(home, ".gemini"), target.SessionID, target.ToolUseID, now)
	if err != nil {
		return nil, err
	}
	return &changelog.Resumed{SessionID: r.SessionID, Transcript: r.Transcript, FromSession: r.FromSession, IncludesResult: r.IncludesResult, Command: r.Command}, nil
}
