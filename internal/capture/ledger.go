package capture

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// The ledger is the private, per-spool identity and sequence state of
// capture, kept beside the session records under
// <config>/capture-ledger/<hash of the spool>/ (directories 0700, files
// 0600):
//
//   - ledger.json and ledger.fast.json (see Ledger): the reserved shared
//     sequences of every target (Work, generation, canonical session) and
//     of every observed session's unassociated stream, each observed
//     session's last exact target, and the deferred outages not yet made
//     visible on the Hub;
//   - claims/<session hash>/<sha256>: the first durable claim of each
//     provider-identified occurrence (observed session, phase, provider
//     identity): its route, reserved sequence and private phase
//     fingerprint;
//   - ledger.lock: serialises ledger users (taken after the spool lock).
//
// Every reservation is covered by a durable ceiling before the record that
// uses it is appended, so a crash between the two leaves a hole, never a
// reuse.
const (
	ledgerRoot    = "capture-ledger"
	ledgerFile    = "ledger.json"
	ledgerLock    = "ledger.lock"
	claimsDir     = "claims"
	ledgerVersion = 2
	// ledgerVersionV1 is the format before streams: readable, and moved to
	// a stream of its own on first use (see BindStream).
	ledgerVersionV1 = 1
	maxLedgerBytes  = 8 << 20
	maxClaimBytes   = 16 << 10
	fingerprintSize = 64
)

// Ledger bounds. A new target beyond MaxLedgerTargets is refused (the hook
// warns and captures nothing); observed sessions beyond MaxLedgerSessions
// forget the least recently seen one (a later outage of it is then kept
// unassociated, never attributed by guess); beyond MaxClaims an identified
// occurrence is appended without a claim and with an identity_uncertain gap.
const (
	MaxLedgerTargets  = 4096
	MaxLedgerSessions = 4096
	MaxClaims         = 1 << 16
	maxOutageRuns     = 64
)

// ErrLedgerFull reports a ledger at its target bound.
var ErrLedgerFull = errors.New("capture ledger is full")

// ErrOccurrenceConflict reports a changed fact under an already claimed
// provider identity: nothing was appended.
var ErrOccurrenceConflict = errors.New("occurrence conflict")

// Associations of a route.
const (
	AssocExact        = "exact"
	AssocCopied       = "copied"
	AssocUnassociated = "unassociated"
)

// Route is where an occurrence was attributed by its first durable claim.
type Route struct {
	// Target is the exact target (AssocExact), the copied last exact target
	// of the observed session (AssocCopied), or empty.
	Target      Target `json:"target"`
	Association string `json:"association"`
	// Deferred is true when no exact target resolved: only a sanitized local
	// fact was kept.
	Deferred bool `json:"deferred,omitempty"`
	// SharedSeq is the reserved sequence in the target's stream (the
	// observed session's unassociated stream when there is no target).
	SharedSeq uint64 `json:"shared_seq"`
	// Rule is the execution rule that applied to the tool, if any.
	Rule string `json:"rule,omitempty"`
	// Source is the source binding captured for the occurrence, if any.
	Source json.RawMessage `json:"source,omitempty"`
	// Stream is the ledger stream SharedSeq was reserved in (empty on
	// claims made before streams).
	Stream string `json:"stream,omitempty"`
}

// Occurrence is the observed identity of a provider-identified occurrence.
type Occurrence struct {
	// Session is the observed native session id.
	Session string `json:"session"`
	// Phase is "pre" or "post" for a tool call, else the hook event.
	Phase string `json:"phase"`
	// Identity is the provider identity, e.g. "tool_use_id:toolu_1".
	Identity string `json:"identity"`
}

// ClaimStatus says whether an occurrence was claimed now or before.
type ClaimStatus int

