package changelog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/watch"
)

// The warm capture (issue 33, item 1): a hook asks the changelog's watch
// server, a process that already runs, to take its capture ("capture the
// next position for this call") and waits for the durable answer (the
// increment fsynced and linked, the state advanced). The server takes the
// changelog lock as every capturing process does, so positions stay
// exactly-once. Whenever the answer does not come (no server, a server
// that dies or stalls, the wait ends) the hook captures itself, as
// without a watcher; a capture the server took for that request anyway is
// recognised by the request's identity (CaptureRequest.CaptureID, kept in
// the increment's metadata) and returned, never repeated. A server that
// takes the lock only after the hook stopped waiting (its deadline passed
// or the hook closed the connection) stores nothing.

// OpCapture is the watch server's operation that takes a changelog capture
// (see CaptureOps).
const OpCapture = "capture"

// WarmEnv turns the warm capture off in a hook's environment ("0"): the
// hook then captures itself (asking the watcher only what changed).
const WarmEnv = "AGENTSCM_CHANGELOG_WARM"

// WarmWaitEnv overrides, as a Go duration, how long a hook waits for the
// watch server's capture (WarmWait) before it captures itself.
const WarmWaitEnv = "AGENTSCM_CHANGELOG_WARM_WAIT"

// WarmWait bounds how long a hook waits for the watch server's answer to
// its capture; a capture takes milliseconds when the watcher vouches, and
// a full one of a large checkout may take seconds (the hook's own capture
// would then wait for the changelog lock the server holds).
const WarmWait = 5 * time.Second

// errAbandoned ends a server's capture whose hook no longer waits.
var errAbandoned = errors.New("the hook no longer waits for this capture")

// warmCall is a hook's capture request to the watch server.
type warmCall struct {
	Dir       string `json:"dir"`
	ConfigDir string `json:"config_dir"`
	Root      string `json:"root"`
	// The capture (CaptureRequest).
	SessionID          string           `json:"session_id,omitempty"`
	ToolUseID          string           `json:"tool_use_id,omitempty"`
	Tool               string           `json:"tool,omitempty"`
	Failed             bool             `json:"failed,omitempty"`
	ConcurrentSessions []string         `json:"concurrent_sessions,omitempty"`
	Kind               string           `json:"kind"`
	Outside            *incmeta.Outside `json:"outside,omitempty"`
	// Decided by the hook when it ran: the checkout's mode and its
	// failpoint (FailpointEnv).
	ConversationRefs bool   `json:"conversation_refs,omitempty"`
	Failpoint        string `json:"failpoint,omitempty"`
	CaptureID        string `json:"capture_id"`
	// Deadline: the server stores nothing once it has passed.
	Deadline time.Time `json:"deadline"`
}

// warmAnswer is the server's durable answer: the increment stored (nil:
// nothing, an outside capture that found no outside change), or the
// capture's failure (Hole: the call keeps that position).
type warmAnswer struct {
	Increment *Increment `json:"increment,omitempty"`
	Error     string     `json:"error,omitempty"`
	Hole      *int       `json:"hole,omitempty"`
}

// CaptureOps are the operations the watch server of the changelog
// directory whose private directory is serverDir (DIR/watch) adds for the
// hooks: OpCapture takes a capture of that changelog under its lock,
// listing only what the server's own Tracker saw change. failpoint
// (FailpointEnv of the server's environment) applies when the request
// names none.
func CaptureOps(serverDir, failpoint string) map[string]watch.Handler {
	dir := filepath.Dir(filepath.Clean(serverDir))
	return map[string]watch.Handler{OpCapture: func(ctx context.Context, t *watch.Tracker, body json.RawMessage, gone func() bool) (json.RawMessage, error) {
		var call warmCall
		if err := json.Unmarshal(body, &call); err != nil {
			return nil, fmt.Errorf("bad capture request: %w", err)
		}
		if call.Dir != dir || call.CaptureID == "" || (call.Kind != KindCall && call.Kind != KindOutside) {
			return nil, errors.New("bad capture request: not a capture of this changelog")
		}
		fp := call.Failpoint
		if fp == "" {
			fp = failpoint
		}
		c, err := openForHook(call.ConfigDir, dir, call.Root, HookOptions{Failpoint: fp}, trackerSource{t})
		if err != nil {
			return nil, err
		}
		c.opts.ConversationRefs = call.ConversationRefs
		c.crashpoint("received")
		req := CaptureRequest{Position: -1, SessionID: call.SessionID, ToolUseID: call.ToolUseID, Tool: call.Tool, Failed: call.Failed,
			ConcurrentSessions: call.ConcurrentSessions, Kind: call.Kind, Outside: call.Outside, CaptureID: call.CaptureID,
			abandoned: func() error {
				if gone() || !time.Now().Before(call.Deadline) {
					return errAbandoned
				}
				return nil
			}}
		inc, err := c.Capture(ctx, req)
		if errors.Is(err, errAbandoned) {
			return nil, err
		}
		var ans warmAnswer
		ans.Increment = inc
		if err != nil {
			ans.Error = err.Error()
			var he *HoleError
			if errors.As(err, &he) {
				ans.Hole = &he.Position
			}
		}
		c.crashpoint("answer")
		return json.Marshal(ans)
	}}
}

