package main

import (
	"strings"
	"testing"
)

// A strace -f -tt log in the shape strace 6.1 writes: the agent (100)
// starts a hook through sh (101, exec'ing the hook), the hook spawns a
// deliverer (102) that outlives it; a clone is split into unfinished and
// resumed lines.
const traceSample = `100 10:00:00.000000 execve("/usr/bin/node", ["node", "cli.js"], 0x7ffd /* 9 vars */) = 0
100 10:00:00.100000 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD <unfinished ...>
101 10:00:00.100500 execve("/bin/sh", ["/bin/sh", "-c", "/b/agentscm-hook change-capture hook-codex"], 0x1 /* 9 vars */) = 0
100 10:00:00.100600 <... clone resumed>) = 101
101 10:00:00.101000 execve("/b/agentscm-hook", ["/b/agentscm-hook", "change-capture", "hook-codex"], 0x2 /* 9 vars */) = 0
101 10:00:00.120000 clone(child_stack=NULL, flags=SIGCHLD) = 102
102 10:00:00.121000 execve("/b/agentscm-hook", ["/b/agentscm-hook", "change-capture", "deliver-spool", "--spool", "x"], 0x3 /* 9 vars */) = 0
101 10:00:00.150000 +++ exited with 0 +++
100 10:00:00.200000 clone(child_stack=NULL, flags=SIGCHLD) = 103
103 10:00:00.201000 execve("/b/agentscm", ["/b/agentscm", "changelog", "hook-codex"], 0x4 /* 9 vars */) = 0
103 10:00:00.260000 +++ exited with 0 +++
102 10:00:00.500000 +++ exited with 0 +++
100 10:00:01.000000 +++ exited with 0 +++
`

func TestParseTraceAndGroup(t *testing.T) {
	tl := parseTrace(strings.NewReader(traceSample))
	if tl.first != 100 || tl.agentT-tl.t0 != 1.0 {
		t.Fatalf("agent %d ran %v s, want 100 and 1 s", tl.first, tl.agentT-tl.t0)
	}
	if p := tl.procs[101]; p.parent != 100 || p.command("/b") != "agentscm-hook change-capture hook-codex" || p.exit-p.start < 0.0494 || p.exit-p.start > 0.0496 {
		t.Fatalf("hook 101: %+v %q", p, p.command("/b"))
	}
	if p := tl.procs[102]; p.parent != 101 || !tl.hookish(p, "/b") {
		t.Fatalf("deliverer 102: %+v", p)
	}
	var roots []*proc
	for _, pid := range []int{101, 103} {
		roots = append(roots, tl.procs[pid])
	}
	evs, labels := groupEvents(roots, []step{{"UserPromptSubmit", 2}}, tl.agentT)
	if len(evs) != 1 || labels[0] != "UserPromptSubmit" || len(evs[0].entries) != 2 {
		t.Fatalf("by sequence: %v %+v", labels, evs)
	}
	// Not the expected count: by overlap (101 ends before 103 starts).
	evs, labels = groupEvents(roots, []step{{"Stop", 1}}, tl.agentT)
	if len(evs) != 2 || labels[1] != "event01" {
		t.Fatalf("by overlap: %v", labels)
	}
	if tl.hookish(tl.procs[100], "/b") {
		t.Fatal("the agent is not a hook")
	}
}
