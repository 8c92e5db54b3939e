// Package docs_test keeps docs/architecture.md's package map true: every
// package under cmd/ and internal/ is listed there once, and nothing else is.
package docs_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentscm/agentscm/"

// listedPackages returns the first backticked cell of every table row in the
// "## Packages" section of docs/architecture.md, in document order.
func listedPackages(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		in   bool
		pkgs []string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Packages"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.TrimPrefix(line, "| `")
		end := strings.IndexByte(cell, '`')
		if end <= 0 {
			t.Fatalf("docs/architecture.md: malformed package row %q", line)
		}
		pkgs = append(pkgs, cell[:end])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestArchitectureListsEveryPackage(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	listed := listedPackages(t, filepath.Join(root, "docs", "architecture.md"))
	if len(listed) == 0 {
		t.Fatal(`docs/architecture.md has no "## Packages" table`)
	}
	cmd := exec.Command("go", "list", "./cmd/...", "./internal/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var actual []string
	for _, p := range strings.Fields(string(out)) {
		actual = append(actual, strings.TrimPrefix(p, module))
	}
	seen := map[string]bool{}
	for _, p := range listed {
		if seen[p] {
			t.Errorf("docs/architecture.md lists %s twice", p)
		}
		seen[p] = true
		if !slices.Contains(actual, p) {
			t.Errorf("docs/architecture.md lists %s, which go list does not know", p)
		}
	}
	for _, p := range actual {
		if !seen[p] {
			t.Errorf("package %s is missing from docs/architecture.md's package map", p)
		}
	}
}
