package hub

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/hub/store"
)

func requireAdmin(p Principal, write bool) error {
	if !p.Admin {
		return errNotAdmin
	}
	if write && p.Scope != api.ScopeReadWrite {
		return errReadOnly
	}
	return nil
}

func exists(err error, what, name string) error {
	if errors.Is(err, store.ErrExists) {
		return api.Errorf(http.StatusConflict, api.CodeExists, "%s %q already exists", what, name)
	}
	return err
}

// CreateHuman adds a human (admin only).
func (s *Service) CreateHuman(ctx context.Context, p Principal, req api.CreateHumanRequest) (api.Human, error) {
	if err := requireAdmin(p, true); err != nil {
		return api.Human{}, err
	}
	if !api.ValidName(req.Name) {
		return api.Human{}, badf("a human needs a name (1 to %d bytes, no slashes or control characters)", api.MaxIDLen)
	}
	h := store.Human{ID: newID("hum_"), Name: req.Name, Admin: req.Admin, CreatedAt: s.now()}
	err := s.st.Update(ctx, func(tx store.Tx) error { return exists(tx.InsertHuman(h), "human", h.Name) })
	if err != nil {
		return api.Human{}, internal(err)
	}
	return api.Human{ID: h.ID, Name: h.Name, Admin: h.Admin, CreatedAt: h.CreatedAt}, nil
}

// CreateRepository adds a repository (admin only).
func (s *Service) CreateRepository(ctx context.Context, p Principal, req api.CreateRepositoryRequest) (api.Repository, error) {
	if err := requireAdmin(p, true); err != nil {
		return api.Repository{}, err
	}
	if !api.ValidName(req.Name) {
		return api.Repository{}, badf("a repository needs a name (1 to %d bytes, no slashes or control characters)", api.MaxIDLen)
	}
	r := store.Repository{ID: newID("rep_"), Name: req.Name, CreatedAt: s.now()}
	err := s.st.Update(ctx, func(tx store.Tx) error { return exists(tx.InsertRepository(r), "repository", r.Name) })
	if err != nil {
		return api.Repository{}, internal(err)
	}
	return api.Repository{ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt}, nil
}

// NewTokenSecret returns a fresh random token secret.
func NewTokenSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// CreateToken issues a token bound to a human and a repository (admin
// only). The answer carries the secret; the Hub keeps only its hash.
func (s *Service) CreateToken(ctx context.Context, p Principal, req api.CreateTokenRequest) (api.Token, error) {
	if err := requireAdmin(p, true); err != nil {
		return api.Token{}, err
	}
	if req.Scope == "" {
		req.Scope = api.ScopeReadWrite
	}
	if req.Scope != api.ScopeReadWrite && req.Scope != api.ScopeReadOnly {
		return api.Token{}, badf("scope must be %s or %s", api.ScopeReadWrite, api.ScopeReadOnly)
	}
	if len(req.Label) > api.MaxIDLen {
		return api.Token{}, badf("label is longer than %d bytes", api.MaxIDLen)
	}
	secret := NewTokenSecret()
	var out api.Token
	err := s.st.Update(ctx, func(tx store.Tx) error {
		h, err := tx.HumanByName(req.Human)
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no human %q", req.Human)
		}
		if err != nil {
			return err
		}
		r, err := tx.RepositoryByName(req.Repository)
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no repository %q", req.Repository)
		}
		if err != nil {
			return err
		}
		k := store.Token{ID: newID("tok_"), Hash: HashToken(secret), HumanID: h.ID, RepositoryID: r.ID, Scope: req.Scope, Label: req.Label, CreatedAt: s.now()}
		if err := tx.InsertToken(k); err != nil {
			return err
		}
		out = api.Token{ID: k.ID, Human: h.Name, Repository: r.Name, Scope: k.Scope, Label: k.Label, CreatedAt: k.CreatedAt, Secret: secret}
		return nil
	})
	if err != nil {
		return api.Token{}, internal(err)
	}
	return out, nil
}

// AdminList lists humans, repositories or tokens (admin only; token
// secrets are never listed).
func (s *Service) AdminList(ctx context.Context, p Principal, what string) (api.AdminList, error) {
	if err := requireAdmin(p, false); err != nil {
		return api.AdminList{}, err
	}
	var out api.AdminList
	err := s.st.View(ctx, func(tx store.Tx) error {
		switch what {
		case "humans":
			hs, err := tx.ListHumans()
			out.Humans = []api.Human{}
			for _, h := range hs {
				out.Humans = append(out.Humans, api.Human{ID: h.ID, Name: h.Name, Admin: h.Admin, CreatedAt: h.CreatedAt})
			}
			return err
		case "repositories":
			rs, err := tx.ListRepositories()
			out.Repositories = []api.Repository{}
			for _, r := range rs {
				out.Repositories = append(out.Repositories, api.Repository{ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt})
			}
			return err
		case "tokens":
			ks, err := tx.ListTokens()
			if err != nil {
				return err
			}
			out.Tokens = []api.Token{}
			for _, k := range ks {
				h, _ := tx.HumanByID(k.HumanID)
				r, _ := tx.RepositoryByID(k.RepositoryID)
				out.Tokens = append(out.Tokens, api.Token{ID: k.ID, Human: h.Name, Repository: r.Name, Scope: k.Scope, Label: k.Label, CreatedAt: k.CreatedAt})
			}
			return nil
		}
		return badf("unknown list %q (humans, repositories, tokens)", what)
	})
	return out, internal(err)
}

// EnsureLocal makes sure a human and a repository exist, creating them when
// missing, and returns the principal that acts for them with write scope.
// The embedded connection uses it: the database file's owner is the
// authority there, so no token is involved.
func (s *Service) EnsureLocal(ctx context.Context, human, repository string) (Principal, error) {
	if !api.ValidName(human) || !api.ValidName(repository) {
		return Principal{}, badf("human and repository names must be 1 to %d bytes without slashes or control characters", api.MaxIDLen)
	}
	var p Principal
	err := s.st.Update(ctx, func(tx store.Tx) error {
		h, err := tx.HumanByName(human)
		if errors.Is(err, store.ErrNotFound) {
			h = store.Human{ID: newID("hum_"), Name: human, Admin: true, CreatedAt: s.now()}
			err = tx.InsertHuman(h)
		}
		if err != nil {
			return err
		}
		r, err := tx.RepositoryByName(repository)
		if errors.Is(err, store.ErrNotFound) {
			r = store.Repository{ID: newID("rep_"), Name: repository, CreatedAt: s.now()}
			err = tx.InsertRepository(r)
		}
		if err != nil {
			return err
		}
		p = Principal{HumanID: h.ID, HumanName: h.Name, Admin: h.Admin, RepositoryID: r.ID, RepositoryName: r.Name, Scope: api.ScopeReadWrite}
		return nil
	})
	return p, internal(err)
}

// LocalPrincipal returns the principal of an existing human and repository
// without writing, for an embedded connection set up earlier.
func (s *Service) LocalPrincipal(ctx context.Context, human, repository string) (Principal, error) {
	var p Principal
	err := s.st.View(ctx, func(tx store.Tx) error {
		h, err := tx.HumanByName(human)
		if err != nil {
			return fmt.Errorf("local human %q: %w", human, err)
		}
		r, err := tx.RepositoryByName(repository)
		if err != nil {
			return fmt.Errorf("local repository %q: %w", repository, err)
		}
		p = Principal{HumanID: h.ID, HumanName: h.Name, Admin: h.Admin, RepositoryID: r.ID, RepositoryName: r.Name, Scope: api.ScopeReadWrite}
		return nil
	})
	return p, internal(err)
}
