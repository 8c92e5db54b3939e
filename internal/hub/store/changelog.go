package store

import "github.com/agentscm/agentscm/internal/hub/api"

func (t *sqliteTx) ChangelogGrant(workID string) (api.Grant, error) {
	var g api.Grant
	err := t.row("SELECT max_objects,max_bytes FROM changelog_grants WHERE work_id=?", []any{workID}, &g.MaxObjects, &g.MaxBytes)
	return g, err
}

func (t *sqliteTx) SetChangelogGrant(workID string, g api.Grant, at int64) error {
	return t.exec(`INSERT INTO changelog_grants(work_id,max_objects,max_bytes,updated_at) VALUES(?,?,?,?)
		ON CONFLICT(work_id) DO UPDATE SET max_objects=excluded.max_objects, max_bytes=excluded.max_bytes, updated_at=excluded.updated_at`,
		workID, g.MaxObjects, g.MaxBytes, at)
}

func (t *sqliteTx) ChangelogUsage(workID string) (api.GrantUsage, error) {
	var u api.GrantUsage
	const from = "FROM changelog_increments WHERE work_id=?"
	if err := t.row("SELECT count(*) "+from, []any{workID}, &u.Objects); err != nil {
		return u, err
	}
	// Sizes are bounded at upload, so the sum is exact; a sum that would
	// overflow (only data written around the Hub) is capped, which refuses
	// every further upload of the Work, instead of failing.
	sums, _, err := t.saturatingSums(from, []any{workID}, "size")
	if err != nil {
		return u, err
	}
	u.Bytes = max(sums[0], 0)
	return u, nil
}

func (t *sqliteTx) ChangelogLast(workID, worktreeID string) (int, error) {
	var last int
	err := t.row("SELECT coalesce(max(position),-1) FROM changelog_increments WHERE work_id=? AND worktree_id=?", []any{workID, worktreeID}, &last)
	return last, err
}

const incrementCols = "work_id,position,digest,size,session,generation,worktree_id,kind,tool,failed,stored_at"

func scanIncrement(sc interface{ Scan(...any) error }) (Increment, error) {
	var i Increment
	err := sc.Scan(&i.WorkID, &i.Position, &i.Digest, &i.Size, &i.Session, &i.Generation, &i.WorktreeID, &i.Kind, &i.Tool, &i.Failed, &i.StoredAt)
	return i, mapErr(err)
}

func (t *sqliteTx) ChangelogIncrement(workID, worktreeID string, position int) (Increment, error) {
	return scanIncrement(t.queryRow("SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=? AND worktree_id=? AND position=?", workID, worktreeID, position))
}

func (t *sqliteTx) ChangelogIncrements(workID string) ([]Increment, error) {
	rows, err := t.query("SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=? ORDER BY worktree_id, position", workID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Increment
	for rows.Next() {
		i, err := scanIncrement(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, rows.Err()
}

func (t *sqliteTx) PutChangelogIncrement(i Increment) error {
	return t.exec("INSERT OR REPLACE INTO changelog_increments("+incrementCols+") VALUES(?,?,?,?,?,?,?,?,?,?,?)",
		i.WorkID, i.Position, i.Digest, i.Size, i.Session, i.Generation, i.WorktreeID, i.Kind, i.Tool, b2i(i.Failed), i.StoredAt)
}

func (t *sqliteTx) IncrementDigestRefs(digest string) (int64, error) {
	var n int64
	err := t.row("SELECT count(*) FROM changelog_increments WHERE digest=?", []any{digest}, &n)
	return n, err
}
