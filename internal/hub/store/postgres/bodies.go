package postgres

import "strings"

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
