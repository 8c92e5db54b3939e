package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hookrun"
	"github.com/agentscm/agentscm/internal/redact"
)

// turnExit maps a refusal during a running turn to its exit status.
func turnExit(err error) error {
	if errors.Is(err, changelog.ErrTurnRunning) {
		return &ExitCodeError{Code: ExitTurnRunning, Err: err}
	}
	return err
}

// holdTurns refuses with exit status 5 (the seed's 409) while any live
// session's turn runs in the changelog directory dir, naming each; the
// stale turns (their agent process is gone, or their lease expired) are set
// aside with a note on stderr. The caller releases the gate once the
// workspace is changed: prompts submitted meanwhile wait, then are refused.
// A turn check has no override (--force is not one).
func holdTurns(env *Env, dir string) (*changelog.TurnGate, error) {
	g, err := changelog.HoldTurns(dir, env.Now())
	if err != nil {
		return nil, turnExit(err)
	}
	for _, t := range g.SetAside {
		fmt.Fprintf(env.Stderr, "agentscm: set aside the stale turn of %s: %s\n", t.Describe(), t.Stale)
	}
	return g, nil
}

// warnMixed warns that the position rewound to was taken while other
// sessions' turns ran (parallel sessions): their writes are mixed into it.
func warnMixed(env *Env, target incmeta.Meta) {
	if len(target.ConcurrentSessions) == 0 {
		return
	}
	fmt.Fprintf(env.Stderr, "agentscm: warning: position %d (session %s) was taken while the turn of session %s was running: that session's writes up to then are mixed into it\n",
		target.Position, target.SessionID, strings.Join(target.ConcurrentSessions, ", "))
}