// Claim outcomes.
const (
	// ClaimNew: this call made the first durable claim.
	ClaimNew ClaimStatus = iota
	// ClaimDuplicate: an earlier claim with the same fingerprint exists;
	// the original route is returned and nothing new is to be appended.
	ClaimDuplicate
	// ClaimConflict: an earlier claim with a different fingerprint exists;
	// nothing is to be appended.
	ClaimConflict
	// ClaimUnrecorded: the claim bound was reached; the occurrence is
	// treated as unidentified.
	ClaimUnrecorded
	// ClaimResumed: an earlier claim with the same fingerprint exists but
	// its append was never marked done (the process died between the claim
	// and the append): append now under the original route and sequence.
	ClaimResumed
)

func (c ClaimStatus) String() string {
	return [...]string{"new", "duplicate", "conflict", "unrecorded", "resumed"}[c]
}

type claimFile struct {
	Version     int        `json:"version"`
	Occurrence  Occurrence `json:"occurrence"`
	Fingerprint string     `json:"fingerprint"`
	Route       Route      `json:"route"`
}

type targetSeq struct {
	WorkID     string `json:"work_id"`
	Generation int64  `json:"generation"`
	Session    string `json:"session"`
	// Last is the last reserved sequence; Ceiling bounds every sequence
	// ever handed out and is raised (durably) a block at a time.
	Last    uint64 `json:"last"`
	Ceiling uint64 `json:"ceiling"`
}

// Outage is a run of deferred occurrences of one observed session that
// copied an exact target and are not yet visible on the Hub.
type Outage struct {
	Observed string `json:"observed"`
	Target   Target `json:"target"`
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	// Stream is the stream the range was reserved in (empty: before
	// streams).
	Stream string `json:"stream,omitempty"`
}

type observedState struct {
	// Target is the session's last exact authorized target.
	Target *Target `json:"target,omitempty"`
	// Unassociated is the last reserved sequence of the session's
	// unassociated stream, UnassocCeiling its durable bound.
	Unassociated   uint64 `json:"unassociated,omitempty"`
	UnassocCeiling uint64 `json:"unassociated_ceiling,omitempty"`
	// Attributed is true once an event of the session reached an exact
	// target.
	Attributed bool `json:"attributed,omitempty"`
	// Seen orders sessions for eviction.
	Seen uint64 `json:"seen"`
}

type ledgerState struct {
	Version int    `json:"version"`
	Tick    uint64 `json:"tick"`
	// Stream is the identity space of every target sequence below: the
	// spool's observation scope and a random epoch of this ledger
	// ("obs_<32 hex>.<16 hex>"). A new ledger (a new spool, a re-enable, a
	// second worktree, a lost ledger) starts a new stream whose target
	// sequences start at 1; records, envelope identities and the Hub's
	// sequence key carry it, so no two streams ever collide.
	Stream string `json:"stream,omitempty"`
	// Floor is where every new target stream started in a version 1
	// ledger (before streams); a ledger moved to a stream resets it to 0
	// and never raises it again. Kept for reading old ledgers.
	Floor uint64 `json:"floor,omitempty"`
	// Gen counts writes; BootID is the kernel boot the fast copy was
	// written in.
	Gen      uint64                    `json:"gen"`
	BootID   string                    `json:"boot_id,omitempty"`
	Targets  []*targetSeq              `json:"targets"`
	Sessions map[string]*observedState `json:"sessions"`
	Outages  []Outage                  `json:"outages,omitempty"`
	Claims   int64                     `json:"claims"`
	// Refusals are the envelopes the Hub permanently refused (refused.go),
	// the oldest beyond maxRefusals counted in RefusalsOmitted.
	Refusals        []binding.Refusal `json:"refusals,omitempty"`
	RefusalsOmitted int64             `json:"refusals_omitted,omitempty"`
}

