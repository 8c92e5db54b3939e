package action

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/spool"
)

// Receipt store bounds: starts per spool (each start and finish is one
// small private file) and the size of one receipt.
const (
	MaxReceipts     = 16384
	maxReceiptBytes = 64 << 10
	// ReceiptsDir is the directory under the config directory that holds
	// every spool's receipt directory.
	ReceiptsDir = "capture-actions"
	// ReceiptVersion is the version of a Receipt file.
	ReceiptVersion = 1
)

// ErrReceiptLimit reports a receipt directory that holds MaxReceipts start
// receipts (Receipts.CheckRoom).
var ErrReceiptLimit = errors.New("action receipt limit reached")

// Receipt is one retained private receipt: the canonical fact it was made
// from and the exact record appended for it.
type Receipt struct {
	Version int             `json:"version"`
	SpoolID string          `json:"spool_id"`
	Canon   json.RawMessage `json:"canon"`
	Record  event.Record    `json:"record"`
}

// Receipts is the private receipt directory of one spool:
// <config>/capture-actions/<hash of spool path and id>/. A receipt is named
// by its action id and ".s" (start) or ".f" (finish); a receipt written but
// not yet known appended carries ".pending" after that.
type Receipts struct {
	dir     string
	spoolID string
	limit   int
}

// OpenReceipts returns the receipt directory of spool sp under configDir
// (created by Ensure).
func OpenReceipts(configDir string, sp *spool.Spool) Receipts {
	sum := sha256.Sum256([]byte(sp.Dir() + "\x00" + sp.ID()))
	return Receipts{dir: filepath.Join(configDir, ReceiptsDir, hex.EncodeToString(sum[:8])), spoolID: sp.ID(), limit: MaxReceipts}
}

// Dir is the receipt directory.
func (a Receipts) Dir() string { return a.dir }

// SpoolID is the identity of the spool the receipts belong to.
func (a Receipts) SpoolID() string { return a.spoolID }

// Limit is the number of start receipts CheckRoom allows.
func (a Receipts) Limit() int { return a.limit }

// WithLimit returns a with a start receipt bound of n instead of
// MaxReceipts (tests).
func (a Receipts) WithLimit(n int) Receipts {
	a.limit = n
	return a
}

// Ensure creates the receipt directory (private) if needed and checks it.
func (a Receipts) Ensure() error {
	if err := fsutil.MkdirPrivate(a.dir); err != nil {
		return err
	}
	return fsutil.CheckPrivateDir(a.dir)
}

// Read returns the receipt name (id + ".s" or ".f"), whether it is still
// pending (appended possibly not yet), or fs.ErrNotExist.
func (a Receipts) Read(name string) (*Receipt, bool, error) {
	for _, pending := range []bool{false, true} {
		p := filepath.Join(a.dir, name)
		if pending {
			p += ".pending"
		}
		b, err := fsutil.ReadFileNoFollow(p, maxReceiptBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("action receipt %s: %w", p, err)
		}
		var r Receipt
		if err := json.Unmarshal(b, &r); err != nil || r.Version != ReceiptVersion || r.SpoolID != a.spoolID {
			return nil, false, fmt.Errorf("action receipt %s is malformed or belongs to another spool", p)
		}
		return &r, pending, nil
	}
	return nil, false, fs.ErrNotExist
}

// WritePending durably creates name.pending (no replace).
func (a Receipts) WritePending(name string, r *Receipt) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > maxReceiptBytes {
		return fmt.Errorf("action receipt of %d bytes exceeds the %d-byte bound", len(b), maxReceiptBytes)
	}
	return fsutil.WriteNew(filepath.Join(a.dir, name+".pending"), b, fsutil.FileMode)
}

// Commit marks a pending receipt as appended. The rename is not synced: if
// a crash loses it, the receipt is pending again and a retry appends the
// identical record once more, which the Hub answers as a duplicate.
func (a Receipts) Commit(name string) error {
	if err := os.Rename(filepath.Join(a.dir, name+".pending"), filepath.Join(a.dir, name)); err != nil {
		return fmt.Errorf("commit action receipt: %w", err)
	}
	return nil
}

// CheckRoom refuses a new start (ErrReceiptLimit) once the directory holds
// Limit start receipts (names ending in ".s" or ".s.pending"). It lists
// names only; hooks of one spool are serialised by the spool lock.
func (a Receipts) CheckRoom() error {
	d, err := os.Open(a.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if strings.HasSuffix(name, ".s") || strings.HasSuffix(name, ".s.pending") {
				n++
			}
		}
		if n >= a.limit {
			return ErrReceiptLimit
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// AppendReceipt appends the receipt's record in ss and commits the receipt.
func AppendReceipt(ss *spool.Tx, rs Receipts, name string, r *Receipt) error {
	rec := r.Record
	if _, err := ss.Append(&rec); err != nil {
		return fmt.Errorf("append %s: %w", rec.Kind, err)
	}
	return rs.Commit(name)
}
