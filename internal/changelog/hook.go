package changelog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding/checkout"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// HookEvents are the Claude Code events the changelog hook needs: the two
// tool finishes take an increment; a tool call's start and prompt
// submission capture outside work; prompt submission and the turn's or
// session's end keep the running-turn marker.
var HookEvents = hookfile.ChangelogEvents[:]

// HookResult says what one changelog hook invocation did.
type HookResult struct {
	Dir       string
	Ignored   bool
	Increment *Increment
	// Upload says what the upload queue did when the checkout has a
	// remote (nil without one).
	Upload *UploadOutcome
	// Refused is a prompt refused because another session's turn runs
	// (the hook answers the host with its blocking answer).
	Refused *PromptRefusal
	// SetAside lists the stale turns a prompt set aside.
	SetAside []TurnStatus
	// TurnWarning says what failed about the turn's marker when the
	// increment was stored all the same.
	TurnWarning string
}

// HookOptions configure HandleClaudeHookWith.
type HookOptions struct {
	// Remote, when set, returns the remote of the checkout at root (nil:
	// none, increments stay local). It is called only for a tool call.
	Remote func(ctx context.Context, root string) (Remote, func(), error)
	// Sharing, when set, returns the sharing policy of the checkout at
	// root: what of its conversation roots an upload may carry (see
	// UploadForm). Nil shares no conversation.
	Sharing func(root string) SharingPolicy
	// Watch, when set, returns the ChangeSource of the changelog
	// directory dir (see WatchSource): a capture then lists only the
	// directories a watcher saw change. Nil lists every directory.
	Watch func(dir string) ChangeSource
	// Agent is the host whose hook this is (claude-code, codex, gemini;
	// empty: claude-code): its process is the turn's.
	Agent string
	// FindHost finds the agent's own process for a turn marker; nil walks
	// up from the hook's parent (FindHost).
	FindHost func(agent string) (Host, bool)
	// TurnWait overrides TurnWait (tests).
	TurnWait time.Duration
	// Failpoint is FailpointEnv's value in the hook's environment.
	Failpoint string
}

// TurnWait bounds how long a prompt waits for another session's turn to
// end, inside the host's 20-second hook timeout; then it is refused.
const TurnWait = 15 * time.Second

// promptTurn starts the prompt's turn: at once with parallel sessions,
// otherwise once no other live session's turn runs, waiting at most
// TurnWait; then the prompt is refused (res.Refused).
func promptTurn(ctx context.Context, dir, root string, p *agent.Payload, now time.Time, opts HookOptions, res *HookResult) error {
	agent := opts.Agent
	if agent == "" {
		agent = claude.AgentName
	}
	mine := Turn{SessionID: p.SessionID, StartedAt: now, Agent: agent}
	find := opts.FindHost
	if find == nil {
		find = func(agent string) (Host, bool) { return FindHost(agent, os.Getppid()) }
	}
	if h, ok := find(agent); ok {
		mine.Host = &h
	}
	wait := opts.TurnWait
	if wait <= 0 {
		wait = TurnWait
	}
	ref, setAside, err := startTurn(ctx, dir, root, mine, ParallelSessions(dir), wait)
	res.Refused, res.SetAside = ref, setAside
	return err
}

// FindDir returns the changelog directory of the checkout that contains
// cwd: the deepest ancestor with a changelog under configDir (DirFor: where
// `changelog enable --dir` put it).
func FindDir(configDir, cwd string) (dir, root string, ok bool) {
	p := filepath.Clean(cwd)
	for {
		d := DirFor(configDir, p)
		if _, err := os.Lstat(filepath.Join(d, configFile)); err == nil {
			return d, p, true
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", "", false
		}
		p = parent
	}
}

