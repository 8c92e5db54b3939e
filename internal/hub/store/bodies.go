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
