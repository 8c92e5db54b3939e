package sqlstore

import "github.com/agentscm/agentscm/internal/hub/store"

// The statements of store.BodyTx. (CAST(? AS TEXT): PostgreSQL cannot infer
// the type of a parameter compared only with a literal.)
const (
	bodyCols         = "work_id,human_id,digest,repository_id,bytes,media_type,retention,state,generation,session,identity,declared_at,uploaded_at,expires_at,ended_at"
	qInsertBody      = "INSERT INTO bodies(" + bodyCols + ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING"
	qBody            = "SELECT " + bodyCols + " FROM bodies WHERE work_id=? AND human_id=? AND digest=?"
	qBodiesOfDigest  = "SELECT " + bodyCols + " FROM bodies WHERE work_id=? AND digest=? ORDER BY declared_at, human_id"
	qCountBodies     = "SELECT count(*) FROM bodies WHERE work_id=? AND (CAST(? AS TEXT)='' OR human_id=?)"
	qListBodies      = "SELECT " + bodyCols + " FROM bodies WHERE work_id=? AND (CAST(? AS TEXT)='' OR human_id=?) ORDER BY declared_at, human_id, digest LIMIT ?"
	qUpdateBody      = "UPDATE bodies SET state=?, retention=?, uploaded_at=?, expires_at=?, ended_at=? WHERE work_id=? AND human_id=? AND digest=?"
	qReuploadBodies  = "SELECT " + bodyCols + " FROM bodies WHERE work_id=? AND human_id=? AND state='awaiting_upload' AND uploaded_at>0 ORDER BY declared_at, digest LIMIT ?"
	qDueBodies       = "SELECT " + bodyCols + " FROM bodies WHERE state IN ('local','awaiting_upload','available') AND expires_at<=? ORDER BY expires_at, work_id, human_id, digest LIMIT ?"
	qAvailableCopies = "SELECT count(*) FROM bodies WHERE digest=? AND state='available'"
	removalCols      = "digest,next_at,backoff,attempts,last_error"
	qPutBodyRemoval  = "INSERT INTO body_removals(" + removalCols + ") VALUES(?,?,?,?,?) ON CONFLICT(digest) DO UPDATE SET next_at=excluded.next_at, backoff=excluded.backoff, attempts=excluded.attempts, last_error=excluded.last_error"
	qBodyRemoval     = "SELECT " + removalCols + " FROM body_removals WHERE digest=?"
	qDueRemovals     = "SELECT " + removalCols + " FROM body_removals WHERE next_at<=? ORDER BY next_at, digest LIMIT ?"
	qDeleteRemoval   = "DELETE FROM body_removals WHERE digest=?"
	qAcquireLease    = "INSERT INTO leases(name,holder,expires_at) VALUES(?,?,?) ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, expires_at=excluded.expires_at WHERE leases.expires_at<=? OR leases.holder=excluded.holder"
	qLeaseHolder     = "SELECT holder FROM leases WHERE name=?"
	qReleaseLease    = "DELETE FROM leases WHERE name=? AND holder=?"
)

// bodyDest returns scan destinations of b in bodyCols order.
func bodyDest(b *store.Body) []any {
	return []any{&b.WorkID, &b.HumanID, &b.Digest, &b.RepositoryID, &b.Bytes, &b.MediaType, &b.Retention, &b.State, &b.Generation, &b.Session, &b.Identity, &b.DeclaredAt, &b.UploadedAt, &b.ExpiresAt, &b.EndedAt}
}

func scanBody(r Scanner) (store.Body, error) {
	var b store.Body
	err := r.Scan(bodyDest(&b)...)
	return b, err
}

func (t *Tx) InsertBody(b store.Body) error {
	return t.insert(qInsertBody, b.WorkID, b.HumanID, b.Digest, b.RepositoryID, b.Bytes, b.MediaType, b.Retention, b.State, b.Generation,
		b.Session, b.Identity, b.DeclaredAt, b.UploadedAt, b.ExpiresAt, b.EndedAt)
}

func (t *Tx) Body(workID, humanID, digest string) (store.Body, error) {
	var b store.Body
	err := t.row(qBody, []any{workID, humanID, digest}, bodyDest(&b)...)
	return b, err
}

func (t *Tx) BodiesOfDigest(workID, digest string) ([]store.Body, error) {
	return list(t, qBodiesOfDigest, []any{workID, digest}, scanBody)
}

func (t *Tx) ListBodies(workID, humanID string, limit int) ([]store.Body, int, error) {
	var total int
	if err := t.row(qCountBodies, []any{workID, humanID, humanID}, &total); err != nil {
		return nil, 0, err
	}
	out, err := list(t, qListBodies, []any{workID, humanID, humanID, limit}, scanBody)
	return out, total, err
}

func (t *Tx) UpdateBody(b store.Body) error {
	return t.exec(qUpdateBody, b.State, b.Retention, b.UploadedAt, b.ExpiresAt, b.EndedAt, b.WorkID, b.HumanID, b.Digest)
}

func (t *Tx) ReuploadBodies(workID, humanID string, limit int) ([]store.Body, error) {
	return list(t, qReuploadBodies, []any{workID, humanID, limit}, scanBody)
}

func (t *Tx) DueBodies(now int64, limit int) ([]store.Body, error) {
	return list(t, qDueBodies, []any{now, limit}, scanBody)
}

func (t *Tx) AvailableBodyCopies(digest string) (int64, error) {
	var n int64
	err := t.row(qAvailableCopies, []any{digest}, &n)
	return n, err
}

func (t *Tx) PutBodyRemoval(r store.BodyRemoval) error {
	return t.exec(qPutBodyRemoval, r.Digest, r.NextAt, r.Backoff, r.Attempts, r.LastError)
}

func removalDest(r *store.BodyRemoval) []any {
	return []any{&r.Digest, &r.NextAt, &r.Backoff, &r.Attempts, &r.LastError}
}

func (t *Tx) BodyRemoval(digest string) (store.BodyRemoval, error) {
	var r store.BodyRemoval
	err := t.row(qBodyRemoval, []any{digest}, removalDest(&r)...)
	return r, err
}

func (t *Tx) DueBodyRemovals(now int64, limit int) ([]store.BodyRemoval, error) {
	return list(t, qDueRemovals, []any{now, limit}, func(r Scanner) (store.BodyRemoval, error) {
		var x store.BodyRemoval
		err := r.Scan(removalDest(&x)...)
		return x, err
	})
}

func (t *Tx) DeleteBodyRemoval(digest string) error { return t.exec(qDeleteRemoval, digest) }

func (t *Tx) AcquireLease(name, holder string, now, until int64) (bool, error) {
	if err := t.exec(qAcquireLease, name, holder, until, now); err != nil {
		return false, err
	}
	var h string
	if err := t.row(qLeaseHolder, []any{name}, &h); err != nil {
		return false, err
	}
	return h == holder, nil
}

func (t *Tx) ReleaseLease(name, holder string) error {
	return t.exec(qReleaseLease, name, holder)
}
