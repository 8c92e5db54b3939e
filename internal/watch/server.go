package watch

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// Layout of a server's private directory.
const (
	SocketName = "sock"
	lockName   = "lock"
	cookieSub  = "cookies"
	spawnName  = "spawned"
)

// Protocol bounds.
const (
	maxRequest = 1 << 20
	maxRoots   = 64
)

// ErrRunning reports that another server holds the directory.
var ErrRunning = errors.New("watch: a server already runs in this directory")

// Request operations ("" asks what changed).
const (
	opStatus = "status"
	opStop   = "stop"
)

type request struct {
	Op    string   `json:"op,omitempty"`
	Roots []string `json:"roots"`
	Token string   `json:"token"`
	// Body is the argument of an operation of ServeOptions.Ops.
	Body json.RawMessage `json:"body,omitempty"`
	// Wait bounds, in milliseconds, how long the client waits for the
	// answer of an operation of ServeOptions.Ops (0: the default bound).
	Wait int64 `json:"wait_ms,omitempty"`
}

type response struct {
	Token   string     `json:"token"`
	Changes []*Changes `json:"changes"`
	Error   string     `json:"error,omitempty"`
	// Status answers (op "status").
	PID   int          `json:"pid,omitempty"`
	Since time.Time    `json:"since,omitzero"`
	Roots []RootStatus `json:"roots,omitempty"`
	// Body is the answer of an operation of ServeOptions.Ops.
	Body json.RawMessage `json:"body,omitempty"`
}

// Handler serves one operation a host of the server adds (ServeOptions.Ops):
// body is the client's argument, t the server's Tracker, and gone reports
// whether the client has closed its connection (it gave up waiting). An
// error answers the client with no body: the operation did nothing.
type Handler func(ctx context.Context, t *Tracker, body json.RawMessage, gone func() bool) (json.RawMessage, error)

// ErrOp reports an operation the server refused or did not carry out (an
// unknown operation, a bad request, the handler's error): it did nothing.
var ErrOp = errors.New("watch: operation not carried out")

// MaxOpWait bounds how long a server works on one operation of
// ServeOptions.Ops for a client.
const MaxOpWait = 10 * time.Minute

// Status is a running server's answer to Client.Status.
type Status struct {
	// PID is the server's process id; Started when it began serving.
	PID     int
	Started time.Time
	// Roots says, per root asked about, whether the server vouches for
	// the changes since the token asked about.
	Roots []RootStatus
}

// ServeOptions tune Serve.
type ServeOptions struct {
	Tracker Options
	// Idle ends the server after this long without a request; 0 means 15
	// minutes.
	Idle time.Duration
	// Ready, when set, is called once the socket listens.
	Ready func()
	// Ops are further operations the server answers (the changelog's
	// capture, see changelog.CaptureOps), by name; the built-in names
	// ("", "status", "stop") cannot be replaced.
	Ops map[string]Handler
}

