package capsule

import (
	"errors"
	"reflect"
	"testing"
)

// TestJudge table-tests the verdict of a run from its observation alone:
// no command runs and nothing is read or written.
func TestJudge(t *testing.T) {
	exited := func(code int) *ExitState { return &ExitState{Exited: true, ExitCode: code} }
	rtOf := func(exit *ExitState, mod func(*Runtime)) *Runtime {
		rt := &Runtime{Launched: exit != nil, Exit: exit, DurationMS: 10,
			Cleanup: &ProcessCleanup{Descendants: []Descendant{}},
			Ports:   PortObservation{During: []string{}, GroupListeners: []GroupListener{}}}
		if mod != nil {
			mod(rt)
		}
		return rt
	}
	file := func(p, sum string, backup bool) *ManifestEntry {
		return &ManifestEntry{Path: p, Type: "file", SHA256: sum, Size: 3, Backup: backup}
	}
	modified := Change{Path: "src/a.go", Change: Modified, Type: "file", BeforeType: "file", Aspects: []string{"content"}}
	tests := []struct {
		name     string
		obs      observation
		status   string
		outcome  Decision
		warnings []string // codes, in order
		machine  []string
		recovery string // the first change's recovery method
		tamper   int64  // the blast radius's capsule_tampered count
	}{
		{name: "nothing changed", obs: observation{rt: rtOf(exited(0), nil)},
			status: StatusPassed, outcome: Allow},
		{name: "a reviewed change with its backup verified",
			obs: observation{rt: rtOf(exited(0), nil), changes: []Change{modified},
				before:   map[string]*ManifestEntry{"src/a.go": file("src/a.go", "b1", true)},
				after:    map[string]*ManifestEntry{"src/a.go": file("src/a.go", "a1", false)},
				verified: map[string]bool{"b1": true}},
			status: StatusReview, outcome: Review, recovery: "restore_backup"},
		{name: "a denied path",
			obs: observation{rt: rtOf(exited(0), nil), changes: []Change{{Path: ".env", Change: Created, Type: "file"}},
				after: map[string]*ManifestEntry{".env": file(".env", "x", false)}},
			status: StatusDenied, outcome: Deny, recovery: "remove_created"},
		{name: "a change without a backup warns",
			obs: observation{rt: rtOf(exited(0), nil), changes: []Change{modified},
				before: map[string]*ManifestEntry{"src/a.go": file("src/a.go", "b1", false)},
				after:  map[string]*ManifestEntry{"src/a.go": file("src/a.go", "a1", false)}},
			status: StatusReview, outcome: Review, warnings: []string{"backup_budget_exhausted"}, recovery: "none"},
		{name: "a backup object tampered with denies",
			obs: observation{rt: rtOf(exited(0), nil), changes: []Change{modified},
				before:          map[string]*ManifestEntry{"src/a.go": file("src/a.go", "b1", true)},
				after:           map[string]*ManifestEntry{"src/a.go": file("src/a.go", "a1", false)},
				tamperedObjects: []string{"b1"}},
			status: StatusDenied, outcome: Deny, warnings: []string{"capsule_tampered"}, recovery: "none", tamper: 1},
		{name: "capsule files rewritten and the capsule moved",
			obs:    observation{rt: rtOf(exited(0), nil), tamperedFiles: []string{FileBefore}, movedFrom: "/r/a", movedTo: "/r/b"},
			status: StatusDenied, outcome: Deny, warnings: []string{"capsule_tampered", "capsule_moved"}, tamper: 2},
		{name: "the command failed", obs: observation{rt: rtOf(exited(3), nil)},
			status: StatusFailed, outcome: Allow},
		{name: "timed out", obs: observation{rt: rtOf(&ExitState{TimedOut: true}, nil)},
			status: StatusTimedOut, outcome: Allow},
		{name: "blocked by the command policy",
			obs:    observation{rt: rtOf(nil, nil), blocked: true, cmdDec: CommandDecision{Decision: Deny}},
			status: StatusBlocked, outcome: Allow},
		{name: "not launched", obs: observation{rt: rtOf(nil, nil), execErr: errors.New("executable \"x\" not found in PATH")},
			status: StatusError, outcome: Allow},
		{name: "a reviewed command", obs: observation{rt: rtOf(exited(0), nil), cmdDec: CommandDecision{Decision: Review}},
			status: StatusReview, outcome: Review},
		{name: "warnings in their order; machine-wide ports reported apart",
			obs: observation{rt: rtOf(exited(0), func(rt *Runtime) {
				rt.Cleanup = &ProcessCleanup{Descendants: []Descendant{{}}, Remaining: 1}
				rt.Ports.GroupListeners = []GroupListener{{Addr: "127.0.0.1:80", PID: 7, Comm: "srv"}}
				rt.Ports.Opened = []string{"127.0.0.1:80", "127.0.0.1:81"}
				rt.Cancelled = true
				rt.Ports.Error = "netlink: denied"
			})},
			status: StatusReview, outcome: Allow,
			warnings: []string{"descendants_killed", "descendants_remaining", "listening_ports_opened", "cancelled", "port_observation_incomplete"},
			machine:  []string{"listening_ports_opened_elsewhere"}},
		{name: "over the duration limit denies",
			obs:    observation{rt: rtOf(exited(0), func(rt *Runtime) { rt.DurationMS = 2 * 3600 * 1000 })},
			status: StatusDenied, outcome: Deny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.obs.runID = "20260101T000000Z-0123abcd"
			res := judge(tc.obs, DefaultPolicy())
			if res.Status != tc.status || res.SafetyOutcome != tc.outcome {
				t.Errorf("status %s outcome %s, want %s %s", res.Status, res.SafetyOutcome, tc.status, tc.outcome)
			}
			if res.RunID != tc.obs.runID || res.Changes == nil || res.ObservationWarnings == nil {
				t.Errorf("result fields: run %q changes %v warnings %v", res.RunID, res.Changes, res.ObservationWarnings)
			}
			if got := codes(res.ObservationWarnings); !reflect.DeepEqual(got, tc.warnings) {
				t.Errorf("warnings %v, want %v", got, tc.warnings)
			}
			if got := codes(res.MachineObservations); !reflect.DeepEqual(got, tc.machine) {
				t.Errorf("machine observations %v, want %v", got, tc.machine)
			}
			if tc.recovery != "" && res.Changes[0].Recovery.Method != tc.recovery {
				t.Errorf("recovery %+v, want %s", res.Changes[0].Recovery, tc.recovery)
			}
			for _, c := range res.BlastRadius.Components {
				if c.Name == "capsule_tampering" && c.Count != tc.tamper {
					t.Errorf("blast radius tampered %d, want %d", c.Count, tc.tamper)
				}
			}
			if (tc.obs.execErr != nil) != (res.ExecutionError != nil) {
				t.Errorf("execution error %v for %v", res.ExecutionError, tc.obs.execErr)
			}
			if len(tc.obs.changes) > 0 && tc.obs.changes[0].Decision != "" {
				t.Errorf("judge changed its input: %+v", tc.obs.changes[0])
			}
		})
	}
}

func codes(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Code)
	}
	return out
}
