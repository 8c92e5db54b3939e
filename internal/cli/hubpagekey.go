package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hubpage"
)

// PageKeyFileEnv names the Hub page's session key file when
// --page-session-key-file is not given.
const PageKeyFileEnv = "AGENTSCM_HUB_PAGE_KEY_FILE"

// readPageKey reads the Hub page's session key file (nil: none given, a
// random key per process). It must be a private regular file.
func readPageKey(env *Env, path string) ([]byte, error) {
	if path == "" {
		path = env.Getenv(PageKeyFileEnv)
	}
	if path == "" {
		return nil, nil
	}
	if !filepath.IsAbs(path) {
		return nil, usagef("--page-session-key-file must be an absolute path")
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("page session key: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("page session key %s must be a regular file readable only by its owner (mode 0600)", path)
	}
	b, err := fsutil.ReadFileNoFollow(path, 4096)
	if err != nil {
		return nil, fmt.Errorf("page session key: %w", err)
	}
	return hubpage.DeriveKey(b)
}

// localCheckouts lists, for the Hub page's settings, the checkouts of this
// user's config whose connection token authenticates on svc as the same
// human and repository as p: this computer's checkouts of the signed-in
// person on this Hub, with each one's capture_setting. Nobody else's
// checkouts (or paths) are ever listed.
func localCheckouts(ctx context.Context, env *Env, svc *hub.Service, p hub.Principal) ([]hubpage.LocalCheckout, error) {
	store, conns, err := captureDeps(env)
	if err != nil {
		return nil, err
	}
	f, err := connections.Load(store.Dir)
	if err != nil {
		return nil, err
	}
	var out []hubpage.LocalCheckout
	for _, c := range f.Connections {
		if c.Token == "" {
			continue
		}
		q, err := svc.Authenticate(ctx, c.Token)
		if err != nil || q.HumanID == "" || q.HumanID != p.HumanID || q.RepositoryName != p.RepositoryName {
			continue
		}
		set, err := binding.CaptureSetting(store, conns, c.Root)
		if err != nil {
			return out, err
		}
		out = append(out, hubpage.LocalCheckout{Root: set.Root, State: set.State, Hub: set.Hub, Repository: set.Repository,
			ConnectedHub: set.ConnectedHub, ConnectedRepository: set.ConnectedRepository, LineageMismatch: set.LineageMismatch})
	}
	return out, nil
}
