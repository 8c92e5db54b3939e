package capsule

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// portSampleInterval is how often listening sockets are sampled while the
// command runs; a socket opened and closed between two samples is not seen.
const portSampleInterval = 100 * time.Millisecond

// portSampler records the listening TCP sockets seen while the command runs
// (machine-wide) and which of them a process of its group holds open.
type portSampler struct {
	before map[string]bool

	mu      sync.Mutex
	seen    map[string]bool
	group   map[string]GroupListener
	samples int
	err     error
}

func newPortSampler(before []string) *portSampler {
	s := &portSampler{before: map[string]bool{}, seen: map[string]bool{}, group: map[string]GroupListener{}}
	for _, b := range before {
		s.before[b] = true
	}
	return s
}

// start samples every portSampleInterval until the returned stop is called
// (stop waits for a sample in progress).
func (s *portSampler) start(pgid int) (stop func()) {
	if s == nil {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(portSampleInterval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.sample(pgid)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit); <-finished })
	}
}

// sample reads the listening sockets and the socket fds of the group's processes.
func (s *portSampler) sample(pgid int) {
	if s == nil {
		return
	}
	ls, err := listeningSockets()
	byInode := map[uint64]string{}
	for _, l := range ls {
		if l.inode != 0 {
			byInode[l.inode] = l.addr
		}
	}
	var held []GroupListener
	if len(byInode) > 0 {
		for _, p := range groupProcesses(pgid) {
			for _, ino := range socketInodes(p.PID) {
				if addr, ok := byInode[ino]; ok {
					held = append(held, GroupListener{Addr: addr, PID: p.PID, Comm: p.Comm})
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if err != nil && s.err == nil {
		s.err = err
	}
	for _, l := range ls {
		if !s.before[l.addr] {
			s.seen[l.addr] = true
		}
	}
	for _, h := range held {
		if _, ok := s.group[h.Addr]; !ok {
			s.group[h.Addr] = h
		}
	}
}

// report fills the sampled part of o.
func (s *portSampler) report(o *PortObservation) {
	o.During, o.GroupListeners = []string{}, []GroupListener{}
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o.Samples = s.samples
	for a := range s.seen {
		o.During = append(o.During, a)
	}
	slices.Sort(o.During)
	for _, g := range s.group {
		o.GroupListeners = append(o.GroupListeners, g)
	}
	slices.SortFunc(o.GroupListeners, func(a, b GroupListener) int { return strings.Compare(a.Addr, b.Addr) })
	if s.err != nil && o.Error == "" {
		o.Error = s.err.Error()
	}
}

type listeningSocket struct {
	addr  string
	inode uint64
}

// listeningSockets returns the listening TCP sockets with their inodes, from
// NETLINK_SOCK_DIAG, else (no netlink, e.g. a seccomp filter) from
// /proc/net/tcp and /proc/net/tcp6.
func listeningSockets() ([]listeningSocket, error) {
	if ls, err := listeningSocketsDiag(); err == nil {
		return ls, nil
	}
	return listeningSocketsProc()
}

// listeningSocketsProc reads /proc/net/tcp and /proc/net/tcp6 with socket inodes.
func listeningSocketsProc() ([]listeningSocket, error) {
	var out []listeningSocket
	var errs []error
	for _, f := range []struct{ path, fam string }{{"/proc/net/tcp", "tcp4"}, {"/proc/net/tcp6", "tcp6"}} {
		ls, err := parseProcNetSockets(f.path, f.fam)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ls...)
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%v", errs)
	}
	return out, nil
}

func parseProcNetSockets(path, fam string) ([]listeningSocket, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcNetReader(f, path, fam)
}

// parseProcNetReader parses the /proc/net/tcp{,6} table in r (bounded).
func parseProcNetReader(r io.Reader, path, fam string) ([]listeningSocket, error) {
	var out []listeningSocket
	sc := bufio.NewScanner(io.LimitReader(r, 64<<20))
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != "0A" { // TCP_LISTEN
			continue
		}
		addr, err := decodeProcAddr(fs[1], fam)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var ino uint64
		if len(fs) > 9 {
			ino, _ = strconv.ParseUint(fs[9], 10, 64)
		}
		out = append(out, listeningSocket{addr: fam + " " + addr, inode: ino})
	}
	return out, sc.Err()
}

// groupProcesses lists the live processes of group pgid, the leader
// included, without reaping anything (cmd.Wait reaps the leader).
func groupProcesses(pgid int) []Descendant { return scanGroup(pgid, -1, false) }

// socketInodes returns the socket inodes among pid's open fds.
func socketInodes(pid int) []uint64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(4096)
	d.Close()
	var out []uint64
	for _, n := range names {
		t, err := os.Readlink(dir + "/" + n)
		if err != nil {
			continue
		}
		if v, ok := strings.CutPrefix(t, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 64); err == nil {
				out = append(out, ino)
			}
		}
	}
	return out
}

// portsOutsideGroup lists the opened listening addresses that no process of
// the command's group was seen holding.
func portsOutsideGroup(p PortObservation) []string {
	held := map[string]bool{}
	for _, g := range p.GroupListeners {
		held[g.Addr] = true
	}
	var out []string
	for _, a := range p.Opened {
		if !held[a] {
			out = append(out, a)
		}
	}
	return out
}
