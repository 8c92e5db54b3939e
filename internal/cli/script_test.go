package cli

import (
	"context"
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets script tests run agentscm in-process as a command.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"agentscm": func() {
			env := OSEnv()
			if exe := os.Getenv("AGENTSCM_TEST_EXECUTABLE"); exe != "" {
				env.Executable = exe
			}
			os.Exit(Main(context.Background(), env, os.Args[1:]))
		},
	})
}

// TestScripts runs the CLI script tests in testdata/script: each file is a
// command transcript whose output is the contract.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(e *testscript.Env) error {
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/cfg")
			e.Setenv("HOME", e.WorkDir+"/home")
			e.Setenv("AGENTSCM_TEST_EXECUTABLE", "/usr/local/bin/agentscm")
			e.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			e.Setenv("GIT_AUTHOR_NAME", "t")
			e.Setenv("GIT_AUTHOR_EMAIL", "t@example.invalid")
			e.Setenv("GIT_COMMITTER_NAME", "t")
			e.Setenv("GIT_COMMITTER_EMAIL", "t@example.invalid")
			return nil
		},
	})
}