// trackerSource is the ChangeSource of the server's own Tracker.
type trackerSource struct{ t *watch.Tracker }

func (s trackerSource) Since(ctx context.Context, roots []string, since string) (string, []*Hint, error) {
	tok, ch, err := s.t.Since(ctx, roots, since)
	if err != nil {
		return "", nil, err
	}
	return tok, hints(ch), nil
}

func hints(ch []*watch.Changes) []*Hint {
	out := make([]*Hint, len(ch))
	for i, c := range ch {
		if c != nil {
			out[i] = &Hint{Dirs: c.Dirs, Trees: c.Trees}
		}
	}
	return out
}

// warmCapture asks the watch server for the capture req of the changelog
// dir. done: the server answered durably (inc and err are the answer);
// otherwise sent says whether the request may have reached it (the hook
// then captures with req.recognise).
func (w *watchSource) warmCapture(ctx context.Context, configDir, dir, root string, req *CaptureRequest, refs bool, failpoint string) (inc *Increment, done bool, err error) {
	wait := w.wait
	if wait <= 0 {
		wait = WarmWait
	}
	req.CaptureID = newCaptureID()
	req.start = time.Now()
	kind := req.Kind
	if kind == "" {
		kind = KindCall
	}
	call := warmCall{Dir: dir, ConfigDir: configDir, Root: root, SessionID: req.SessionID, ToolUseID: req.ToolUseID, Tool: req.Tool,
		Failed: req.Failed, ConcurrentSessions: req.ConcurrentSessions, Kind: kind, Outside: req.Outside,
		ConversationRefs: refs, Failpoint: failpoint, CaptureID: req.CaptureID, Deadline: req.start.Add(wait)}
	body, err := w.c.Do(ctx, OpCapture, call, wait)
	switch {
	case errors.Is(err, watch.ErrNoServer), errors.Is(err, watch.ErrOp):
		// Not sent, or the server stored nothing: capture here.
		return nil, false, nil
	case err != nil:
		// Perhaps stored: the hook's capture recognises it.
		req.recognise = true
		return nil, false, nil
	}
	var ans warmAnswer
	if json.Unmarshal(body, &ans) != nil {
		req.recognise = true
		return nil, false, nil
	}
	if ans.Error != "" {
		err = errors.New(ans.Error)
		if ans.Hole != nil {
			err = &HoleError{Position: *ans.Hole, Err: err}
		}
	}
	if ans.Increment != nil {
		ans.Increment.Warm = true
	}
	return ans.Increment, true, err
}

func newCaptureID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// recognise returns the increment stored for req.CaptureID since req.start
// (a capture the watch server took for a hook that gave up waiting), nil
// when there is none. It reads the metadata of the newest increments, at
// most recogniseDepth of them, back to the first created before the hook
// asked (a minute of slack for the clock).
func (c *Changelog) recognise(req CaptureRequest) *Increment {
	pos, err := c.positions()
	if err != nil {
		return nil
	}
	floor := req.start.Add(-time.Minute)
	for i := len(pos) - 1; i >= 0 && i >= len(pos)-recogniseDepth; i-- {
		p := c.incrementPath(pos[i])
		m, err := ReadMeta(p)
		if err != nil {
			continue
		}
		if m.CaptureID == req.CaptureID && m.Position == pos[i] {
			inc := &Increment{Position: pos[i], Path: p, Meta: *m}
			if fi, err := os.Stat(p); err == nil {
				inc.Size = fi.Size()
			}
			return inc
		}
		if m.CreatedAt.Before(floor) {
			break
		}
	}
	return nil
}

// recogniseDepth bounds how many of the newest increments recognise reads.
const recogniseDepth = 32

// crashpoint, for crash tests of the warm capture, kills (FailpointEnv
// "kill:NAME") or stalls ("stall:NAME:MILLISECONDS") the capturing process
// at NAME: "received" (the server got the request, before the lock),
// "synced" (the increment's temporary file is fsynced, not yet linked),
// "linked" (linked and the directory fsynced, the state not advanced),
// "advanced" (the state advanced) and "answer" (before the server
// answers).
func (c *Changelog) crashpoint(name string) {
	fp := c.opts.Failpoint
	if fp == "" {
		return
	}
	if fp == "kill:"+name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if rest, ok := strings.CutPrefix(fp, "stall:"+name+":"); ok {
		if ms, err := strconv.Atoi(rest); err == nil {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
	}
}