// Ledger is an open, locked ledger of one spool.
//
// Its state has two copies. ledger.json is written durably (fsync) when
// something must survive a machine crash: a raised sequence ceiling, a new
// target, a session's exact target, an outage, the floor. ledger.fast.json
// is the same state written on every change without fsync (atomic rename
// only), stamped with the kernel boot id. A reader in the same boot sees
// every completed write, so it trusts the fast copy; after a reboot (or if
// the fast copy is unreadable) it falls back to the durable copy and moves
// every stream to its ceiling, turning the sequences that may have been
// handed out since into holes. Sequences are reserved a block at a time,
// so an ordinary reservation costs no fsync while no number is ever reused.
type Ledger struct {
	dir       string
	lock      *fsutil.Lock
	st        ledgerState
	dirty     bool // the fast copy must be written
	durable   bool // the durable copy must be written
	fresh     bool
	boot      string
	failpoint string
	// admitting is the admission mark of the intake file being admitted
	// (admitmark.go), nil outside an intake admission; markFile is the
	// mark's file, opened on its first write and closed by Close.
	admitting *admitMark
	markFile  *os.File
}

// seqBlock is how many sequences one durable ceiling raise reserves.
const seqBlock = 32

const ledgerFastFile = "ledger.fast.json"

// bootID is the kernel's boot id, or "" where there is none (then the
// fast copy is never trusted across processes and every reservation is
// durable).
func bootID() string {
	b, err := fsutil.ReadFileNoFollow("/proc/sys/kernel/random/boot_id", 128)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Fresh reports whether the ledger did not exist on disk when opened.
func (l *Ledger) Fresh() bool { return l.fresh }

// Stream returns the ledger's current stream ("" before BindStream).
func (l *Ledger) Stream() string { return l.st.Stream }

// BindStream returns the ledger's stream for the spool whose observation
// scope is scope, starting a new one when the ledger has none (it is new,
// or was written before streams) or has one of another scope (a spool
// recreated at the same path). A new stream restarts every target
// sequence at 1 (target sequences are per stream on the Hub) with floor
// 0: records already in the spool, imported local-only ones included,
// belong to other streams and never raise it. Unassociated counters, the
// observed sessions' targets and pending outages (which name their own
// stream) are kept. Flush makes it durable before any number of it is
// used.
func (l *Ledger) BindStream(scope string) (string, error) {
	if scope == "" {
		return "", errors.New("capture ledger: the spool has no observation scope")
	}
	if strings.HasPrefix(l.st.Stream, scope+".") {
		return l.st.Stream, nil
	}
	var epoch [8]byte
	if _, err := rand.Read(epoch[:]); err != nil {
		return "", fmt.Errorf("capture ledger: %w", err)
	}
	l.st.Stream = scope + "." + hex.EncodeToString(epoch[:])
	l.st.Targets, l.st.Floor = nil, 0
	l.st.Version = ledgerVersion
	l.dirty, l.durable = true, true
	return l.st.Stream, nil
}

// appendInStream appends rec in exactly the stream it names, "" being
// the Hub's legacy stream: a record whose sequence a version 1 ledger
// reserved (a claim made before streams and appended only now, an outage
// recorded before streams, the hub_refused gap of a refused legacy
// record) keeps its old number in the stream that number belongs to, so
// it can neither take a number of the ledger's new stream
// (sequence_taken) nor name a hole there that does not exist. The
// Session's own stream (SetStream) is restored afterwards.
func appendInStream(ss *spool.Tx, led *Ledger, rec *event.Record) (uint64, error) {
	if rec.Stream != "" || led == nil || led.Stream() == "" {
		return ss.Append(rec)
	}
	ss.SetStream("")
	defer ss.SetStream(led.Stream())
	return ss.Append(rec)
}

// ledgerDir is the ledger directory of a spool. It is a sibling tree of
// the session records, so no session id can name a ledger file.
func (s StateDir) ledgerDir(spoolDir string) string {
	sum := sha256.Sum256([]byte(spoolDir))
	return filepath.Join(s.Dir, ledgerRoot, hex.EncodeToString(sum[:8]))
}

// OpenLedger locks and reads the ledger of spoolDir, creating it when
// missing. Callers that also hold the spool lock take it first. Close
// releases the lock.
func (s StateDir) OpenLedger(spoolDir string) (*Ledger, error) {
	dir := s.ledgerDir(spoolDir)
	if err := fsutil.MkdirPrivate(dir); err != nil {
		return nil, err
	}
	if err := fsutil.CheckPrivateDir(dir); err != nil {
		return nil, fmt.Errorf("capture ledger: %w", err)
	}
	lk, err := fsutil.LockFile(filepath.Join(dir, ledgerLock))
	if err != nil {
		return nil, err
	}
	l := &Ledger{dir: dir, lock: lk, boot: bootID(), failpoint: os.Getenv(spool.FailpointEnv)}
	b, err := fsutil.ReadFileNoFollow(filepath.Join(dir, ledgerFile), maxLedgerBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.st = ledgerState{Version: ledgerVersion}
		l.fresh, l.dirty, l.durable = true, true, true
	case err != nil:
		lk.Unlock()
		return nil, fmt.Errorf("capture ledger: %w", err)
	default:
		if err := decodeLedger(b, &l.st); err != nil {
			lk.Unlock()
			return nil, fmt.Errorf("capture ledger %s is unreadable (%v); nothing captured", filepath.Join(dir, ledgerFile), err)
		}
		var fast ledgerState
		fb, ferr := fsutil.ReadFileNoFollow(filepath.Join(dir, ledgerFastFile), maxLedgerBytes)
		if ferr == nil && l.boot != "" && decodeLedger(fb, &fast) == nil && fast.BootID == l.boot && fast.Gen >= l.st.Gen {
			l.st = fast
		} else {
			// Another boot (or no usable fast copy): anything up to the
			// durable ceilings may have been handed out.
			for _, ts := range l.st.Targets {
				ts.Last = max(ts.Last, ts.Ceiling)
			}
			for _, o := range l.st.Sessions {
				o.Unassociated = max(o.Unassociated, o.UnassocCeiling)
			}
			l.dirty = true
		}
	}
	if l.st.Sessions == nil {
		l.st.Sessions = map[string]*observedState{}
	}
	return l, nil
}

func decodeLedger(b []byte, st *ledgerState) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(st); err != nil {
		return err
	}
	if st.Version != ledgerVersion && st.Version != ledgerVersionV1 {
		return fmt.Errorf("version %d", st.Version)
	}
	return nil
}

