package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store/sqlite"
	"github.com/jackc/pgx/v5"
)

// TableCopy is one table's outcome of a copy: its rows and the SHA-256 of
// its rows in key order, the same on both sides.
type TableCopy struct {
	Table  string `json:"table"`
	Rows   int64  `json:"rows"`
	Digest string `json:"digest"`
}

// CopyReport is what CopyFromSQLite copied and verified.
type CopyReport struct {
	Tables      []TableCopy `json:"tables"`
	Objects     int         `json:"objects"`
	ObjectBytes int64       `json:"object_bytes"`
}

// CopyFromSQLite copies the Hub in an SQLite data directory (an embedded
// or single-node Hub, which should not be running) into dst, which must be
// empty, and its increment objects from srcObj into dstObj; then it checks
// that every table has the same rows (count and digest) on both sides and
// that every object reads back under its digest.
//
// Objects go first (they are content-addressed: copying one again is
// harmless); the rows are copied from one SQLite read snapshot in one
// PostgreSQL transaction, so a failed copy leaves dst empty.
func CopyFromSQLite(ctx context.Context, dir string, dst *Store, srcObj, dstObj objects.Store) (CopyReport, error) {
	var rep CopyReport
	// Every object read or written is checked against its digest.
	srcObj, dstObj = objects.Verified(srcObj), objects.Verified(dstObj)
	// Opening the store brings an older schema up to date first.
	s, err := sqlite.Open(ctx, dir)
	if err != nil {
		return rep, fmt.Errorf("source: %w", err)
	}
	s.Close()
	src, err := sql.Open("sqlite", "file:"+(&url.URL{Path: filepath.Join(dir, sqlite.DBFile)}).EscapedPath()+
		"?mode=ro&_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		return rep, fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	stx, err := src.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return rep, fmt.Errorf("source: %w", err)
	}
	defer stx.Rollback()
	var v int
	if err := stx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return rep, fmt.Errorf("source: %w", err)
	}
	if v != SchemaVersion || sqlite.SchemaVersion != SchemaVersion {
		return rep, fmt.Errorf("source schema version %d, SQLite store %d, PostgreSQL store %d: this agentscm cannot copy it", v, sqlite.SchemaVersion, SchemaVersion)
	}
	if err := sameTables(ctx, stx); err != nil {
		return rep, err
	}
	for _, t := range Tables {
		var n int64
		if err := dst.pool.QueryRow(ctx, "SELECT count(*) FROM "+t.Name).Scan(&n); err != nil {
			return rep, fmt.Errorf("destination: %w", err)
		}
		if n != 0 {
			return rep, fmt.Errorf("destination table %s has %d rows: hub migrate copies into an empty database only", t.Name, n)
		}
	}

	// Objects first.
	// (Increments, and shared conversation bodies available on the Hub.)
	rows, err := stx.QueryContext(ctx, `SELECT digest, max(size), min(body) FROM (SELECT digest, size, 0 AS body FROM changelog_increments
		UNION ALL SELECT digest, bytes, 1 FROM bodies WHERE state='available') GROUP BY digest ORDER BY digest`)
	if err != nil {
		return rep, fmt.Errorf("source objects: %w", err)
	}
	type obj struct {
		digest string
		size   int64
		body   bool // only bodies need it
	}
	var objs []obj
	for rows.Next() {
		var o obj
		if err := rows.Scan(&o.digest, &o.size, &o.body); err != nil {
			rows.Close()
			return rep, err
		}
		objs = append(objs, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, err
	}
	for _, o := range objs {
		b, err := srcObj.Get(ctx, o.digest, o.size)
		if o.body && errors.Is(err, objects.ErrNotFound) {
			// An available body whose object is lost: the copy answers it
			// as the source would (it returns to awaiting upload on read).
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("source object %s: %w", o.digest, err)
		}
		if err := dstObj.Put(ctx, o.digest, bytes.NewReader(b), o.size); err != nil {
			return rep, fmt.Errorf("destination object %s: %w", o.digest, err)
		}
		rep.Objects++
		rep.ObjectBytes += int64(len(b))
	}

	// Rows, in one transaction.
	tx, err := dst.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return rep, fmt.Errorf("destination: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Serialize against a Hub already serving on dst: a write there fails
	// this copy instead of mixing with it.
	if _, err := tx.Exec(ctx, "LOCK TABLE "+tableNames()+" IN EXCLUSIVE MODE"); err != nil {
		return rep, fmt.Errorf("destination: %w", err)
	}
	for _, t := range Tables {
		if err := copyTable(ctx, stx, tx, t); err != nil {
			return rep, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("destination: commit: %w", err)
	}

	// Verify: rows by count and digest, objects by reading them back.
	for _, t := range Tables {
		sn, sd, err := digestSQLite(ctx, stx, t)
		if err != nil {
			return rep, fmt.Errorf("verify %s: %w", t.Name, err)
		}
		dn, dd, err := digestPostgres(ctx, dst, t)
		if err != nil {
			return rep, fmt.Errorf("verify %s: %w", t.Name, err)
		}
		if sn != dn || sd != dd {
			return rep, fmt.Errorf("verify %s: the source has %d rows (digest %s), the destination %d (digest %s)", t.Name, sn, sd, dn, dd)
		}
		rep.Tables = append(rep.Tables, TableCopy{Table: t.Name, Rows: dn, Digest: dd})
	}
	for _, o := range objs {
		if _, err := dstObj.Get(ctx, o.digest, o.size); err != nil {
			return rep, fmt.Errorf("verify object %s: %w", o.digest, err)
		}
	}
	return rep, nil
}

// sameTables refuses a source whose tables or columns are not exactly
// Tables: a copy never drops what it does not know.
func sameTables(ctx context.Context, stx *sql.Tx) error {
	rows, err := stx.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
	if err != nil {
		return fmt.Errorf("source tables: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	known := strings.Split(tableNames(), ",")
	slices.Sort(known)
	if !slices.Equal(names, known) {
		return fmt.Errorf("source tables %v are not the tables this agentscm copies %v", names, known)
	}
	for _, t := range Tables {
		rows, err := stx.QueryContext(ctx, "SELECT name FROM pragma_table_info(?) ORDER BY cid", t.Name)
		if err != nil {
			return fmt.Errorf("source columns of %s: %w", t.Name, err)
		}
		var cols []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return err
			}
			cols = append(cols, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if !slices.Equal(cols, t.Columns) {
			return fmt.Errorf("source table %s has columns %v, not %v", t.Name, cols, t.Columns)
		}
	}
	return nil
}

func tableNames() string {
	names := make([]string, len(Tables))
	for i, t := range Tables {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

func selectOrdered(t Table) string {
	return "SELECT " + strings.Join(t.Columns, ",") + " FROM " + t.Name + " ORDER BY " + strings.Join(t.Key, ",")
}

// sqliteRow scans one row of t from SQLite into PostgreSQL values: 0/1
// flags become booleans.
func sqliteRow(rows *sql.Rows, t Table) ([]any, error) {
	vals := make([]any, len(t.Columns))
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, c := range t.Columns {
		if b, ok := vals[i].([]byte); ok {
			vals[i] = string(b)
		}
		if slices.Contains(t.Bools, c) {
			n, ok := vals[i].(int64)
			if !ok || (n != 0 && n != 1) {
				return nil, fmt.Errorf("%s.%s is %v, not 0 or 1", t.Name, c, vals[i])
			}
			vals[i] = n == 1
		}
	}
	return vals, nil
}

func copyTable(ctx context.Context, stx *sql.Tx, tx pgx.Tx, t Table) error {
	rows, err := stx.QueryContext(ctx, selectOrdered(t))
	if err != nil {
		return fmt.Errorf("read %s: %w", t.Name, err)
	}
	defer rows.Close()
	_, err = tx.CopyFrom(ctx, pgx.Identifier{t.Name}, t.Columns, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		return sqliteRow(rows, t)
	}))
	if err != nil {
		return fmt.Errorf("copy %s: %w", t.Name, err)
	}
	return nil
}

// writeValue adds one value to a table digest: a type tag, then the value
// (strings length-prefixed), so that no two rows encode alike.
func writeValue(h hash.Hash, v any) error {
	switch x := v.(type) {
	case nil:
		h.Write([]byte{'n'})
	case bool:
		if x {
			h.Write([]byte{'t'})
		} else {
			h.Write([]byte{'f'})
		}
	case int64:
		h.Write([]byte("i" + strconv.FormatInt(x, 10) + ";"))
	case int32:
		h.Write([]byte("i" + strconv.FormatInt(int64(x), 10) + ";"))
	case string:
		h.Write([]byte("s" + strconv.Itoa(len(x)) + ":" + x))
	default:
		return fmt.Errorf("unexpected value %T", v)
	}
	return nil
}

func digestSQLite(ctx context.Context, stx *sql.Tx, t Table) (int64, string, error) {
	rows, err := stx.QueryContext(ctx, selectOrdered(t))
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	h := sha256.New()
	var n int64
	for rows.Next() {
		vals, err := sqliteRow(rows, t)
		if err != nil {
			return 0, "", err
		}
		for _, v := range vals {
			if err := writeValue(h, v); err != nil {
				return 0, "", err
			}
		}
		n++
	}
	return n, hex.EncodeToString(h.Sum(nil)), rows.Err()
}

func digestPostgres(ctx context.Context, s *Store, t Table) (int64, string, error) {
	rows, err := s.pool.Query(ctx, selectOrdered(t))
	if err != nil {
		return 0, "", err
	}
	defer rows.Close()
	h := sha256.New()
	var n int64
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return 0, "", err
		}
		for _, v := range vals {
			if err := writeValue(h, v); err != nil {
				return 0, "", err
			}
		}
		n++
	}
	return n, hex.EncodeToString(h.Sum(nil)), rows.Err()
}
