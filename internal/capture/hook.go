package capture

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// HookResult says what one hook invocation retained.
type HookResult struct {
	// Ignored is true when the event is not captured (unrecognised, or no
	// binding covers the payload's cwd).
	Ignored bool
	Reason  string
	Spool   string
	Seq     uint64
}

// HandleClaudeHook reads one Claude Code hook payload from in, finds the
// enabled binding whose root contains the payload's cwd and durably appends
// the mapped event to that binding's spool. The caller turns any error into
// a warning: hooks fail open.
func HandleClaudeHook(ctx context.Context, store Store, in io.Reader, now time.Time) (*HookResult, error) {
	b, err := fsutil.ReadBounded(in, claude.MaxPayloadBytes)
	if err != nil {
		return nil, fmt.Errorf("read hook payload: %w", err)
	}
	p, err := claude.DecodePayload(b)
	if err != nil {
		return nil, err
	}
	cfg, err := store.Load()
	if err != nil {
		return nil, err
	}
	cwd := filepath.Clean(p.Cwd)
	bd := cfg.ForPath(cwd)
	if bd == nil {
		if real, err := filepath.EvalSymlinks(cwd); err == nil {
			bd = cfg.ForPath(real)
		}
	}
	if bd == nil {
		return &HookResult{Ignored: true, Reason: "no enabled capture binding contains " + cwd}, nil
	}
	rec, ok, err := claude.Map(p, bd.CaptureMode, now)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &HookResult{Ignored: true, Reason: "event " + p.HookEventName + " is not captured", Spool: bd.Spool}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// One guarded acquisition: identity revalidation, recovery and the
	// durable append under a single lock hold.
	seq, err := spool.AppendTo(ctx, bd.Spool, rec)
	if err != nil {
		return nil, err
	}
	return &HookResult{Spool: bd.Spool, Seq: seq}, nil
}
