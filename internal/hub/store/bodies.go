package store

// Body is one human's declaration of a conversation body in a Work (the
// bodies table, schema version 4). Identical bodies from one author in one
// Work share the first declaration: (WorkID, HumanID, Digest) is the key.
type Body struct {
	WorkID       string
	HumanID      string
	Digest       string
	RepositoryID string
	Bytes        int64
	MediaType    string
	Retention    string
	State        string
	Generation   int64
	Session      string
	// Identity is the envelope that first declared the body.
	Identity   string
	DeclaredAt int64
	UploadedAt int64
	ExpiresAt  int64
	EndedAt    int64
}

// BodyRemoval is a pending removal of a body object: the sweep removes the
// object once no available declaration (of any Work) needs it; a failed
// removal waits Backoff seconds (1 hour, doubling to a day) from NextAt.
type BodyRemoval struct {
	Digest    string
	NextAt    int64
	Backoff   int64
	Attempts  int64
	LastError string
}

// BodyTx is the part of Tx that keeps shared conversation bodies.
type BodyTx interface {
	// InsertBody stores a declaration; ErrExists when its author already
	// declared the digest in the Work.
	InsertBody(b Body) error
	Body(workID, humanID, digest string) (Body, error)
	// BodiesOfDigest returns every author's declaration of a digest in a
	// Work.
	BodiesOfDigest(workID, digest string) ([]Body, error)
	// ListBodies returns at most limit declarations of a Work (of one human
	// unless humanID is empty) by declaration time, and the total count.
	ListBodies(workID, humanID string, limit int) ([]Body, int, error)
	// UpdateBody rewrites a declaration's state and times.
	UpdateBody(b Body) error
	// ReuploadBodies returns at most limit of a human's declarations in a
	// Work that await an upload again (their object was found missing).
	ReuploadBodies(workID, humanID string, limit int) ([]Body, error)
	// DueBodies returns at most limit live declarations (local, awaiting
	// upload or available) whose retention ended at or before now.
	DueBodies(now int64, limit int) ([]Body, error)
	// AvailableBodyCopies counts the available declarations (of any Work)
	// of a digest.
	AvailableBodyCopies(digest string) (int64, error)
	// PutBodyRemoval inserts or replaces a pending removal.
	PutBodyRemoval(r BodyRemoval) error
	BodyRemoval(digest string) (BodyRemoval, error)
	// DueBodyRemovals returns at most limit removals due at now.
	DueBodyRemovals(now int64, limit int) ([]BodyRemoval, error)
	DeleteBodyRemoval(digest string) error
	// AcquireLease takes or renews the named lease for holder until until
	// when it is free, expired at now, or already holder's; it reports
	// whether holder has it.
	AcquireLease(name, holder string, now, until int64) (bool, error)
	// ReleaseLease gives up holder's lease (no-op when another holds it).
	ReleaseLease(name, holder string) error
}

