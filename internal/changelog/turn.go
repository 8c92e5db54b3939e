package changelog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Turns. Every session's running turn has its own marker in the changelog
// directory's turns/ subdirectory, written durably when its prompt is
// submitted and removed when the turn (Stop) or the session (SessionEnd)
// ends. A marker names the agent's own process (found from the hook by
// walking up the process tree: pid and start time, so a reused pid is not
// taken for it); where no such process is found, the turn lives on a lease
// that every hook of the turn renews. A turn whose process is gone, or whose
// lease expired, is stale: it no longer blocks, and whatever refused for it
// sets it aside and says so.
const (
	turnsDir = "turns"
	// legacyTurnFile is the one marker per checkout that agentscm wrote
	// before turns were per session: still read (on a lease from its
	// start), and removed when its session's turn ends.
	legacyTurnFile = "turn.json"
	turnsLockFile  = ".lock"
)

// TurnLease is how long a turn whose agent process could not be found stays
// running after the last hook of the turn renewed it: longer than a tool
// call may take (Claude Code's Bash tool allows 10 minutes).
const TurnLease = 30 * time.Minute

// ErrTurnRunning reports an operation refused while an agent turn runs (the
// seed's 409).
var ErrTurnRunning = errors.New("an agent turn is running")

// Turn is the marker of one session's running turn.
type Turn struct {
	SessionID string    `json:"session_id"`
	StartedAt time.Time `json:"started_at"`
	// Agent is the host (claude-code, codex, gemini); empty in a marker
	// written before it was recorded.
	Agent string `json:"agent,omitempty"`
	// Host is the agent's own process; nil when it could not be found
	// (then the lease decides).
	Host *Host `json:"host,omitempty"`
	// RenewedAt is the last hook of the turn that renewed its lease (only
	// without a Host).
	RenewedAt time.Time `json:"renewed_at,omitzero"`
}

// TurnStatus is a turn marker as judged now.
type TurnStatus struct {
	Turn
	// Running: the turn blocks. Otherwise Stale says why it no longer
	// does (its agent process is gone, its lease expired).
	Running bool   `json:"running"`
	Stale   string `json:"stale,omitempty"`
	// LeaseUntil is when a turn without a known process stops blocking.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	file       string
}

// Describe names the turn for a message: session, agent, process and start.
func (t TurnStatus) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s (", t.SessionID)
	if t.Agent != "" {
		b.WriteString(t.Agent + ", ")
	}
	switch {
	case t.Host != nil:
		fmt.Fprintf(&b, "pid %d, ", t.Host.PID)
	case !t.LeaseUntil.IsZero():
		fmt.Fprintf(&b, "no agent process found, lease until %s, ", t.LeaseUntil.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "since %s)", t.StartedAt.UTC().Format(time.RFC3339))
	return b.String()
}

var plainSession = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// turnName is the marker file of session: its id when that is a plain
// name, else a hash of it.
func turnName(session string) string {
	if plainSession.MatchString(session) {
		return session + ".json"
	}
	sum := sha256.Sum256([]byte(session))
	return "h-" + hex.EncodeToString(sum[:16]) + ".json"
}

// BeginTurn durably records that t's session started a turn (replacing the
// session's earlier marker).
func BeginTurn(dir string, t Turn) error {
	d := filepath.Join(dir, turnsDir)
	if err := fsutil.MkdirPrivate(d); err != nil {
		return err
	}
	t.StartedAt = t.StartedAt.UTC()
	if t.Host == nil && t.RenewedAt.IsZero() {
		t.RenewedAt = t.StartedAt
	}
	t.RenewedAt = t.RenewedAt.UTC()
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(filepath.Join(d, turnName(t.SessionID)), append(b, '\n'), fsutil.FileMode)
}

// EndTurn records that session's turn ended: its marker goes (and the
// legacy per-checkout marker, when it is that session's). Other sessions'
// markers are left alone.
func EndTurn(dir, session string) error {
	if session == "" {
		return nil
	}
	err := removeDurably(filepath.Join(dir, turnsDir, turnName(session)))
	if t, lerr := readTurn(filepath.Join(dir, legacyTurnFile)); lerr == nil && t != nil && t.SessionID == session {
		err = errors.Join(err, removeDurably(filepath.Join(dir, legacyTurnFile)))
	}
	return err
}

// RenewTurn renews the lease of session's running turn when it has no known
// agent process (a turn with one needs no lease); no marker, nothing.
func RenewTurn(dir, session string, now time.Time) error {
	path := filepath.Join(dir, turnsDir, turnName(session))
	t, err := readTurn(path)
	if err != nil || t == nil || t.Host != nil || t.SessionID != session {
		return err
	}
	t.RenewedAt = now.UTC()
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(path, append(b, '\n'), fsutil.FileMode)
}

func removeDurably(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

func readTurn(path string) (*Turn, error) {
	b, err := fsutil.ReadFileNoFollow(path, 64<<10)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read turn marker: %w", err)
	}
	var t Turn
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("turn marker %s: %w", path, err)
	}
	return &t, nil
}