func runChangelogEnable(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog enable", "[--root PATH] [--extra-root NAME=ABS]... [--include-ignored] [--no-transcript-root] [--claude-settings REL] [--parallel-sessions[=false]] [--withhold GLOB]... [--share GLOB]... [--format text|json]", `
Turn on the per-tool-call changelog of a checkout: the capture roots are
recorded (the checkout without .git and, by default, without git-ignored
paths; the checkout's Claude Code transcript directory
~/.claude/projects/<checkout path with every character but ASCII letters and
digits turned into '-'> as the root claude-transcript, so a rewind also
restores the conversation as it was at that call, unless
--no-transcript-root; plus any --extra-root) and
marked hooks are installed for PostToolUse and PostToolUseFailure (each
tool call, returned or failed, becomes increment <position:06d>.tgz) and for
UserPromptSubmit, Stop and SessionEnd (which keep the running-turn marker):
'agentscm-hook changelog hook-claude', or, on the events where change
capture is on too, its one entry 'agentscm-hook change-capture hook-claude
--changelog', one process that captures and then takes the increment (an
older install with two entries per event is upgraded). Other settings and
hooks are kept. With --dir the changelog lives there: the checkout's default
directory then holds only location.json naming it, which the hooks and every
command without --dir follow (refused while the checkout's changelog lives
in another directory).
Refused with exit status 5 while any live session's turn runs (a turn
whose agent process is gone is set aside and named).
One session at a time: once the changelog is on, a second session's prompt
waits for the running turn (up to 15 seconds) and is then refused by its
prompt hook, pointing to a separate worktree (git worktree add), so one
sequence holds one conversation. --parallel-sessions lets several
sessions' turns run in the checkout at once (recorded in the changelog;
--parallel-sessions=false turns it off again, and without the flag the
setting is kept): every position names its session and the sessions whose
turns ran beside it, and a rewind to such a position warns that their
writes are mixed in.
Secret files never leave the machine, in any capture mode: .env and .env.*
(not templates such as .env.example), keys (*.pem, *.key, *.p12, id_rsa*,
id_ed25519*), .netrc, .npmrc, .pypirc, cloud credential files, *.tfstate
and the agents' own settings (.claude/settings*.json, .codex/, .gemini/);
docs/privacy.md lists the set. They stay in the local increments; an
increment uploaded to the Hub names each by path and digest only, and a
rewind from the Hub lists them (exit status 8). --withhold GLOB adds a
pattern, --share GLOB takes matching paths out of the set (both
repeatable; given, each replaces the recorded list of its kind; an empty
value clears it; without them the recorded set is kept). On a checkout
connected to a Hub, enable says what the first increment would upload
(files, bytes) and which secret files it withholds, before any upload.`)
	var rf rootFlags
	rf.register(fs, true)
	settings := fs.String("claude-settings", binding.DefaultClaudeSettings, "Claude settings file for the hooks, relative to the root")
	fs.Bool("force", false, "no longer used: a running turn is never overridden (a turn whose agent process is gone is set aside by itself)")
	parallel := fs.Bool("parallel-sessions", false, "let several sessions' turns run in this checkout at once (each position then names its session); =false: one session at a time again (the default)")
	noTranscript := fs.Bool("no-transcript-root", false, "do not capture the checkout's Claude Code transcript directory (root claude-transcript)")
	agent := fs.String("agent", "", agentFlagHelp+"; for codex the hooks go to .codex/hooks.json and no transcript root is recorded (the rollout is append-only)")
	var withhold, share multiFlag
	fs.Var(&withhold, "withhold", "also withhold files matching GLOB from the Hub (repeatable; see docs/privacy.md for the pattern syntax)")
	fs.Var(&share, "share", "upload files matching GLOB although the default secret-file set withholds them (repeatable)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	for _, p := range slices.Concat(withhold, share) {
		if err := redact.CheckPattern(p); p != "" && err != nil {
			return usagef("%v", err)
		}
	}
	rf.transcript, rf.home = transcriptOn, env.Getenv("HOME")
	if *noTranscript {
		rf.transcript = transcriptOff
	}
	o := changelogEnableOptions{rf: &rf, settings: *settings, settingsSet: settingsSet(fs), agent: *agent}
	if flagSet(fs, "parallel-sessions") {
		o.parallel = parallel
	}
	if flagSet(fs, "withhold") {
		o.withhold = append([]string{}, withhold...)
	}
	if flagSet(fs, "share") {
		o.share = append([]string{}, share...)
	}
	res, err := enableChangelog(ctx, env, o)
	if err != nil {
		return err
	}
	root, path, events, up, parallelOn := res.Root, res.Settings, res.Events, res.Upload, res.Parallel
	out := map[string]any{"root": root, "dir": res.Dir, "agent": res.Agent, "claude_settings": path, "hook_events": events, "settings_changed": res.Changed, "roots": res.Roots, "upload": up, "parallel_sessions": parallelOn}
	if *format == "json" {
		return writeJSON(env.Stdout, out)
	}
	fmt.Fprintf(env.Stdout, "changelog enabled for %s (%s)\n  increments: %s\n  hooks:      %s (%d events)\n", root, res.Agent, res.Dir, path, len(events))
	if note := res.TrustNote; note != "" {
		fmt.Fprintf(env.Stdout, "  note:       %s\n", note)
	}
	for _, r := range res.Roots[1:] {
		fmt.Fprintf(env.Stdout, "  extra root: %s=%s\n", r.Name, r.Path)
	}
	if parallelOn {
		fmt.Fprintln(env.Stdout, "  sessions:   parallel: several sessions' turns may run at once; each position names its session and those whose turns ran beside it")
	} else {
		fmt.Fprintln(env.Stdout, "  sessions:   one at a time: another session's prompt waits for the running turn, then is refused (use a separate worktree)")
	}
	fmt.Fprintln(env.Stdout, up.describe())
	return nil
}

// changelogEnableOptions are changelog enable's choices: the roots, the
// settings file (settingsSet: given rather than the agent's default), the
// agent ("" detects it) and the parallel-sessions setting (nil keeps it).
type changelogEnableOptions struct {
	rf          *rootFlags
	settings    string
	settingsSet bool
	agent       string
	// more are other agents whose changelog hooks go in as well, each in
	// its own default hook file (agentscm enable: every agent of the
	// capture binding).
	more     []string
	parallel *bool
	// withhold and share, when not nil, replace the recorded secret-file
	// patterns of their kind (changelog enable --withhold, --share).
	withhold, share []string
}

// changelogEnableResult is what enableChangelog did.
type changelogEnableResult struct {
	Root     string   `json:"root"`
	Dir      string   `json:"dir"`
	Agent    string   `json:"agent"`
	Settings string   `json:"claude_settings"`
	Events   []string `json:"hook_events"`
	Changed  bool     `json:"settings_changed"`
	// Agents are the agents whose changelog hooks this call installed,
	// Agent's first, each with its hook file.
	Agents   []changelogAgentHooks `json:"agents"`
	Roots    []changelog.Root      `json:"roots"`
	Upload   uploadPlan            `json:"upload"`
	Parallel bool                  `json:"parallel_sessions"`
	// TrustNote is what the host needs before it runs the hooks (text
	// output only).
	TrustNote string `json:"-"`
}

// changelogAgentHooks is one agent's changelog hooks as enable left them.
type changelogAgentHooks struct {
	Agent    string   `json:"agent"`
	Settings string   `json:"settings"`
	Events   []string `json:"hook_events"`
	Changed  bool     `json:"settings_changed"`
}

// enableChangelog is changelog enable's domain step (also agentscm
// enable's): it records the roots, installs the marked hooks of the agent
// (and of o.more, each where that agent reads them; the hooks of other
// agents are kept), records the baseline; refused with exit status 5 while
// a turn runs.
func enableChangelog(ctx context.Context, env *Env, o changelogEnableOptions) (*changelogEnableResult, error) {
	rf := o.rf
	ad, err := resolveAgent(env, o.agent, rf.root)
	if err != nil {
		return nil, err
	}
	settings := o.settings
	if settings == "" {
		settings = binding.DefaultClaudeSettings
	}
	events := ad.ChangelogEvents()
	var more []adapter.Adapter
	for _, name := range o.more {
		a, err := adapter.For(name)
		if err != nil {
			return nil, usagef("--agent: %v", err)
		}
		if a.Name() != ad.Name() {
			more = append(more, a)
		}
	}
	// The transcript root stays while any agent of the checkout rewinds
	// its conversation from the increments (Claude Code): the one asked
	// for, the others enabled with it, or one whose changelog hooks the
	// checkout holds already.
	if !slices.ContainsFunc(append([]adapter.Adapter{ad}, more...), adapter.Adapter.ChangelogTranscript) &&
		!slices.ContainsFunc(changelogHookAgents(rf.root), adapter.Adapter.ChangelogTranscript) {
		rf.transcript = transcriptOff
	}
	if !o.settingsSet {
		settings = ad.HookFile()
	}
	if !filepath.IsAbs(env.Executable) {
		return nil, fmt.Errorf("cannot install hooks: agentscm executable path %q is not absolute", env.Executable)
	}
	if err := rf.saveLocation(env); err != nil {
		return nil, err
	}
	c, err := openChangelog(env, rf, true)
	if err != nil {
		return nil, err
	}
	g, err := holdTurns(env, c.Dir())
	if err != nil {
		return nil, err
	}
	defer g.Release()
	if o.parallel != nil {
		if err := changelog.SetParallelSessions(c.Dir(), *o.parallel); err != nil {
			return nil, err
		}
	}
	if o.withhold != nil || o.share != nil {
		if err := setSecretFiles(c.Dir(), o.withhold, o.share); err != nil {
			return nil, err
		}
	}
	root := c.Roots()[0].Path
	path := filepath.Join(root, filepath.FromSlash(settings))
	// Claude Code: one entry per event, running both parts where the
	// capture is on too (an install with two entries there is upgraded).
	changed, err := ad.InstallHooks(path, env.Executable, adapter.PartChangelog)
	if err != nil {
		return nil, fmt.Errorf("install changelog hooks: %w", err)
	}
	agents := []changelogAgentHooks{{Agent: ad.Name(), Settings: path, Events: events, Changed: changed}}
	for _, a := range more {
		p := filepath.Join(root, filepath.FromSlash(a.HookFile()))
		ch, err := a.InstallHooks(p, env.Executable, adapter.PartChangelog)
		if err != nil {
			return nil, fmt.Errorf("install %s changelog hooks: %w", a.Name(), err)
		}
		agents = append(agents, changelogAgentHooks{Agent: a.Name(), Settings: p, Events: a.ChangelogEvents(), Changed: ch})
		changed = changed || ch
	}
	// The first capture stores every path (so the sequence replays onto an
	// empty directory); the baseline, taken once the hooks are installed,
	// lets it still say what the first call changed.
	if err := c.RecordBaseline(ctx); err != nil {
		return nil, fmt.Errorf("record the changelog's baseline: %w", err)
	}
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return nil, err
	}
	up := uploadPlanFor(cfg, root, c.Roots())
	if up.Preview, err = c.UploadPreview(ctx); err != nil {
		return nil, fmt.Errorf("what the first increment would upload: %w", err)
	}
	return &changelogEnableResult{Root: root, Dir: c.Dir(), Agent: ad.Name(), Settings: path, Events: events, Changed: changed,
		Agents: agents, Roots: c.Roots(), Upload: up, Parallel: changelog.ParallelSessions(c.Dir()), TrustNote: ad.TrustNote(root)}, nil
}

// uploadPlan is what changelog enable says leaves the machine, and where.
type uploadPlan struct {
	// Connected is false when the checkout has no client connection:
	// increments then stay in the changelog directory.
	Connected  bool   `json:"connected"`
	Hub        string `json:"hub,omitempty"`
	Repository string `json:"repository,omitempty"`
	// Roots are uploaded as captured; LocalRoots (the conversation roots)
	// are uploaded only as Transcripts says.
	Roots      []string `json:"roots"`
	LocalRoots []string `json:"conversation_roots"`
	// Transcripts is "redacted" (shared-conversation mode: copies redacted
	// before upload, for sessions started in that mode) or "withheld".
	Transcripts string `json:"transcripts"`
	CaptureMode string `json:"capture_mode"`
	Reason      string `json:"reason,omitempty"`
	// Preview is what an increment of the whole workspace uploads (the
	// first one) and the secret files it withholds.
	Preview *changelog.UploadPreview `json:"first_increment,omitempty"`
}

// setSecretFiles records the checkout's --withhold and --share patterns:
// each list given (not nil) replaces the recorded one (empty values
// dropped).
func setSecretFiles(dir string, withhold, share []string) error {
	setW, setS := withhold != nil, share != nil
	cur, err := changelog.SecretFiles(dir)
	if err != nil {
		cur = redact.FileSet{} // replaced below by what was given
	}
	keep := func(l []string) []string {
		return slices.DeleteFunc(slices.Clone(l), func(p string) bool { return p == "" })
	}
	if setW {
		cur.Withhold = keep(withhold)
	}
	if setS {
		cur.Share = keep(share)
	}
	return changelog.SetSecretFiles(dir, cur)
}

// describeWithheld is the text lines saying which secret files stay on
// this machine.
func describeWithheld(b *strings.Builder, pv *changelog.UploadPreview, width int) {
	if pv == nil {
		return
	}
	label := fmt.Sprintf("  %-*s", width, "withheld:")
	indent := strings.Repeat(" ", len(label))
	if pv.WithheldCount == 0 {
		fmt.Fprintf(b, "%sno secret file found (docs/privacy.md lists the set)\n", label)
	} else {
		var names []string
		for _, w := range pv.Withheld {
			if len(names) == 10 {
				break
			}
			names = append(names, w.Path)
		}
		more := ""
		if pv.WithheldCount > len(names) {
			more = fmt.Sprintf(" and %d more", pv.WithheldCount-len(names))
		}
		fmt.Fprintf(b, "%s%d secret %s (%d bytes) never uploaded, kept in the local increments only: %s%s\n", label, pv.WithheldCount, plural(pv.WithheldCount, "file", "files"), pv.WithheldBytes, strings.Join(names, ", "), more)
	}
	if len(pv.SecretFiles.Withhold) > 0 {
		fmt.Fprintf(b, "%salso withheld (--withhold): %s\n", indent, strings.Join(pv.SecretFiles.Withhold, " "))
	}
	if len(pv.SecretFiles.Share) > 0 {
		fmt.Fprintf(b, "%sshared anyway (--share): %s\n", indent, strings.Join(pv.SecretFiles.Share, " "))
	}
}

func uploadPlanFor(configDir, root string, roots []changelog.Root) uploadPlan {
	up := uploadPlan{Roots: []string{}, LocalRoots: []string{}, Transcripts: incmeta.ConvWithheld}
	if c, err := connections.Lookup(configDir, root); err == nil {
		up.Connected, up.Hub, up.Repository = true, c.Hub, c.Repository
	}
	for _, r := range roots {
		if changelog.IsConversationRoot(r.Name, r.Path) {
			up.LocalRoots = append(up.LocalRoots, r.Name)
		} else {
			up.Roots = append(up.Roots, r.Name)
		}
	}
	// The mode decides per session; "" stands for a session that started
	// under the binding's current mode.
	sh, _ := capture.StateDir{Dir: configDir}.ConversationSharing(root, "", up.Hub, up.Repository)
	up.CaptureMode = sh.Mode
	if sh.Mode == event.ModeSharedConversation && !strings.HasPrefix(sh.Reason, "the capture binding was saved for") {
		up.Transcripts = incmeta.ConvRedacted
	} else {
		up.Reason = sh.Reason
	}
	return up
}

func (up uploadPlan) describe() string {
	var b strings.Builder
	if !up.Connected {
		b.WriteString("  uploads:    none: the checkout has no client connection, so increments stay in the changelog directory\n")
	} else {
		fmt.Fprintf(&b, "  uploads:    every increment goes to repository %s on %s (the current Work's changelog)\n", up.Repository, up.Hub)
		fmt.Fprintf(&b, "              uploaded as captured: %s\n", strings.Join(up.Roots, ", "))
		if pv := up.Preview; pv != nil {
			what := "the first increment will upload"
			if pv.Captured {
				what = "the captured workspace holds"
			}
			fmt.Fprintf(&b, "  first upload: %s %d %s, %d bytes, to %s\n", what, pv.Files, plural(pv.Files, "file", "files"), pv.Bytes, up.Hub)
		}
	}
	describeWithheld(&b, up.Preview, 12)
	if len(up.LocalRoots) > 0 {
		switch {
		case !up.Connected:
			fmt.Fprintf(&b, "  transcripts: %s kept on this machine (in the local changelog only)\n", strings.Join(up.LocalRoots, ", "))
		case up.Transcripts == incmeta.ConvRedacted:
			fmt.Fprintf(&b, "  transcripts: %s uploaded REDACTED (shared-conversation mode, for sessions started in it; redaction is best effort)\n", strings.Join(up.LocalRoots, ", "))
		default:
			fmt.Fprintf(&b, "  transcripts: %s NOT uploaded, kept on this machine (%s; only shared-conversation mode uploads them, redacted)\n", strings.Join(up.LocalRoots, ", "), up.Reason)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func runChangelogDisable(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm changelog disable", "[--root PATH] [--claude-settings REL] [--force]", `