// The statements of BodyTx, shared by both stores: '?' placeholders (the
// PostgreSQL store numbers them) and SQL both dialects run.
const (
	BodyCols           = "work_id,human_id,digest,repository_id,bytes,media_type,retention,state,generation,session,identity,declared_at,uploaded_at,expires_at,ended_at"
	SQLInsertBody      = "INSERT INTO bodies(" + BodyCols + ") VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING"
	SQLBody            = "SELECT " + BodyCols + " FROM bodies WHERE work_id=? AND human_id=? AND digest=?"
	SQLBodiesOfDigest  = "SELECT " + BodyCols + " FROM bodies WHERE work_id=? AND digest=? ORDER BY declared_at, human_id"
	SQLCountBodies     = "SELECT count(*) FROM bodies WHERE work_id=? AND (?='' OR human_id=?)"
	SQLListBodies      = "SELECT " + BodyCols + " FROM bodies WHERE work_id=? AND (?='' OR human_id=?) ORDER BY declared_at, human_id, digest LIMIT ?"
	SQLUpdateBody      = "UPDATE bodies SET state=?, retention=?, uploaded_at=?, expires_at=?, ended_at=? WHERE work_id=? AND human_id=? AND digest=?"
	SQLReuploadBodies  = "SELECT " + BodyCols + " FROM bodies WHERE work_id=? AND human_id=? AND state='awaiting_upload' AND uploaded_at>0 ORDER BY declared_at, digest LIMIT ?"
	SQLDueBodies       = "SELECT " + BodyCols + " FROM bodies WHERE state IN ('local','awaiting_upload','available') AND expires_at<=? ORDER BY expires_at, work_id, human_id, digest LIMIT ?"
	SQLAvailableCopies = "SELECT count(*) FROM bodies WHERE digest=? AND state='available'"
	BodyRemovalCols    = "digest,next_at,backoff,attempts,last_error"
	SQLPutBodyRemoval  = "INSERT INTO body_removals(" + BodyRemovalCols + ") VALUES(?,?,?,?,?) ON CONFLICT(digest) DO UPDATE SET next_at=excluded.next_at, backoff=excluded.backoff, attempts=excluded.attempts, last_error=excluded.last_error"
	SQLBodyRemoval     = "SELECT " + BodyRemovalCols + " FROM body_removals WHERE digest=?"
	SQLDueRemovals     = "SELECT " + BodyRemovalCols + " FROM body_removals WHERE next_at<=? ORDER BY next_at, digest LIMIT ?"
	SQLDeleteRemoval   = "DELETE FROM body_removals WHERE digest=?"
	SQLAcquireLease    = "INSERT INTO leases(name,holder,expires_at) VALUES(?,?,?) ON CONFLICT(name) DO UPDATE SET holder=excluded.holder, expires_at=excluded.expires_at WHERE leases.expires_at<=? OR leases.holder=excluded.holder"
	SQLLeaseHolder     = "SELECT holder FROM leases WHERE name=?"
	SQLReleaseLease    = "DELETE FROM leases WHERE name=? AND holder=?"
)

// BodyArgs returns the column values of b in BodyCols order.
func BodyArgs(b Body) []any {
	return []any{b.WorkID, b.HumanID, b.Digest, b.RepositoryID, b.Bytes, b.MediaType, b.Retention, b.State, b.Generation, b.Session, b.Identity, b.DeclaredAt, b.UploadedAt, b.ExpiresAt, b.EndedAt}
}

// BodyDest returns scan destinations of b in BodyCols order.
func BodyDest(b *Body) []any {
	return []any{&b.WorkID, &b.HumanID, &b.Digest, &b.RepositoryID, &b.Bytes, &b.MediaType, &b.Retention, &b.State, &b.Generation, &b.Session, &b.Identity, &b.DeclaredAt, &b.UploadedAt, &b.ExpiresAt, &b.EndedAt}
}

// RemovalDest returns scan destinations of r in BodyRemovalCols order.
func RemovalDest(r *BodyRemoval) []any {
	return []any{&r.Digest, &r.NextAt, &r.Backoff, &r.Attempts, &r.LastError}
}

// UpdateBodyArgs returns the arguments of SQLUpdateBody.
func UpdateBodyArgs(b Body) []any {
	return []any{b.State, b.Retention, b.UploadedAt, b.ExpiresAt, b.EndedAt, b.WorkID, b.HumanID, b.Digest}
}