// Close releases the ledger lock. Unflushed changes are dropped.
func (l *Ledger) Close() error {
	if l == nil {
		return nil
	}
	if l.markFile != nil {
		l.markFile.Close()
		l.markFile = nil
	}
	return l.lock.Unlock()
}

// Flush writes the ledger state when it changed: the durable copy (fsync)
// when a ceiling, target, session target, outage or the floor changed,
// and always the same-boot fast copy. Without a boot id every flush is
// durable.
func (l *Ledger) Flush() error {
	if !l.dirty && !l.durable {
		return nil
	}
	l.st.Gen++
	l.st.BootID = l.boot
	b, err := json.Marshal(&l.st)
	if err != nil {
		return err
	}
	if len(b) > maxLedgerBytes {
		return fmt.Errorf("%w: %d bytes", ErrLedgerFull, len(b))
	}
	if l.durable || l.boot == "" {
		if err := fsutil.WriteAtomic(filepath.Join(l.dir, ledgerFile), b, fsutil.FileMode); err != nil {
			return fmt.Errorf("capture ledger: %w", err)
		}
	}
	if l.boot != "" {
		if err := writeFast(filepath.Join(l.dir, ledgerFastFile), b); err != nil {
			return fmt.Errorf("capture ledger: %w", err)
		}
	}
	l.dirty, l.durable = false, false
	return nil
}

