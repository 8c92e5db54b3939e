package sqlstore

import (
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

func (t *Tx) ChangelogGrant(workID string) (api.Grant, error) {
	var g api.Grant
	err := t.row("SELECT max_objects,max_bytes FROM changelog_grants WHERE work_id=?", []any{workID}, &g.MaxObjects, &g.MaxBytes)
	return g, err
}

func (t *Tx) SetChangelogGrant(workID string, g api.Grant, at int64) error {
	return t.exec(`INSERT INTO changelog_grants(work_id,max_objects,max_bytes,updated_at) VALUES(?,?,?,?)
		ON CONFLICT(work_id) DO UPDATE SET max_objects=excluded.max_objects, max_bytes=excluded.max_bytes, updated_at=excluded.updated_at`,
		workID, g.MaxObjects, g.MaxBytes, at)
}

func (t *Tx) ChangelogUsage(workID string) (api.GrantUsage, error) {
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

func (t *Tx) ChangelogLast(workID, worktreeID string) (int, error) {
	var last int
	err := t.row("SELECT coalesce(max(position),-1) FROM changelog_increments WHERE work_id=? AND worktree_id=?", []any{workID, worktreeID}, &last)
	return last, err
}

const incrementCols = "work_id,position,digest,size,session,generation,worktree_id,kind,tool,failed,stored_at"

func incrementDest(i *store.Increment) []any {
	return []any{&i.WorkID, &i.Position, &i.Digest, &i.Size, &i.Session, &i.Generation, &i.WorktreeID, &i.Kind, &i.Tool, &i.Failed, &i.StoredAt}
}

func (t *Tx) ChangelogIncrement(workID, worktreeID string, position int) (store.Increment, error) {
	var i store.Increment
	err := t.row("SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=? AND worktree_id=? AND position=?", []any{workID, worktreeID, position}, incrementDest(&i)...)
	return i, err
}

func (t *Tx) ChangelogIncrements(workID string) ([]store.Increment, error) {
	return list(t, "SELECT "+incrementCols+" FROM changelog_increments WHERE work_id=? ORDER BY worktree_id, position", []any{workID},
		func(r Scanner) (store.Increment, error) {
			var i store.Increment
			err := r.Scan(incrementDest(&i)...)
			return i, err
		})
}

// PutChangelogIncrement replaces the row at the key: every other column is
// set, so the upsert leaves what SQLite's INSERT OR REPLACE left.
func (t *Tx) PutChangelogIncrement(i store.Increment) error {
	return t.exec("INSERT INTO changelog_increments("+incrementCols+") VALUES(?,?,?,?,?,?,?,?,?,?,?)"+
		` ON CONFLICT(work_id,worktree_id,position) DO UPDATE SET digest=excluded.digest, size=excluded.size, session=excluded.session,
		generation=excluded.generation, kind=excluded.kind, tool=excluded.tool, failed=excluded.failed, stored_at=excluded.stored_at`,
		i.WorkID, i.Position, i.Digest, i.Size, i.Session, i.Generation, i.WorktreeID, i.Kind, i.Tool, i.Failed, i.StoredAt)
}

func (t *Tx) IncrementDigestRefs(digest string) (int64, error) {
	var n int64
	err := t.row("SELECT count(*) FROM changelog_increments WHERE digest=?", []any{digest}, &n)
	return n, err
}