// bodiesSchema is schema version 4 in SQLite.
const bodiesSchema = `
CREATE TABLE IF NOT EXISTS bodies(work_id TEXT NOT NULL REFERENCES works(id), human_id TEXT NOT NULL, digest TEXT NOT NULL,
  repository_id TEXT NOT NULL, bytes INTEGER NOT NULL, media_type TEXT NOT NULL, retention TEXT NOT NULL, state TEXT NOT NULL,
  generation INTEGER NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL, declared_at INTEGER NOT NULL,
  uploaded_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, ended_at INTEGER NOT NULL,
  PRIMARY KEY(work_id, human_id, digest)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS bodies_due ON bodies(expires_at) WHERE state IN ('local','awaiting_upload','available');
CREATE INDEX IF NOT EXISTS bodies_digest ON bodies(digest, state);
CREATE TABLE IF NOT EXISTS body_removals(digest TEXT PRIMARY KEY, next_at INTEGER NOT NULL, backoff INTEGER NOT NULL,
  attempts INTEGER NOT NULL, last_error TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS body_removals_due ON body_removals(next_at);
CREATE TABLE IF NOT EXISTS leases(name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at INTEGER NOT NULL) WITHOUT ROWID;
`

func (t *sqliteTx) InsertBody(b Body) error {
	st, err := t.stmt(SQLInsertBody)
	if err != nil {
		return err
	}
	res, err := st.ExecContext(t.ctx, BodyArgs(b)...)
	if err != nil {
		return mapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return ErrExists
	}
	return nil
}

func (t *sqliteTx) Body(workID, humanID, digest string) (Body, error) {
	var b Body
	err := t.row(SQLBody, []any{workID, humanID, digest}, BodyDest(&b)...)
	return b, err
}

func (t *sqliteTx) bodies(q string, args ...any) ([]Body, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Body
	for rows.Next() {
		var b Body
		if err := rows.Scan(BodyDest(&b)...); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func (t *sqliteTx) BodiesOfDigest(workID, digest string) ([]Body, error) {
	return t.bodies(SQLBodiesOfDigest, workID, digest)
}

func (t *sqliteTx) ListBodies(workID, humanID string, limit int) ([]Body, int, error) {
	var total int
	if err := t.row(SQLCountBodies, []any{workID, humanID, humanID}, &total); err != nil {
		return nil, 0, err
	}
	out, err := t.bodies(SQLListBodies, workID, humanID, humanID, limit)
	return out, total, err
}

func (t *sqliteTx) UpdateBody(b Body) error { return t.exec(SQLUpdateBody, UpdateBodyArgs(b)...) }

func (t *sqliteTx) ReuploadBodies(workID, humanID string, limit int) ([]Body, error) {
	return t.bodies(SQLReuploadBodies, workID, humanID, limit)
}

func (t *sqliteTx) DueBodies(now int64, limit int) ([]Body, error) {
	return t.bodies(SQLDueBodies, now, limit)
}

func (t *sqliteTx) AvailableBodyCopies(digest string) (int64, error) {
	var n int64
	err := t.row(SQLAvailableCopies, []any{digest}, &n)
	return n, err
}

func (t *sqliteTx) PutBodyRemoval(r BodyRemoval) error {
	return t.exec(SQLPutBodyRemoval, r.Digest, r.NextAt, r.Backoff, r.Attempts, r.LastError)
}

func (t *sqliteTx) BodyRemoval(digest string) (BodyRemoval, error) {
	var r BodyRemoval
	err := t.row(SQLBodyRemoval, []any{digest}, RemovalDest(&r)...)
	return r, err
}

func (t *sqliteTx) DueBodyRemovals(now int64, limit int) ([]BodyRemoval, error) {
	rows, err := t.query(SQLDueRemovals, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []BodyRemoval
	for rows.Next() {
		var r BodyRemoval
		if err := rows.Scan(RemovalDest(&r)...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (t *sqliteTx) DeleteBodyRemoval(digest string) error { return t.exec(SQLDeleteRemoval, digest) }

func (t *sqliteTx) AcquireLease(name, holder string, now, until int64) (bool, error) {
	if err := t.exec(SQLAcquireLease, name, holder, until, now); err != nil {
		return false, err
	}
	var h string
	if err := t.row(SQLLeaseHolder, []any{name}, &h); err != nil {
		return false, err
	}
	return h == holder, nil
}

func (t *sqliteTx) ReleaseLease(name, holder string) error {
	return t.exec(SQLReleaseLease, name, holder)
}
