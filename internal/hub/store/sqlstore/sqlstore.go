// Package sqlstore is the Hub store's one SQL implementation of store.Tx,
// shared by the SQLite and the PostgreSQL stores. It runs its statements on
// a DB (one transaction's executor, supplied by the driver's package) and
// speaks the few differences between the two through a Dialect; it links no
// driver. The drivers' packages (store/sqlite, store/postgres) keep the
// connections, schemas, migrations and group commit.
//
// Statements are written once, with '?' placeholders, in the SQL both
// engines run (INSERT ... ON CONFLICT DO NOTHING, ON CONFLICT(...) DO UPDATE,
// NULLS FIRST); a DB for a driver that numbers its placeholders rewrites them
// (Numbered, Rebinder).
package sqlstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/agentscm/agentscm/internal/hub/store"
)

// Scanner reads the current row's columns.
type Scanner interface {
	Scan(dest ...any) error
}

// DB runs the statements of one transaction. It returns the driver's errors
// as they are (the Dialect classifies them).
type DB interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(q string, args ...any) (int64, error)
	// QueryRow runs a query and scans its first row into dest; no row is an
	// error the Dialect's IsNoRows recognises.
	QueryRow(q string, args []any, dest ...any) error
	// Query runs a query and calls each for every row, stopping at the
	// first error.
	Query(q string, args []any, each func(Scanner) error) error
}

// Dialect is what differs between the engines beyond the statements'
// shared text.
type Dialect struct {
	// NumericSums: the engine sums bigint columns exactly (as numeric), so
	// saturation is decided in one query; otherwise (SQLite) a float
	// total() probe decides which sums are exact (sums.go).
	NumericSums bool
	// IsNoRows recognises the driver's "no row" error of a QueryRow.
	IsNoRows func(error) bool
	// IsUnique recognises a unique-constraint violation.
	IsUnique func(error) bool
}

// MapErr classifies a driver error: no row is store.ErrNotFound, a unique
// violation wraps store.ErrExists; anything else is returned as it is.
func (d Dialect) MapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case d.IsNoRows != nil && d.IsNoRows(err):
		return store.ErrNotFound
	case d.IsUnique != nil && d.IsUnique(err):
		return fmt.Errorf("%w: %v", store.ErrExists, err)
	}
	return err
}

// Tx implements store.Tx on one transaction's DB.
type Tx struct {
	db DB
	d  Dialect
}

var _ store.Tx = (*Tx)(nil)

// NewTx returns the store.Tx of one transaction.
func NewTx(db DB, d Dialect) *Tx { return &Tx{db: db, d: d} }

// exec runs a statement for its effect.
func (t *Tx) exec(q string, args ...any) error {
	_, err := t.db.Exec(q, args...)
	return t.d.MapErr(err)
}

// insert runs an INSERT ... ON CONFLICT DO NOTHING: no row inserted means
// the key exists. (A failing statement aborts a PostgreSQL transaction,
// where the caller must be able to go on after ErrExists.)
func (t *Tx) insert(q string, args ...any) error {
	n, err := t.db.Exec(q, args...)
	if err != nil {
		return t.d.MapErr(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", store.ErrExists, tableOf(q))
	}
	return nil
}

// tableOf names the table of an "INSERT INTO table(...)" statement.
func tableOf(q string) string {
	if f := strings.Fields(q); len(f) > 2 {
		name, _, _ := strings.Cut(f[2], "(")
		return name
	}
	return q
}

// row runs a query and scans its one row.
func (t *Tx) row(q string, args []any, dest ...any) error {
	return t.d.MapErr(t.db.QueryRow(q, args, dest...))
}

// rows runs a query and calls each for every row.
func (t *Tx) rows(q string, args []any, each func(Scanner) error) error {
	return t.d.MapErr(t.db.Query(q, args, each))
}

// list collects the rows of a query, each read by scan.
func list[T any](t *Tx, q string, args []any, scan func(Scanner) (T, error)) ([]T, error) {
	var out []T
	err := t.rows(q, args, func(r Scanner) error {
		v, err := scan(r)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// Numbered turns '?' placeholders into $1, $2, ... (none of the shared
// statements has a '?' inside a literal). A statement without '?' is
// returned as it is.
func Numbered(q string) string {
	if !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Rebinder numbers statements' placeholders once per statement text: a
// store keeps one for its lifetime.
type Rebinder struct{ m sync.Map }

// Rebind returns Numbered(q), from the cache after the first time.
func (r *Rebinder) Rebind(q string) string {
	if v, ok := r.m.Load(q); ok {
		return v.(string)
	}
	n := Numbered(q)
	r.m.Store(q, n)
	return n
}

// nullable stores an unknown count as NULL.
func nullable(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

// ErrClosed answers Updates that arrive after a store's Close.
var ErrClosed = errors.New("hub store is closed")