// Serve hosts a Tracker on the Unix socket dir/sock until ctx ends, the
// server is idle for opts.Idle, or its socket is removed. dir must be a
// private directory of the calling user (0700, not a link); roots are
// watched from the start. A second server on the same directory returns
// ErrRunning.
func Serve(ctx context.Context, dir string, roots []string, opts ServeOptions) error {
	if opts.Idle <= 0 {
		opts.Idle = 15 * time.Minute
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	lk, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer lk.Close()
	if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return ErrRunning
		}
		return fmt.Errorf("watch: lock: %w", err)
	}
	cookies := filepath.Join(dir, cookieSub)
	if err := fsutil.MkdirPrivate(cookies); err != nil {
		return err
	}
	if err := fsutil.CheckPrivateDir(cookies); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	sock := filepath.Join(dir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("watch: %w", err)
	}
	addr, closeAddr, err := socketAddr(dir)
	if err != nil {
		return err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	closeAddr()
	if err != nil {
		return fmt.Errorf("watch: listen: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	sockInfo, err := os.Lstat(sock)
	if err != nil {
		return err
	}
	t, err := New(cookies, opts.Tracker)
	if err != nil {
		return err
	}
	defer t.Close()
	if len(roots) > 0 {
		if _, _, err := t.Since(ctx, roots, ""); err != nil {
			return err
		}
		// Answer the hook that started this server only once the roots
		// are watched (bounded), so the token it gets already vouches
		// for the next call.
		waitWatched(ctx, t, roots, 5*time.Second)
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	go func() {
		tick := time.NewTicker(min(opts.Idle/4, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				ln.Close()
				return
			case <-t.Gone():
				// The private directory went (its cookies with it).
				cancel()
			case <-tick.C:
				fi, err := os.Lstat(sock)
				if time.Since(t.LastUsed()) > opts.Idle || err != nil || !os.SameFile(fi, sockInfo) {
					cancel()
				}
			}
		}
	}()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch: accept: %w", err)
		}
		go handle(ctx, t, conn, started, cancel, opts.Ops)
	}
}

// waitWatched waits until every root's watches are set up (or the root
// cannot be watched, or is missing), at most d.
func waitWatched(ctx context.Context, t *Tracker, roots []string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := true
		for _, r := range roots {
			if watching, ready, err := t.Status(r); watching && !ready && err == nil {
				done = false
			}
		}
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func handle(ctx context.Context, t *Tracker, conn *net.UnixConn, started time.Time, stop context.CancelFunc, ops map[string]Handler) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if uid, err := peerUID(conn); err != nil || uid != os.Getuid() {
		return // another user's process: no answer
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxRequest)).ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	resp := response{}
	if err := json.Unmarshal(line, &req); err != nil {
		resp.Error = "bad request"
	} else if h := ops[req.Op]; h != nil && req.Op != opStatus && req.Op != opStop {
		serveOp(ctx, t, conn, h, &req)
		return
	} else if req.Op == opStop {
		resp.PID = os.Getpid()
		b, _ := json.Marshal(resp)
		conn.Write(append(b, '\n'))
		stop()
		return
	} else if len(req.Roots) == 0 || len(req.Roots) > maxRoots || (req.Op != "" && req.Op != opStatus) {
		resp.Error = "bad request"
	} else {
		for _, r := range req.Roots {
			if !filepath.IsAbs(r) || filepath.Clean(r) != r {
				resp.Error = "bad request: roots must be clean absolute paths"
			}
		}
	}
	if resp.Error == "" && req.Op == opStatus {
		resp.PID, resp.Since, resp.Roots = os.Getpid(), started, t.Vouch(req.Roots, req.Token)
	} else if resp.Error == "" {
		tok, ch, err := t.Since(ctx, req.Roots, req.Token)
		if err != nil {
			resp.Error = err.Error()
		} else {
			resp.Token, resp.Changes = tok, ch
		}
	}
	b, _ := json.Marshal(resp)
	conn.Write(append(b, '\n'))
}

// serveOp answers one operation of ServeOptions.Ops: the handler runs
// (bounded by MaxOpWait) while the client waits; gone reports a client
// that closed its end.
func serveOp(ctx context.Context, t *Tracker, conn *net.UnixConn, h Handler, req *request) {
	conn.SetDeadline(time.Now().Add(MaxOpWait))
	ctx, cancel := context.WithTimeout(ctx, MaxOpWait)
	defer cancel()
	t.touch()
	body, err := h(ctx, t, req.Body, func() bool { return peerGone(conn) })
	t.touch()
	resp := response{Body: body}
	if err != nil {
		resp = response{Error: err.Error()}
	}
	b, _ := json.Marshal(resp)
	conn.Write(append(b, '\n'))
}

// peerGone reports whether the client closed its end of conn (a peek
// without waiting reads end of file).
func peerGone(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	var b [1]byte
	if err := raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		gone = err == nil && n == 0 || err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR)
	}); err != nil {
		return true
	}
	return gone
}

// Client reaches the server of one private directory, starting it on
// demand.
type Client struct {
	// Dir is the server's private directory (created 0700 when missing).
	Dir string
	// Command starts a server for Dir (detached, in its own session); the
	// roots are appended. nil never starts one.
	Command []string
	// Timeout bounds a call (connect, sync, answer); 0 means 500 ms.
	Timeout time.Duration
}

// maxSocketPath bounds a socket path given to bind or connect (sun_path
// holds 104-108 bytes).
const maxSocketPath = 100

// socketAddr is the address of dir's socket: its path, or, when that is too
// long for sun_path, a short path through an open descriptor of dir
// (/proc/self/fd/N/sock, Linux); done closes that descriptor once the
// socket is bound or connected.
func socketAddr(dir string) (addr string, done func(), _ error) {
	sock := filepath.Join(dir, SocketName)
	if len(sock) <= maxSocketPath {
		return sock, func() {}, nil
	}
	fd, err := openDirPath(dir)
	if err != nil {
		return "", nil, fmt.Errorf("watch: the socket path %s is too long and %w", sock, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + SocketName, func() { syscall.Close(fd) }, nil
}

// StartWait bounds how long the call that started a server waits for its
// first answer (its process start and its watches on every directory of
// the roots; about 50 ms for 1,000 directories on an idle machine, more
// than a second under load).
const StartWait = 2 * time.Second

// ErrNoServer reports that no server answers on the directory's socket.
var ErrNoServer = errors.New("watch: no server")

// call sends one request and reads the answer within the client's bound.
// create makes a missing directory.
func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 500 * time.Millisecond
	}
	return c.Timeout
}