// Turns lists every session's turn marker in dir, judged at now: running
// turns first, then stale ones, each by start.
func Turns(dir string, now time.Time) ([]TurnStatus, error) {
	return turnsAt("/proc", dir, now)
}

func turnsAt(procRoot, dir string, now time.Time) ([]TurnStatus, error) {
	var out []TurnStatus
	add := func(path string) error {
		t, err := readTurn(path)
		if err != nil || t == nil {
			return err
		}
		st := judgeTurn(procRoot, *t, now)
		st.file = path
		out = append(out, st)
		return nil
	}
	if err := add(filepath.Join(dir, legacyTurnFile)); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(dir, turnsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read turn markers: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		if err := add(filepath.Join(dir, turnsDir, e.Name())); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Running != out[j].Running {
			return out[i].Running
		}
		return out[i].StartedAt.Before(out[j].StartedAt)
	})
	return out, nil
}

// judgeTurn decides whether t still runs: its agent process lives (same
// pid, same start time, not a zombie), or, when the process is unknown, its
// lease has not expired.
func judgeTurn(procRoot string, t Turn, now time.Time) TurnStatus {
	st := TurnStatus{Turn: t}
	if t.Host != nil {
		alive, known, reason := hostState(procRoot, *t.Host)
		if known {
			st.Running, st.Stale = alive, reason
			return st
		}
	}
	from := t.RenewedAt
	if from.IsZero() || from.Before(t.StartedAt) {
		from = t.StartedAt
	}
	st.LeaseUntil = from.Add(TurnLease)
	st.Running = now.Before(st.LeaseUntil)
	if !st.Running {
		st.Stale = fmt.Sprintf("no hook of it renewed its lease since %s (%s)", from.UTC().Format(time.RFC3339), TurnLease)
	}
	return st
}

// TurnsRunningError is ErrTurnRunning with the turns that run.
type TurnsRunningError struct{ Running []TurnStatus }

func (e *TurnsRunningError) Error() string {
	names := make([]string, len(e.Running))
	for i, t := range e.Running {
		names[i] = t.Describe()
	}
	return fmt.Sprintf("%s: %s; wait for it to end (a turn whose agent process is gone is set aside by itself; a turn you interrupted ends with `agentscm changelog end-turn --session ID`)",
		ErrTurnRunning, strings.Join(names, "; "))
}

func (e *TurnsRunningError) Unwrap() error { return ErrTurnRunning }

// TurnGate holds the changelog's turns while a rewind, snapshot load or
// enable changes the workspace: no turn runs, and a prompt submitted
// meanwhile waits (then is refused) instead of starting.
type TurnGate struct {
	lock *fsutil.Lock
	// SetAside lists the stale turns removed to pass.
	SetAside []TurnStatus
}

// Release lets turns start again.
func (g *TurnGate) Release() {
	if g != nil {
		g.lock.Unlock()
	}
}

// HoldTurns refuses with a *TurnsRunningError (wrapping ErrTurnRunning)
// while any live session's turn runs in dir; otherwise it sets the stale
// turns aside (their markers are removed and listed in SetAside) and holds
// the turns until Release.
func HoldTurns(dir string, now time.Time) (*TurnGate, error) {
	if err := fsutil.MkdirPrivate(filepath.Join(dir, turnsDir)); err != nil {
		return nil, err
	}
	lk, err := fsutil.LockFile(filepath.Join(dir, turnsDir, turnsLockFile))
	if err != nil {
		return nil, err
	}
	g, err := holdLocked("/proc", dir, now, lk)
	if err != nil {
		lk.Unlock()
		return nil, err
	}
	return g, nil
}

func holdLocked(procRoot, dir string, now time.Time, lk *fsutil.Lock) (*TurnGate, error) {
	ts, err := turnsAt(procRoot, dir, now)
	if err != nil {
		return nil, err
	}
	var running []TurnStatus
	for _, t := range ts {
		if t.Running {
			running = append(running, t)
		}
	}
	if len(running) > 0 {
		return nil, &TurnsRunningError{Running: running}
	}
	g := &TurnGate{lock: lk}
	for _, t := range ts {
		if err := removeDurably(t.file); err != nil {
			return nil, fmt.Errorf("set aside the stale turn of session %s: %w", t.SessionID, err)
		}
		g.SetAside = append(g.SetAside, t)
	}
	return g, nil
}

// RefuseDuringTurn fails with ErrTurnRunning while a live turn runs in dir;
// stale turns are set aside. It holds nothing: see HoldTurns.
func RefuseDuringTurn(dir string) error {
	g, err := HoldTurns(dir, time.Now())
	g.Release()
	return err
}

// tryLockTurns takes the turns lock without waiting: nil when a rewind,
// load or another hook holds it. Closing the file releases it.
func tryLockTurns(dir string) (*os.File, error) {
	d := filepath.Join(dir, turnsDir)
	if err := fsutil.MkdirPrivate(d); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, turnsLockFile), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return nil, fmt.Errorf("open turns lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock turns: %w", err)
	}
	return f, nil
}

