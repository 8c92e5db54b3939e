package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// An intake file that cannot be decoded (torn by a bad disk, written by
// a newer hook, tampered with) is moved into the spool's quarantine like
// any file whose admission failed, and its loss is named: a
// capture_interrupted gap (reason admission_failed) under
//
//   - the target the file says the session had at receipt
//     (target_at_receipt), when that much of it can be read;
//   - else the observed session's last exact target in the capture
//     ledger, when the file names its session and the session had one;
//   - else the observed session's own unassociated stream (a local fact:
//     the session never reached an exact target), or, when not even the
//     session can be read, a local gap without a session.
//
// The gap's detail says which. The loss is noted in the interrupted slot
// (lost.go) before the file leaves the intake, and the slot's next
// publication (the same lock holder, before its next admission) reserves
// a sequence in the target's stream for it, so the Hub sees the hole and
// the gap covering it. A crash between the note and the quarantine notes
// it again: the gap then covers more than the loss, never less.

// undecodableFacts is what can still be read from an undecodable file.
type undecodableFacts struct {
	observed  string
	atReceipt *receiptTarget
	received  time.Time
}

// readUndecodable reads the session and the target at receipt of a file
// that does not decode as an intake record: by whole decoding when it is
// valid JSON of another shape, else by decoding the values that follow
// the keys where they stand (a torn tail leaves its head readable).
func readUndecodable(data []byte) undecodableFacts {
	var u undecodableFacts
	var loose struct {
		Observed   string         `json:"observed"`
		AtReceipt  *receiptTarget `json:"target_at_receipt"`
		ReceivedAt time.Time      `json:"received_at"`
	}
	if json.Unmarshal(data, &loose) == nil {
		u.observed, u.atReceipt, u.received = loose.Observed, loose.AtReceipt, loose.ReceivedAt
		return u
	}
	valueAfter(data, "observed", &u.observed)
	var rt receiptTarget
	if valueAfter(data, "target_at_receipt", &rt) {
		u.atReceipt = &rt
	}
	valueAfter(data, "received_at", &u.received)
	return u
}

// valueAfter decodes into v the JSON value following the first
// `"key":` of data.
func valueAfter(data []byte, key string, v any) bool {
	i := bytes.Index(data, []byte(`"`+key+`":`))
	if i < 0 {
		return false
	}
	return json.NewDecoder(bytes.NewReader(data[i+len(key)+3:])).Decode(v) == nil
}

// quarantineUndecodable notes the loss of the undecodable intake file
// name, quarantines it and publishes the note's gap at once.
func quarantineUndecodable(dir string, led *Ledger, ss *spool.Tx, name string, data []byte, cause error, now time.Time) error {
	u := readUndecodable(data)
	at := u.received
	if at.IsZero() {
		at = now
	}
	t, known := u.atReceipt.target()
	under := "the target the file recorded at receipt"
	if !known && u.observed != "" {
		if t, known = led.LastTarget(u.observed); known {
			under = "the session's last exact target (the file's was unreadable)"
		}
	}
	if !known {
		under = "the session's unassociated stream (no target known): local"
		if u.observed == "" {
			under = "no session (none readable): local"
		}
	}
	rec := &event.Record{Agent: claude.AgentName, SessionID: u.observed, Kind: event.KindGap}
	// Which target first: the slot keeps 200 bytes of a detail.
	detail := fmt.Sprintf("named under %s; intake file %s undecodable, in the spool's quarantine (%v)", under, name, cause)
	_ = ensureLostSlot(dir) // best effort: noteLost says when it is missing
	if err := noteLost(dir, rec, u.observed, t, known, GapReasonAdmissionFailed, detail, at); err != nil {
		return fmt.Errorf("note the loss of the undecodable intake file %s: %w", name, err)
	}
	if err := ss.QuarantineIntake(name); err != nil {
		return err
	}
	if _, err := publishLost(dir, ss, led, now); err != nil {
		return fmt.Errorf("intake %s quarantined; publishing its admission_failed gap failed (it stays noted): %w", name, err)
	}
	return nil
}