// openForHook opens the changelog directory dir of the checkout at root
// with its recorded roots, listing what src reports changed (nil: every
// directory).
func openForHook(configDir, dir, root string, opts HookOptions, src ChangeSource) (*Changelog, error) {
	roots, err := LoadRoots(dir)
	if err != nil {
		return nil, err
	}
	if len(roots) == 0 || roots[0].Path != root {
		return nil, fmt.Errorf("changelog %s does not belong to %s", dir, root)
	}
	copts := Options{Roots: roots, Exclude: []string{configDir}, Failpoint: opts.Failpoint}
	if opts.Sharing != nil {
		// The binding's current mode ("" is a session that starts now).
		copts.ConversationRefs = opts.Sharing(root)("").NoCopy
	}
	copts.Watch = src
	return Open(dir, copts)
}

// captureForHook takes the hook's capture req of the changelog dir: by the
// watch server when it answers (the warm capture, see CaptureOps),
// otherwise here, recognising a capture the server took for this request
// after all. c is the changelog opened here (nil when the server
// captured).
func captureForHook(ctx context.Context, configDir, dir, root string, req CaptureRequest, opts HookOptions) (inc *Increment, c *Changelog, err error) {
	var src ChangeSource
	if opts.Watch != nil {
		src = opts.Watch(dir)
	}
	if w, ok := src.(*watchSource); ok && w.warm {
		refs := false
		if opts.Sharing != nil {
			refs = opts.Sharing(root)("").NoCopy
		}
		inc, done, err := w.warmCapture(ctx, configDir, dir, root, &req, refs, opts.Failpoint)
		if done {
			return inc, nil, err
		}
	}
	if c, err = openForHook(configDir, dir, root, opts, src); err != nil {
		return nil, nil, err
	}
	inc, err = c.Capture(ctx, req)
	return inc, c, err
}

// captureOutsideFor stores, before the tool call or the turn of payload p
// starts, what changed outside the conversation roots since the last
// increment as an outside increment (nil when nothing did).
func captureOutsideFor(ctx context.Context, configDir, dir, root string, p *agent.Payload, opts HookOptions) (*Increment, error) {
	tool := p.ToolName
	if len(tool) > 256 {
		tool = tool[:256]
	}
	out := &incmeta.Outside{Event: p.HookEventName, SessionID: p.SessionID, BeforeToolUseID: p.ToolUseID, BeforeTool: tool}
	inc, _, err := captureForHook(ctx, configDir, dir, root, CaptureRequest{Position: -1, SessionID: p.SessionID, Kind: KindOutside, Outside: out}, opts)
	return inc, err
}

// HandleClaudeHook reads one Claude Code hook payload and keeps the
// changelog of the checkout containing its cwd: after each tool call,
// returned or failed, the call's writes and deletions become the next
// increment; a prompt starts a turn and Stop or SessionEnd ends it. A
// checkout without a changelog is ignored.
func HandleClaudeHook(ctx context.Context, configDir string, in io.Reader, now time.Time) (*HookResult, error) {
	return HandleClaudeHookWith(ctx, configDir, in, now, HookOptions{})
}

// HandleClaudeHookWith is HandleClaudeHook with options: with a remote, the
// increment stored locally is then uploaded, after the positions still
// pending from earlier hooks, within RemoteDeadline.
func HandleClaudeHookWith(ctx context.Context, configDir string, in io.Reader, now time.Time, opts HookOptions) (*HookResult, error) {
	b, err := fsutil.ReadBounded(in, agent.MaxPayloadBytes)
	if err != nil {
		return nil, fmt.Errorf("read hook payload: %w", err)
	}
	p, err := agent.DecodePayload(b)
	if err != nil {
		return nil, err
	}
	return HandlePayload(ctx, configDir, p, now, opts)
}

// HandlePayload is HandleClaudeHookWith for a payload already decoded (the
// one hook pipeline, internal/hookrun, decodes once for the capture and the
// changelog).
func HandlePayload(ctx context.Context, configDir string, p *agent.Payload, now time.Time, opts HookOptions) (*HookResult, error) {
	return HandleAt(ctx, configDir, LookupFrom(configDir, checkout.Of(filepath.Clean(p.Cwd))), p, now, opts)
}

