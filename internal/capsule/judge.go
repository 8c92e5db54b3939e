package capsule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/redact"
)

// observation is everything a run observed that its verdict depends on:
// what Run hands to judge once the command has run and the capsule's
// files but the result are written.
type observation struct {
	runID   string
	cmdDec  CommandDecision
	blocked bool  // the policy denied the command
	execErr error // why the command did not run or could not be waited for
	// changes are the classified changes (decisions not yet taken); before
	// and after map their paths to the manifest entries.
	changes       []Change
	before, after map[string]*ManifestEntry
	// verified holds the backup objects verified and linked; tamperedObjects
	// those that changed during the run.
	verified        map[string]bool
	tamperedObjects []string
	rt              *Runtime
	// tamperedFiles are capsule files changed on disk while the command ran.
	tamperedFiles []string
	// movedFrom and movedTo are set when the command moved the capsule
	// directory or replaced it.
	movedFrom, movedTo string
}

// judge decides a run's verdict from what it observed: each change's
// decision and recovery, the warnings, the limit violations, the safety
// outcome, the blast radius and the status. It does no I/O.
func judge(obs observation, pol *Policy) *Result {
	rt := obs.rt
	changes := slices.Clone(obs.changes)
	for i := range changes {
		c := &changes[i]
		d := pol.DecidePath(c.Path)
		c.Decision, c.Provenance = d.Decision, d.Provenance
		c.Recovery = recoveryFor(*c, obs.before[c.Path], obs.after[c.Path], obs.verified)
	}
	written := bytesWritten(changes, obs.after)
	violations := checkLimits(pol.Limits, changes, written, time.Duration(rt.DurationMS)*time.Millisecond)
	warnings, machine := runWarnings(obs, changes, pol.Backups)
	nTamper := len(obs.tamperedFiles) + len(obs.tamperedObjects)
	if obs.movedTo != "" {
		nTamper++
	}
	outcome := Allow
	if obs.cmdDec.Decision == Review {
		outcome = Review
	}
	for _, c := range changes {
		outcome = Stronger(outcome, c.Decision)
	}
	if len(violations) > 0 || nTamper > 0 {
		outcome = Deny
	}
	if changes == nil {
		changes = []Change{}
	}
	res := &Result{
		SchemaVersion: SchemaVersion, RunID: obs.runID, SafetyOutcome: outcome, CommandDecision: obs.cmdDec,
		Changes: changes, LimitViolations: violations, ObservationWarnings: warnings, MachineObservations: machine,
		BlastRadius: blastRadius(changes, written, len(violations), len(rt.Cleanup.Descendants), len(rt.Ports.GroupListeners), nTamper),
		Runtime: RuntimeSummary{Launched: rt.Launched, Exit: rt.Exit, DurationMS: rt.DurationMS,
			Descendants: len(rt.Cleanup.Descendants), PortsOpened: rt.Ports.Opened, PortsClosed: rt.Ports.Closed},
	}
	if obs.execErr != nil {
		msg, _ := redact.String(obs.execErr.Error())
		res.ExecutionError = &msg
	}
	res.Status = finalStatus(obs.blocked, obs.execErr, rt.Exit, outcome, len(warnings))
	setRawPaths(res.Changes)
	return res
}

// runWarnings returns the observation warnings of a run, in their fixed
// order, and the machine-wide observations not attributed to the command.
func runWarnings(obs observation, changes []Change, bounds BackupBounds) (warnings, machine []Warning) {
	rt := obs.rt
	warnings = append([]Warning{}, unbackedWarnings(changes, obs.before, bounds)...)
	if len(obs.tamperedObjects) > 0 {
		warnings = append(warnings, Warning{Code: "capsule_tampered", Message: fmt.Sprintf("%d before-state backup objects changed during the run; their paths have no recovery evidence", len(obs.tamperedObjects))})
	}
	if rt.Cleanup != nil && len(rt.Cleanup.Descendants) > 0 {
		warnings = append(warnings, Warning{Code: "descendants_killed", Message: fmt.Sprintf("%d processes in the command's process group were still running and were killed", len(rt.Cleanup.Descendants))})
	}
	if rt.Cleanup != nil && rt.Cleanup.Remaining > 0 {
		warnings = append(warnings, Warning{Code: "descendants_remaining", Message: fmt.Sprintf("%d processes of the command's process group survived cleanup", rt.Cleanup.Remaining)})
	}
	// Only the sockets the command's own process group held are the
	// command's: they warn and count in the blast radius. The others are
	// machine-wide point-in-time observations (seed 001), reported without
	// raising either.
	if len(rt.Ports.GroupListeners) > 0 {
		var held []string
		for _, g := range rt.Ports.GroupListeners {
			held = append(held, fmt.Sprintf("%s (pid %d %s)", g.Addr, g.PID, g.Comm))
		}
		warnings = append(warnings, Warning{Code: "listening_ports_opened", Message: "the command's process group held listening TCP sockets during the run: " + strings.Join(held, ", ")})
	}
	if others := portsOutsideGroup(rt.Ports); len(others) > 0 {
		machine = append(machine, Warning{Code: "listening_ports_opened_elsewhere", Message: "listening TCP sockets appeared on the machine during the run, not held by the command's process group (machine-wide, not attributed): " + strings.Join(others, ", ")})
	}
	if rt.Cancelled {
		warnings = append(warnings, Warning{Code: "cancelled", Message: "agentdiff was interrupted while the command ran and killed its process group"})
	}
	if rt.Ports.Error != "" {
		warnings = append(warnings, Warning{Code: "port_observation_incomplete", Message: rt.Ports.Error})
	}
	if len(obs.tamperedFiles) > 0 {
		warnings = append(warnings, Warning{Code: "capsule_tampered", Message: "capsule files changed on disk while the command ran: " + strings.Join(obs.tamperedFiles, ", ") + "; the seal covers what agentdiff wrote, so verify reports them"})
	}
	if obs.movedTo != "" {
		warnings = append(warnings, Warning{Code: "capsule_moved", Message: fmt.Sprintf("the capsule directory %s was moved or replaced during the run; agentdiff kept writing to it and sealed it at %s", obs.movedFrom, obs.movedTo)})
	}
	return warnings, machine
}
