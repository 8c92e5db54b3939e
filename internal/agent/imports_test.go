package agent

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAdaptersImportOnlyTheNeutralPackages keeps the layout of the agent
// table: an adapter (claude, codex, gemini), tests included, imports the
// neutral packages and never a sibling adapter or the table that lists them.
func TestAdaptersImportOnlyTheNeutralPackages(t *testing.T) {
	const mod = "github.com/agentscm/agentscm/internal/"
	allowed := map[string]bool{
		mod + "agent": true, mod + "agent/capability": true, mod + "agent/hookfile": true,
		mod + "event": true, mod + "fsutil": true, mod + "redact": true,
	}
	for _, dir := range []string{"claude", "codex", "gemini"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(path, "github.com/agentscm/agentscm/") && !allowed[path] {
					t.Errorf("%s imports %s: an adapter imports only the neutral packages", f, path)
				}
			}
		}
	}
}