// Found is the changelog of the checkout a hook's cwd belongs to: its
// directory and the checkout's root (both empty: none).
type Found struct {
	Dir, Root string
}

// LookupFrom is the changelog's question of the one lookup of a hook's
// checkout: FindDir of its cwd, else of the cwd with its symbolic links
// resolved; the zero Found when neither has a changelog.
func LookupFrom(configDir string, l *checkout.Lookup) Found {
	f, _ := checkout.Find(l, func(path string) (Found, bool) {
		dir, root, ok := FindDir(configDir, path)
		return Found{dir, root}, ok
	})
	return f
}

// HandleAt is HandlePayload for the changelog f the hook pipeline looked
// up (internal/hookrun: one lookup for the capture and the changelog); a
// zero f ignores the payload.
func HandleAt(ctx context.Context, configDir string, f Found, p *agent.Payload, now time.Time, opts HookOptions) (*HookResult, error) {
	dir, root := f.Dir, f.Root
	if dir == "" {
		return &HookResult{Ignored: true}, nil
	}
	res := &HookResult{Dir: dir}
	var renewErr error
	switch p.HookEventName {
	case "UserPromptSubmit":
		if err := promptTurn(ctx, dir, root, p, now, opts, res); err != nil || res.Refused != nil {
			return res, err
		}
		// What changed since the last call (the user's edits while no
		// turn ran) is outside work, never the turn's first call's.
		inc, err := captureOutsideFor(ctx, configDir, dir, root, p, opts)
		res.Increment = inc
		return res, err
	case "PreToolUse":
		inc, err := captureOutsideFor(ctx, configDir, dir, root, p, opts)
		res.Increment = inc
		return res, err
	case "Stop", "SessionEnd":
		return res, EndTurn(dir, p.SessionID)
	case "PostToolUse", "PostToolUseFailure":
		// A turn without a known agent process lives on a lease that
		// every hook of the turn renews; a failed renewal does not stop
		// the capture.
		renewErr = RenewTurn(dir, p.SessionID, now)
	default:
		res.Ignored = true
		return res, nil
	}
	tool := p.ToolName
	if len(tool) > 256 {
		tool = tool[:256]
	}
	// Local first: the increment is stored (and its position fixed) in
	// the changelog directory before anything goes to the Hub.
	// Decided now: which other sessions' turns run while this position is
	// taken (their writes may be in it).
	concurrent := otherRunningTurns(dir, p.SessionID, now)
	inc, c, err := captureForHook(ctx, configDir, dir, root, CaptureRequest{Position: -1, SessionID: p.SessionID, ToolUseID: p.ToolUseID, Tool: tool, Failed: p.HookEventName == "PostToolUseFailure", ConcurrentSessions: concurrent}, opts)
	if err != nil {
		return res, err
	}
	res.Increment = inc
	if renewErr != nil {
		res.TurnWarning = "renew the turn's lease: " + renewErr.Error()
	}
	if opts.Remote == nil {
		return res, nil
	}
	uctx, cancel := context.WithTimeout(ctx, RemoteDeadline)
	defer cancel()
	r, closeRemote, err := opts.Remote(uctx, root)
	if err != nil {
		res.Upload = &UploadOutcome{Err: fmt.Sprintf("changelog remote: %v", err), Pending: 1}
		return res, nil
	}
	if closeRemote != nil {
		defer closeRemote()
	}
	if r == nil {
		return res, nil
	}
	if c == nil {
		// The watch server captured: open the changelog for the upload.
		if c, err = openForHook(configDir, dir, root, opts, nil); err != nil {
			return res, fmt.Errorf("increment %d stored locally; upload queue: %w", inc.Position, err)
		}
	}
	var policy SharingPolicy
	if opts.Sharing != nil {
		policy = opts.Sharing(root)
	}
	out, err := c.Upload(uctx, r, UploadOptions{Through: inc.Position, Sharing: policy})
	if err != nil {
		return res, fmt.Errorf("increment %d stored locally; upload queue: %w", inc.Position, err)
	}
	res.Upload = out
	return res, nil
}