// writeFast replaces path with data through a temporary file and a rename,
// without fsync: visible to every later reader in this boot, not promised
// to survive a machine crash.
func writeFast(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (l *Ledger) session(observed string) *observedState {
	o := l.st.Sessions[observed]
	if o == nil {
		if len(l.st.Sessions) >= MaxLedgerSessions {
			l.evictSession()
		}
		o = &observedState{}
		l.st.Sessions[observed] = o
	}
	l.st.Tick++
	o.Seen = l.st.Tick
	l.dirty = true
	return o
}

// evictSession forgets the least recently seen session that has no
// pending outage.
func (l *Ledger) evictSession() {
	pending := map[string]bool{}
	for _, o := range l.st.Outages {
		pending[o.Observed] = true
	}
	var oldest string
	var seen uint64
	for k, o := range l.st.Sessions {
		if !pending[k] && (oldest == "" || o.Seen < seen) {
			oldest, seen = k, o.Seen
		}
	}
	if oldest != "" {
		delete(l.st.Sessions, oldest)
	}
}

// LastTarget returns the last exact target of an observed session.
func (l *Ledger) LastTarget(observed string) (Target, bool) {
	o := l.st.Sessions[observed]
	if o == nil || o.Target == nil {
		return Target{}, false
	}
	return *o.Target, true
}

// Attributed reports whether an event of the observed session reached an
// exact target, and whether the session has unassociated deferred facts.
func (l *Ledger) Attributed(observed string) (attributed, unassociated bool) {
	o := l.st.Sessions[observed]
	if o == nil {
		return false, false
	}
	return o.Attributed, o.Unassociated > 0
}

// SetExact records t as the observed session's last exact target.
func (l *Ledger) SetExact(observed string, t Target) {
	o := l.session(observed)
	if o.Target == nil || *o.Target != t || !o.Attributed {
		o.Target = &t
		o.Attributed = true
		l.durable = true
	}
}

// RouteFor returns the route of an occurrence of the observed session given
// the current resolution: the exact target, else a deferred copy of t when
// the caller names one (the session's target when the hook received the
// event, which the Hub no longer accepts), else a deferred copy of the
// session's last exact target, else an unassociated deferred route. No
// sequence is reserved.
func (l *Ledger) RouteFor(observed string, t Target, resolved bool) Route {
	if resolved {
		return Route{Target: t, Association: AssocExact}
	}
	if t.WorkID != "" {
		return Route{Target: t, Association: AssocCopied, Deferred: true}
	}
	if last, ok := l.LastTarget(observed); ok {
		return Route{Target: last, Association: AssocCopied, Deferred: true}
	}
	return Route{Association: AssocUnassociated, Deferred: true}
}

// Reserve reserves the next shared sequence of r's stream in memory and
// records a copied route's outage; Flush makes it durable.
func (l *Ledger) Reserve(observed string, r *Route) error {
	if l.st.Stream == "" {
		return errors.New("capture ledger: no stream bound (BindStream); nothing reserved")
	}
	if r.Association == AssocUnassociated {
		o := l.session(observed)
		o.Unassociated++
		if o.Unassociated > o.UnassocCeiling {
			o.UnassocCeiling = o.Unassociated + seqBlock - 1
			l.durable = true
		}
		r.SharedSeq = o.Unassociated
		r.Stream = l.st.Stream
		return nil
	}
	ts := l.target(r.Target)
	if ts == nil {
		if len(l.st.Targets) >= MaxLedgerTargets {
			return fmt.Errorf("%w: %d targets", ErrLedgerFull, len(l.st.Targets))
		}
		ts = &targetSeq{WorkID: r.Target.WorkID, Generation: r.Target.Generation, Session: r.Target.Session, Last: l.st.Floor, Ceiling: l.st.Floor}
		l.st.Targets = append(l.st.Targets, ts)
		sort.Slice(l.st.Targets, func(i, j int) bool { return targetLess(l.st.Targets[i], l.st.Targets[j]) })
	}
	ts.Last++
	if ts.Last > ts.Ceiling {
		ts.Ceiling = ts.Last + seqBlock - 1
		l.durable = true
	}
	r.SharedSeq = ts.Last
	r.Stream = l.st.Stream
	l.dirty = true
	if r.Association == AssocCopied {
		l.addOutage(observed, r.Target, r.SharedSeq)
	}
	return nil
}

// ReserveRange reserves n consecutive sequences of target t's stream in
// memory (Flush makes them durable) and returns the range, for records that
// were lost before any sequence was reserved for them (publishLost): the
// holes the Hub then sees are the ones their gap names. No outage is
// recorded: the caller's gap is the visibility.
func (l *Ledger) ReserveRange(t Target, n int) (from, to uint64, err error) {
	if n < 1 {
		n = 1
	}
	for i := range n {
		r := Route{Target: t, Association: AssocExact}
		if err := l.Reserve("", &r); err != nil {
			return 0, 0, err
		}
		if i == 0 {
			from = r.SharedSeq
		}
		to = r.SharedSeq
	}
	return from, to, nil
}

func targetLess(a, b *targetSeq) bool {
	if a.WorkID != b.WorkID {
		return a.WorkID < b.WorkID
	}
	if a.Generation != b.Generation {
		return a.Generation < b.Generation
	}
	return a.Session < b.Session
}

func (l *Ledger) target(t Target) *targetSeq {
	k := &targetSeq{WorkID: t.WorkID, Generation: t.Generation, Session: t.Session}
	i := sort.Search(len(l.st.Targets), func(i int) bool { return !targetLess(l.st.Targets[i], k) })
	if i < len(l.st.Targets) {
		if ts := l.st.Targets[i]; ts.WorkID == t.WorkID && ts.Generation == t.Generation && ts.Session == t.Session {
			return ts
		}
	}
	return nil
}

// LastSeq returns the last reserved sequence of a target's stream.
func (l *Ledger) LastSeq(t Target) uint64 {
	if ts := l.target(t); ts != nil {
		return ts.Last
	}
	return 0
}

func (l *Ledger) addOutage(observed string, t Target, seq uint64) {
	l.durable = true
	for i := len(l.st.Outages) - 1; i >= 0; i-- {
		o := &l.st.Outages[i]
		if o.Observed == observed && o.Target == t && o.Stream == l.st.Stream && o.To+1 == seq {
			o.To = seq
			return
		}
	}
	if len(l.st.Outages) >= maxOutageRuns {
		// Bounded: widen the oldest run of the same target instead (a gap
		// that covers more than the outage, never less).
		for i := range l.st.Outages {
			if o := &l.st.Outages[i]; o.Target == t && o.Stream == l.st.Stream {
				o.From, o.To = min(o.From, seq), max(o.To, seq)
				return
			}
		}
	}
	l.st.Outages = append(l.st.Outages, Outage{Observed: observed, Target: t, From: seq, To: seq, Stream: l.st.Stream})
}

// Outages returns the deferred outages not yet made visible.
func (l *Ledger) Outages() []Outage { return append([]Outage(nil), l.st.Outages...) }

// ClearOutages forgets the given outages once their visibility is durable.
func (l *Ledger) ClearOutages(done []Outage) {
	if len(done) == 0 {
		return
	}
	keep := l.st.Outages[:0]
	for _, o := range l.st.Outages {
		found := false
		for _, d := range done {
			if o == d {
				found = true
				break
			}
		}
		if !found {
			keep = append(keep, o)
		}
	}
	l.st.Outages = keep
	l.dirty, l.durable = true, true
}

// claimPath names a claim: one directory per observed session (created
// once per session), one file per occurrence.
func (l *Ledger) claimPath(occ Occurrence) string {
	b, _ := json.Marshal([]string{"agentscm-claim-v1", occ.Session, occ.Phase, occ.Identity})
	sum := sha256.Sum256(b)
	ss := sha256.Sum256([]byte(occ.Session))
	return filepath.Join(l.dir, claimsDir, hex.EncodeToString(ss[:8]), hex.EncodeToString(sum[:]))
}

// Lookup returns the retained claim of an occurrence, if any.
func (l *Ledger) Lookup(occ Occurrence) (Route, string, bool, error) {
	b, err := fsutil.ReadFileNoFollow(l.claimPath(occ), maxClaimBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Route{}, "", false, nil
	}
	if err != nil {
		return Route{}, "", false, fmt.Errorf("occurrence claim: %w", err)
	}
	var c claimFile
	if err := json.Unmarshal(b, &c); err != nil || c.Occurrence != occ || len(c.Fingerprint) != fingerprintSize {
		return Route{}, "", false, fmt.Errorf("occurrence claim %s is malformed; nothing captured", l.claimPath(occ))
	}
	return c.Route, c.Fingerprint, true, nil
}

// Claim makes or checks the first durable claim of a provider-identified
// occurrence. When the occurrence was claimed before it returns the
// original route: ClaimDuplicate when fingerprint matches, ClaimConflict
// when it differs (append nothing in both cases). Otherwise it reserves
// route's sequence, flushes the ledger, then durably writes the claim
// before returning ClaimNew, so the claim precedes any target-scoped
// mutation. At the claim bound it reserves the sequence without a claim and
// returns ClaimUnrecorded.
func (l *Ledger) Claim(occ Occurrence, fingerprint string, route Route) (Route, ClaimStatus, error) {
	if len(fingerprint) != fingerprintSize {
		return Route{}, 0, errors.New("claim: fingerprint must be 64 hex")
	}
	prev, fp, ok, err := l.Lookup(occ)
	if err != nil {
		return Route{}, 0, err
	}
	if ok {
		if fp != fingerprint {
			return prev, ClaimConflict, nil
		}
		if _, err := os.Lstat(l.claimPath(occ) + appendedSuffix); err == nil {
			return prev, ClaimDuplicate, nil
		}
		return prev, ClaimResumed, nil
	}
	if err := l.Reserve(occ.Session, &route); err != nil {
		return Route{}, 0, err
	}
	if l.st.Claims >= MaxClaims {
		return route, ClaimUnrecorded, l.Flush()
	}
	l.st.Claims++
	if err := l.Flush(); err != nil {
		return Route{}, 0, err
	}
	p := l.claimPath(occ)
	if err := fsutil.MkdirPrivate(filepath.Dir(p)); err != nil {
		return Route{}, 0, err
	}
	b, _ := json.Marshal(claimFile{Version: 1, Occurrence: occ, Fingerprint: fingerprint, Route: route})
	if err := fsutil.WriteNew(p, b, fsutil.FileMode); err != nil {
		// The reservation is durable; without the claim the sequence stays
		// an honest hole.
		return Route{}, 0, fmt.Errorf("occurrence claim: %w", err)
	}
	l.fail("capture.claimed")
	return route, ClaimNew, nil
}

// appendedSuffix names the marker written once a claimed occurrence's
// record was appended. It is not fsynced: if a crash loses it, a retry
// appends the same record under the same route and sequence again, which
// the Hub answers as a duplicate.
const appendedSuffix = ".appended"

// MarkAppended records that a claimed occurrence's record was appended,
// at spool sequence seq (the marker's content, so that a duplicate can
// still order the action start a crash cut off: appendedSeq). Markers
// written before they held the sequence are empty.
func (l *Ledger) MarkAppended(occ Occurrence, seq uint64) error {
	f, err := os.OpenFile(l.claimPath(occ)+appendedSuffix, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, fsutil.FileMode)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("occurrence claim marker: %w", err)
	}
	if seq != 0 {
		if _, err := f.WriteString(strconv.FormatUint(seq, 10)); err != nil {
			f.Close()
			return fmt.Errorf("occurrence claim marker: %w", err)
		}
	}
	return f.Close()
}

// appendedSeq is the spool sequence an appended claim's marker holds (0:
// unknown, a marker written before markers held it).
func (l *Ledger) appendedSeq(occ Occurrence) uint64 {
	b, err := fsutil.ReadFileNoFollow(l.claimPath(occ)+appendedSuffix, 32)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// fail is a crash failpoint, inert unless AGENTSCM_SPOOL_FAILPOINT names
// it: "capture.reserved" (after a bare reservation is durable) and
// "capture.claimed" (after a claim is durable) kill the process there.
func (l *Ledger) fail(name string) {
	if l.failpoint == "" {
		return
	}
	for _, fp := range strings.Split(l.failpoint, ",") {
		if fp == name {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