// PromptRefusal is a prompt the changelog refused: another session's turn
// still ran (or a rewind held the turns) when the wait ended. Reason is the
// one sentence the host shows the user.
type PromptRefusal struct {
	Running []TurnStatus
	Reason  string
}

// startTurn begins mine once no other live session's turn runs (stale ones
// are set aside), waiting at most wait; with parallel it begins at once.
// It returns the refusal when the wait ends first.
func startTurn(ctx context.Context, dir, root string, mine Turn, parallel bool, wait time.Duration) (*PromptRefusal, []TurnStatus, error) {
	deadline := time.Now().Add(wait)
	var others []TurnStatus
	held := false
	for {
		r, setAside, done, err := tryStartTurn(dir, mine, parallel)
		if err != nil || done {
			return nil, setAside, err
		}
		others, held = r, r == nil
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	ref := &PromptRefusal{Running: others}
	if held {
		ref.Reason = fmt.Sprintf("agentscm did not run this prompt: a rewind or snapshot load of %s is in progress; send the prompt again when it ends.", root)
		return ref, nil, nil
	}
	o := others[0]
	agent := o.Agent
	if agent == "" {
		agent = "an agent"
	}
	ref.Reason = fmt.Sprintf("agentscm did not run this prompt: session %s (%s) is running a turn in %s, whose changelog records one session at a time; run this session in a separate worktree (git worktree add ../%s-2), or send the prompt again when that turn ends.",
		o.SessionID, agent, root, filepath.Base(root))
	return ref, nil, nil
}

// tryStartTurn is one attempt of startTurn under the turns lock: done when
// mine began; otherwise the other sessions' running turns (nil: the lock
// was held).
func tryStartTurn(dir string, mine Turn, parallel bool) (others, setAside []TurnStatus, done bool, err error) {
	lk, err := tryLockTurns(dir)
	if err != nil || lk == nil {
		return nil, nil, false, err
	}
	defer lk.Close()
	ts, err := Turns(dir, mine.StartedAt)
	if err != nil {
		return nil, nil, false, err
	}
	for _, t := range ts {
		switch {
		case t.SessionID == mine.SessionID:
		case t.Running:
			others = append(others, t)
		default:
			if err := removeDurably(t.file); err != nil {
				return nil, nil, false, err
			}
			setAside = append(setAside, t)
		}
	}
	if len(others) > 0 && !parallel {
		return others, setAside, false, nil
	}
	return nil, setAside, true, BeginTurn(dir, mine)
}

// maxConcurrentNamed bounds the sessions a position names as running
// beside it.
const maxConcurrentNamed = 16

// otherRunningTurns names the sessions other than session whose turn runs
// in dir now (for a position taken while they ran).
func otherRunningTurns(dir, session string, now time.Time) []string {
	ts, err := Turns(dir, now)
	if err != nil {
		return nil
	}
	var out []string
	for _, t := range ts {
		if t.Running && t.SessionID != session && len(out) < maxConcurrentNamed {
			out = append(out, t.SessionID)
		}
	}
	return out
}

// sessionsSettingFile holds whether parallel sessions are allowed in the
// checkout (`changelog enable --parallel-sessions`); absent means one
// session at a time. Older agentscm ignores it.
const sessionsSettingFile = "sessions.json"

type sessionsSetting struct {
	ParallelSessions bool `json:"parallel_sessions"`
}

// ParallelSessions reports whether the changelog in dir lets several
// sessions' turns run at once (then each position names its session and
// the sessions whose turns ran beside it). Unreadable: no.
func ParallelSessions(dir string) bool {
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, sessionsSettingFile), 4096)
	if err != nil {
		return false
	}
	var s sessionsSetting
	return json.Unmarshal(b, &s) == nil && s.ParallelSessions
}

// SetParallelSessions records whether the changelog in dir lets several
// sessions' turns run at once.
func SetParallelSessions(dir string, on bool) error {
	b, _ := json.Marshal(sessionsSetting{ParallelSessions: on})
	if err := fsutil.WriteAtomic(filepath.Join(dir, sessionsSettingFile), append(b, '\n'), fsutil.FileMode); err != nil {
		return fmt.Errorf("changelog sessions setting: %w", err)
	}
	return nil
}

// ErrNoTurn reports that a session has no turn marker.
var ErrNoTurn = errors.New("no turn of that session is recorded")

// SetTurnAside removes session's turn marker on the user's word (an
// interrupted turn: the host fires no turn end for it) and returns the turn
// as it was judged at now.
func SetTurnAside(dir, session string, now time.Time) (TurnStatus, error) {
	if err := fsutil.MkdirPrivate(filepath.Join(dir, turnsDir)); err != nil {
		return TurnStatus{}, err
	}
	lk, err := fsutil.LockFile(filepath.Join(dir, turnsDir, turnsLockFile))
	if err != nil {
		return TurnStatus{}, err
	}
	defer lk.Unlock()
	ts, err := Turns(dir, now)
	if err != nil {
		return TurnStatus{}, err
	}
	for _, t := range ts {
		if t.SessionID == session {
			return t, EndTurn(dir, session)
		}
	}
	return TurnStatus{}, fmt.Errorf("%w: session %s", ErrNoTurn, session)
}
