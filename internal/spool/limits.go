package spool

import (
	"fmt"
)

// Default limits and the floor of an action-capable spool.
const (
	DefaultRecords       = 4096
	DefaultBytes         = 64 << 20
	DefaultArtifactBytes = 16 << 20
	FloorRecords         = 48
	FloorBytes           = 64 << 10
	// HeadroomRecords and HeadroomBytes are reserved for finishing started
	// actions and for recording capture_interrupted gaps: ordinary capture
	// pauses when admitting it would leave less than this.
	HeadroomRecords = 12
	HeadroomBytes   = 16 << 10
	// MaintenanceRecords and MaintenanceBytes are the part of the headroom
	// that only acknowledgement and compaction may use: finishes and gaps
	// stop before it, so a spool at its limit can always acknowledge what
	// the Hub accepted and compact it (change-capture compact, the
	// advice every quota gap gives). The last IndexReserveRecords and
	// IndexReserveBytes of it are compaction's alone: room for the new
	// index, written before the old one and the compacted files go.
	MaintenanceRecords  = 4
	MaintenanceBytes    = 8 << 10
	IndexReserveRecords = 1
	IndexReserveBytes   = 4 << 10
)

// admission classes of admitAs.
type admission int

const (
	admitOrdinary   admission = iota // events and action starts
	admitPriority                    // finishes and gaps: the headroom but its maintenance part
	admitAck                         // acknowledgement markers: all but the index reserve
	admitCompaction                  // the compaction index: the whole limit
)

// Limits are a spool's operator-configured bounds. Every admission counts
// the complete physical usage of the spool: every file (lock files, scope,
// limits, cursor, compaction index, format commit, envelopes,
// acknowledgements, artifacts, quarantine) is one record and its size in
// bytes.
type Limits struct {
	Records       int64 `json:"records"`
	Bytes         int64 `json:"bytes"`
	ArtifactBytes int64 `json:"artifact_bytes"`
	// ActiveOrders bounds the active order ledger: action starts retained
	// and not yet compacted into receipts.
	ActiveOrders int64 `json:"active_orders"`
	// ReplayEntries and ReplayBytes bound compaction's replay index.
	ReplayEntries int64 `json:"replay_entries"`
	ReplayBytes   int64 `json:"replay_bytes"`
}

// DefaultLimits returns the default bounds.
func DefaultLimits() Limits {
	return Limits{}.withDefaults()
}

func (l Limits) withDefaults() Limits {
	if l.Records == 0 {
		l.Records = DefaultRecords
	}
	if l.Bytes == 0 {
		l.Bytes = DefaultBytes
	}
	if l.ArtifactBytes == 0 {
		l.ArtifactBytes = min(DefaultArtifactBytes, l.Bytes)
	}
	if l.ActiveOrders == 0 {
		l.ActiveOrders = max(4, min(1024, l.Records/4))
	}
	if l.ReplayEntries == 0 {
		// Gap envelopes (one identity_uncertain gap per prompt), usage
		// records and managed envelopes stay whole in the replay index:
		// 8,192 entries at the default limits hold a day of them (the
		// 20,000-event soak, docs/performance.md); ReplayBytes bounds the
		// index's size as before.
		l.ReplayEntries = max(4, min(8192, l.Records*2))
	}
	if l.ReplayBytes == 0 {
		l.ReplayBytes = max(4<<10, min(8<<20, l.Bytes/8))
	}
	return l
}

// Validate refuses limits an action-capable spool cannot live with: below
// 48 records or 64 KiB the spool cannot retain the minimal managed
// lifecycle and its recovery metadata.
func (l Limits) Validate(actionCapable bool) error {
	if l.Records <= 0 || l.Bytes <= 0 || l.ArtifactBytes <= 0 || l.ActiveOrders <= 0 || l.ReplayEntries <= 0 || l.ReplayBytes <= 0 {
		return fmt.Errorf("%w: every limit must be positive", ErrBelowFloor)
	}
	if actionCapable && (l.Records < FloorRecords || l.Bytes < FloorBytes) {
		return fmt.Errorf("%w: an action-capable spool needs at least %d records and %d bytes (64 KiB), got %d records and %d bytes", ErrBelowFloor, FloorRecords, FloorBytes, l.Records, l.Bytes)
	}
	if l.ArtifactBytes > l.Bytes {
		return fmt.Errorf("%w: per-artifact limit %d exceeds the total byte limit %d", ErrBelowFloor, l.ArtifactBytes, l.Bytes)
	}
	return nil
}

// Usage is the complete physical usage of a spool.
type Usage struct {
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

// QuotaError says which bound refused an admission.
type QuotaError struct {
	Bound string // record_limit or byte_limit
	Usage Usage
	Need  Usage
	Limit Usage
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s: usage %d records/%d bytes + %d/%d needed exceeds %d records/%d bytes", e.Bound, e.Usage.Records, e.Usage.Bytes, e.Need.Records, e.Need.Bytes, e.Limit.Records, e.Limit.Bytes)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// admit checks that need fits in usage under the limits; priority
// admissions (finishes, gaps) may use the reserved headroom except its
// maintenance part.
func admit(lim Limits, use, need Usage, priority bool) error {
	if priority {
		return admitAs(lim, use, need, admitPriority)
	}
	return admitAs(lim, use, need, admitOrdinary)
}

// admitAs checks that need fits in usage under the capacity of class a.
func admitAs(lim Limits, use, need Usage, a admission) error {
	capacity := Usage{Records: lim.Records, Bytes: lim.Bytes}
	switch a {
	case admitOrdinary:
		capacity.Records -= HeadroomRecords
		capacity.Bytes -= HeadroomBytes
	case admitPriority:
		capacity.Records -= MaintenanceRecords
		capacity.Bytes -= MaintenanceBytes
	case admitAck:
		capacity.Records -= IndexReserveRecords
		capacity.Bytes -= IndexReserveBytes
	}
	if use.Records+need.Records > capacity.Records {
		return &QuotaError{Bound: "record_limit", Usage: use, Need: need, Limit: capacity}
	}
	if use.Bytes+need.Bytes > capacity.Bytes {
		return &QuotaError{Bound: "byte_limit", Usage: use, Need: need, Limit: capacity}
	}
	return nil
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits { return l.withDefaults() }
