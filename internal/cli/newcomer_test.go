package cli

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// buildStamped builds the named commands into dir with one build stamp,
// as scripts/install.sh does.
func buildStamped(t *testing.T, dir, stamp string, cmds ...string) {
	t.Helper()
	args := []string{"build", "-buildvcs=false", "-ldflags", "-X github.com/agentscm/agentscm/internal/buildinfo.Stamp=" + stamp, "-o", dir + string(filepath.Separator)}
	for _, c := range cmds {
		args = append(args, "github.com/agentscm/agentscm/cmd/"+c)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

// TestNewcomerScripts runs testdata/newcomer: a newcomer's commands run as
// installed binaries (agentscm, agentscm-hook, agentscm-hook-intake of one
// build, copied into each script's $WORK/bin on PATH), from inside a
// checkout, with no flags; $OTHER holds an agentscm-hook of another build.
func TestNewcomerScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries; skipped with -short")
	}
	bin, other := t.TempDir(), t.TempDir()
	buildStamped(t, bin, "newcomer-1", "agentscm", "agentscm-hook", "agentscm-hook-intake")
	buildStamped(t, other, "newcomer-2", "agentscm-hook")
	testscript.Run(t, testscript.Params{
		Dir: "testdata/newcomer",
		Setup: func(e *testscript.Env) error {
			own := filepath.Join(e.WorkDir, "bin")
			if err := os.MkdirAll(own, 0o755); err != nil {
				return err
			}
			for _, b := range []string{"agentscm", "agentscm-hook", "agentscm-hook-intake"} {
				if err := copyExecutable(filepath.Join(bin, b), filepath.Join(own, b)); err != nil {
					return err
				}
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			e.Setenv("HUBPORT", strconv.Itoa(port))
			e.Setenv("OTHER", other)
			e.Setenv("PATH", own+string(os.PathListSeparator)+os.Getenv("PATH"))
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/cfg")
			e.Setenv("HOME", e.WorkDir+"/home")
			e.Setenv("CODEX_HOME", e.WorkDir+"/codex")
			e.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			e.Setenv("GIT_AUTHOR_NAME", "t")
			e.Setenv("GIT_AUTHOR_EMAIL", "t@example.invalid")
			e.Setenv("GIT_COMMITTER_NAME", "t")
			e.Setenv("GIT_COMMITTER_EMAIL", "t@example.invalid")
			return nil
		},
	})
}

func copyExecutable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
