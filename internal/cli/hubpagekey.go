package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentscm/agentscm/internal/fsutil"
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
