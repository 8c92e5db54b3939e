package postgres

import (
	"strconv"
	"strings"

	"github.com/agentscm/agentscm/internal/hub/store"
	"github.com/jackc/pgx/v5"
)

// schemaV4 is the SQLite store's version 4: shared conversation bodies
// (declarations), pending object removals and the sweep's lease.
var schemaV4 = strings.ReplaceAll(`
CREATE TABLE bodies(work_id TEXT NOT NULL REFERENCES works(id), human_id TEXT NOT NULL, digest TEXT NOT NULL,
  repository_id TEXT NOT NULL, bytes BIGINT NOT NULL, media_type TEXT NOT NULL, retention TEXT NOT NULL, state TEXT NOT NULL,
  generation BIGINT NOT NULL, session TEXT NOT NULL, identity TEXT NOT NULL, declared_at BIGINT NOT NULL,
  uploaded_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, ended_at BIGINT NOT NULL,
  PRIMARY KEY(work_id, human_id, digest));
CREATE INDEX bodies_due ON bodies(expires_at) WHERE state IN ('local','awaiting_upload','available');
CREATE INDEX bodies_digest ON bodies(digest, state);
CREATE TABLE body_removals(digest TEXT PRIMARY KEY, next_at BIGINT NOT NULL, backoff BIGINT NOT NULL,
  attempts BIGINT NOT NULL, last_error TEXT NOT NULL);
CREATE INDEX body_removals_due ON body_removals(next_at);
CREATE TABLE leases(name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at BIGINT NOT NULL);
`, " TEXT", ` TEXT COLLATE "C"`)

// numbered turns the shared statements' '?' placeholders into $1, $2, ...
// (none of them has a '?' inside a literal).
func numbered(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	qInsertBody      = numbered(store.SQLInsertBody)
	qBody            = numbered(store.SQLBody)
	qBodiesOfDigest  = numbered(store.SQLBodiesOfDigest)
	qCountBodies     = numbered(strings.ReplaceAll(store.SQLCountBodies, "?=''", "?::text=''"))
	qListBodies      = numbered(strings.ReplaceAll(store.SQLListBodies, "?=''", "?::text=''"))
	qUpdateBody      = numbered(store.SQLUpdateBody)
	qReuploadBodies  = numbered(store.SQLReuploadBodies)
	qDueBodies       = numbered(store.SQLDueBodies)
	qAvailableCopies = numbered(store.SQLAvailableCopies)
	qPutBodyRemoval  = numbered(store.SQLPutBodyRemoval)
	qBodyRemoval     = numbered(store.SQLBodyRemoval)
	qDueRemovals     = numbered(store.SQLDueRemovals)
	qDeleteRemoval   = numbered(store.SQLDeleteRemoval)
	qAcquireLease    = numbered(store.SQLAcquireLease)
	qLeaseHolder     = numbered(store.SQLLeaseHolder)
	qReleaseLease    = numbered(store.SQLReleaseLease)
)

func (t *pgTx) InsertBody(b store.Body) error { return t.insert(qInsertBody, store.BodyArgs(b)...) }

func (t *pgTx) Body(workID, humanID, digest string) (store.Body, error) {
	var b store.Body
	err := t.row(qBody, []any{workID, humanID, digest}, store.BodyDest(&b)...)
	return b, err
}

func (t *pgTx) bodies(q string, args ...any) ([]store.Body, error) {
	var out []store.Body
	err := t.rows(q, args, func(r pgx.Rows) error {
		var b store.Body
		err := r.Scan(store.BodyDest(&b)...)
		out = append(out, b)
		return err
	})
	return out, err
}

func (t *pgTx) BodiesOfDigest(workID, digest string) ([]store.Body, error) {
	return t.bodies(qBodiesOfDigest, workID, digest)
}

func (t *pgTx) ListBodies(workID, humanID string, limit int) ([]store.Body, int, error) {
	var total int
	if err := t.row(qCountBodies, []any{workID, humanID, humanID}, &total); err != nil {
		return nil, 0, err
	}
	out, err := t.bodies(qListBodies, workID, humanID, humanID, limit)
	return out, total, err
}

func (t *pgTx) UpdateBody(b store.Body) error {
	_, err := t.exec(qUpdateBody, store.UpdateBodyArgs(b)...)
	return err
}

func (t *pgTx) ReuploadBodies(workID, humanID string, limit int) ([]store.Body, error) {
	return t.bodies(qReuploadBodies, workID, humanID, limit)
}

func (t *pgTx) DueBodies(now int64, limit int) ([]store.Body, error) {
	return t.bodies(qDueBodies, now, limit)
}

func (t *pgTx) AvailableBodyCopies(digest string) (int64, error) {
	var n int64
	err := t.row(qAvailableCopies, []any{digest}, &n)
	return n, err
}

func (t *pgTx) PutBodyRemoval(r store.BodyRemoval) error {
	_, err := t.exec(qPutBodyRemoval, r.Digest, r.NextAt, r.Backoff, r.Attempts, r.LastError)
	return err
}

func (t *pgTx) BodyRemoval(digest string) (store.BodyRemoval, error) {
	var r store.BodyRemoval
	err := t.row(qBodyRemoval, []any{digest}, store.RemovalDest(&r)...)
	return r, err
}

func (t *pgTx) DueBodyRemovals(now int64, limit int) ([]store.BodyRemoval, error) {
	var out []store.BodyRemoval
	err := t.rows(qDueRemovals, []any{now, limit}, func(r pgx.Rows) error {
		var x store.BodyRemoval
		err := r.Scan(store.RemovalDest(&x)...)
		out = append(out, x)
		return err
	})
	return out, err
}

func (t *pgTx) DeleteBodyRemoval(digest string) error {
	_, err := t.exec(qDeleteRemoval, digest)
	return err
}

func (t *pgTx) AcquireLease(name, holder string, now, until int64) (bool, error) {
	if _, err := t.exec(qAcquireLease, name, holder, until, now); err != nil {
		return false, err
	}
	var h string
	if err := t.row(qLeaseHolder, []any{name}, &h); err != nil {
		return false, err
	}
	return h == holder, nil
}

func (t *pgTx) ReleaseLease(name, holder string) error {
	_, err := t.exec(qReleaseLease, name, holder)
	return err
}