Remove only the changelog's part of the marked hooks from the checkout's
Claude settings file: its own entries go, and an entry that runs change
capture and the changelog becomes the capture's alone. Stored increments
are kept; the capture keeps working. Refused
with exit status 5 while a turn runs.`)
	var rf rootFlags
	rf.register(fs, false)
	settings := fs.String("claude-settings", binding.DefaultClaudeSettings, "Claude settings file holding the hooks, relative to the root")
	fs.Bool("force", false, "no longer used: a running turn is never overridden (a turn whose agent process is gone is set aside by itself)")
	agent := fs.String("agent", "", "claude-code (default), codex or gemini: whose changelog hooks to remove (codex: from .codex/hooks.json, gemini: from .gemini/settings.json)")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	res, err := disableChangelog(env, &rf, *settings, settingsSet(fs), *agent)
	if err != nil {
		return err
	}
	if !res.Removed {
		fmt.Fprintf(env.Stdout, "no changelog hooks in %s; nothing changed\n", res.Settings)
		return nil
	}
	fmt.Fprintf(env.Stdout, "changelog hooks removed from %s (increments kept in %s)\n", res.Settings, res.Dir)
	return nil
}

// changelogDisableResult is what disableChangelog did.
type changelogDisableResult struct {
	Settings string `json:"claude_settings"`
	Dir      string `json:"dir"`
	Removed  bool   `json:"hooks_removed"`
}

// disableChangelog is changelog disable's domain step (also agentscm
// disable's): it removes only the changelog's part of the marked hooks of
// the agent ("" is Claude Code) from the settings file; the increments are
// kept. Refused with exit status 5 while a turn runs.
func disableChangelog(env *Env, rf *rootFlags, settings string, settingsGiven bool, agent string) (*changelogDisableResult, error) {
	ad, err := adapter.For(agent)
	if err != nil {
		return nil, usagef("--agent: %v", err)
	}
	if settings == "" {
		settings = binding.DefaultClaudeSettings
	}
	if !settingsGiven {
		settings = ad.HookFile()
	}
	c, err := openChangelog(env, rf, false)
	if err != nil {
		return nil, err
	}
	g, err := holdTurns(env, c.Dir())
	if err != nil {
		return nil, err
	}
	defer g.Release()
	root := c.Roots()[0].Path
	path := filepath.Join(root, filepath.FromSlash(settings))
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no Claude settings file at %s", path)
	}
	// The capture keeps its part of Claude Code's one entry per event.
	removed, err := ad.RemoveHooks(path, adapter.PartChangelog)
	if err != nil {
		return nil, err
	}
	return &changelogDisableResult{Settings: path, Dir: c.Dir(), Removed: removed}, nil
}

// changelogHookAgents are the agents whose own hook file in root holds
// marked changelog hooks.
func changelogHookAgents(root string) []adapter.Adapter {
	var out []adapter.Adapter
	if root == "" {
		return out
	}
	for _, a := range adapter.All() {
		if hasMarked(filepath.Join(root, filepath.FromSlash(a.HookFile())), a.ChangelogSubcommand()) {
			out = append(out, a)
		}
	}
	return out
}

// rewindCommand is the friendly name of changelog apply.
func rewindCommand() *Command {
	return &Command{Name: "rewind", Summary: "rewind a checkout to a tool call (same as changelog apply)", Run: func(ctx context.Context, env *Env, args []string) error {
		return runChangelogApply(ctx, env, args)
	}}
}

// transcriptMode says what recording the capture roots does with the
// transcript root.
type transcriptMode int

const (
	transcriptKeep transcriptMode = iota
	transcriptOn
	transcriptOff
)

// withTranscript adds or drops the checkout's Claude Code transcript
// directory (changelog.TranscriptRootName) as rf.transcript asks. An explicit
// --extra-root of that name wins; a transcript directory that would overlap
// another root (a checkout that holds ~/.claude) is left out with a note on
// stderr, as is one without an absolute HOME.
func (rf *rootFlags) withTranscript(env *Env, roots []changelog.Root) ([]changelog.Root, error) {
	idx := -1
	for i, r := range roots {
		if r.Name == changelog.TranscriptRootName {
			idx = i
		}
	}
	switch rf.transcript {
	case transcriptOff:
		if idx > 0 {
			roots = append(roots[:idx:idx], roots[idx+1:]...)
		}
		return roots, nil
	case transcriptOn:
		if idx >= 0 {
			return roots, nil
		}
	default:
		return roots, nil
	}
	if !filepath.IsAbs(rf.home) {
		fmt.Fprintln(env.Stderr, "agentscm changelog: HOME is not an absolute path, so the Claude Code transcripts are not a capture root")
		return roots, nil
	}
	p := filepath.Clean(changelog.ClaudeProjectDir(rf.home, roots[0].Path))
	for _, r := range roots {
		if p == r.Path || strings.HasPrefix(p, r.Path+"/") || strings.HasPrefix(r.Path, p+"/") {
			fmt.Fprintf(env.Stderr, "agentscm changelog: the transcript directory %s overlaps the capture root %s (%s), so it is not a root of its own\n", p, r.Name, r.Path)
			return roots, nil
		}
	}
	return append(roots, changelog.Root{Name: changelog.TranscriptRootName, Path: p}), nil
}

// transcriptDir is where the checkout's Claude Code transcripts live: the
// recorded transcript root, else the project directory under home.
func transcriptDir(c *changelog.Changelog, home string) string {
	for _, r := range c.Roots() {
		if r.Name == changelog.TranscriptRootName {
			return r.Path
		}
	}
	return changelog.ClaudeProjectDir(home, c.Roots()[0].Path)
}

// checkoutSharing is the changelog's sharing policy for the checkout at
// root: its capture binding's mode (metadata-only without one), shared only
// for a session that started in shared-conversation mode, with the binding
// saved for the repository and Hub the checkout is connected to. Any error
// shares nothing.
func checkoutSharing(configDir, root string) changelog.SharingPolicy {
	return hookrun.CheckoutSharing(configDir, root)
}

// settingsSet reports whether --claude-settings was given explicitly.
func settingsSet(fs *flag.FlagSet) bool { return flagSet(fs, "claude-settings") }

// flagSet reports whether the flag name was given explicitly.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// saveLocation makes --dir, when given, the directory the hooks find the
// checkout's changelog in (changelog.SaveLocation), before anything is
// created there; a checkout whose changelog lives elsewhere is refused.
func (rf *rootFlags) saveLocation(env *Env) error {
	if rf.dir == "" {
		return nil
	}
	_, root, err := rf.roots()
	if err != nil {
		return err
	}
	cfg, err := binding.ConfigDir(env.Getenv)
	if err != nil {
		return err
	}
	if err := changelog.SaveLocation(cfg, root, filepath.Clean(rf.dir)); err != nil {
		if errors.Is(err, changelog.ErrOtherLocation) {
			return usagef("%v", err)
		}
		return err
	}
	return nil
}