func (c *Client) call(ctx context.Context, req request, create bool) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if _, err := os.Lstat(c.Dir); errors.Is(err, os.ErrNotExist) {
		if !create {
			return nil, fmt.Errorf("%w: %s does not exist", ErrNoServer, c.Dir)
		}
		if err := fsutil.MkdirPrivate(c.Dir); err != nil {
			return nil, err
		}
	}
	if err := fsutil.CheckPrivateDir(c.Dir); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	sock := filepath.Join(c.Dir, SocketName)
	if fi, err := os.Lstat(sock); err == nil && fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("watch: %s is not a socket", sock)
	}
	addr, closeAddr, err := socketAddr(c.Dir)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", addr)
	closeAddr()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoServer, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 64<<20)).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	var resp response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("watch: bad answer: %w", err)
	}
	if resp.Error != "" {
		return nil, fmt.Errorf("%w: watch: server: %s", ErrOp, resp.Error)
	}
	return &resp, nil
}

// Since asks the server what changed below roots since token (see
// Tracker.Since). When no server answers it starts one (at most once per
// 10 s) and returns an error: the caller walks this time.
func (c *Client) Since(ctx context.Context, roots []string, token string) (string, []*Changes, error) {
	resp, err := c.call(ctx, request{Roots: roots, Token: token}, true)
	if errors.Is(err, ErrNoServer) && c.Start(roots) {
		// Wait (bounded by StartWait) for the server just started: its
		// first answer, given once the roots are watched, is the token
		// this call's listing is stored with, so the next call is
		// watched. This call lists every directory anyway.
		deadline := time.Now().Add(StartWait)
		for errors.Is(err, ErrNoServer) && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
			resp, err = c.call(ctx, request{Roots: roots, Token: token}, false)
		}
	}
	if err != nil {
		return "", nil, err
	}
	if len(resp.Changes) != len(roots) || resp.Token == "" {
		return "", nil, errors.New("watch: bad answer")
	}
	return resp.Token, resp.Changes, nil
}

// Do asks the running server to carry out the operation op of its
// ServeOptions.Ops with body, waiting at most wait for the answer (0: the
// client's Timeout); it starts no server. ErrNoServer (wrapped): none
// answered, the request was not sent. ErrOp (wrapped): the server answered
// that it did nothing. Any other error leaves open whether the operation
// was carried out (the server died, or the wait ended first).
func (c *Client) Do(ctx context.Context, op string, body any, wait time.Duration) (json.RawMessage, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if wait <= 0 {
		wait = c.timeout()
	}
	cc := *c
	cc.Timeout = wait
	resp, err := cc.call(ctx, request{Op: op, Body: b, Wait: wait.Milliseconds()}, false)
	if err != nil {
		return nil, err
	}
	if resp.Body == nil {
		return nil, fmt.Errorf("%w: no answer", ErrOp)
	}
	return resp.Body, nil
}

// Status asks the running server whether it vouches for roots' changes
// since token; ErrNoServer (wrapped) when none answers. It starts nothing.
func (c *Client) Status(ctx context.Context, roots []string, token string) (*Status, error) {
	resp, err := c.call(ctx, request{Op: opStatus, Roots: roots, Token: token}, false)
	if err != nil {
		return nil, err
	}
	if len(resp.Roots) != len(roots) || resp.PID <= 0 {
		return nil, errors.New("watch: bad answer")
	}
	return &Status{PID: resp.PID, Started: resp.Since, Roots: resp.Roots}, nil
}

// Stop asks the running server to exit and waits (within ctx) until it has
// released its directory; it returns the server's pid, 0 when none ran.
func (c *Client) Stop(ctx context.Context) (int, error) {
	resp, err := c.call(ctx, request{Op: opStop}, false)
	if errors.Is(err, ErrNoServer) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// The server holds its lock until Serve returns.
	lk, err := os.OpenFile(filepath.Join(c.Dir, lockName), os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return resp.PID, nil
	}
	defer lk.Close()
	for {
		if err := syscall.Flock(int(lk.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			syscall.Flock(int(lk.Fd()), syscall.LOCK_UN)
			// The next Since may start a new server at once.
			_ = os.Remove(filepath.Join(c.Dir, spawnName))
			return resp.PID, nil
		}
		select {
		case <-ctx.Done():
			return resp.PID, fmt.Errorf("watch: server %d did not stop: %w", resp.PID, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Start launches a detached server for roots unless one was started less
// than 10 s ago (a server already running exits at once: ErrRunning); it
// reports whether it launched one.
func (c *Client) Start(roots []string) bool {
	if len(c.Command) == 0 {
		return false
	}
	marker := filepath.Join(c.Dir, spawnName)
	if fi, err := os.Lstat(marker); err == nil && time.Since(fi.ModTime()) < 10*time.Second {
		return false
	}
	if err := fsutil.WriteAtomic(marker, nil, 0o600); err != nil {
		return false
	}
	cmd := exec.Command(c.Command[0], append(c.Command[1:], roots...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = detached()
	if cmd.Start() != nil {
		return false
	}
	_ = cmd.Process.Release()
	return true
}
