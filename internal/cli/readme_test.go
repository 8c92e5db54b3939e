package cli

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestExitStatusTable: the exit status table of docs/reference.md (where
// the README's reference material lives) and the one in agentscm --help are
// the same rows, and every documented status is one a
// command really returns (the constants and archiveExit/turnExit codes).
func TestExitStatusTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| ([0-9]+) \| (.+) \|$`)
	var readme []string
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		readme = append(readme, m[1]+"  "+m[2])
	}
	help := regexp.MustCompile(`(?m)^  ([0-9]+)  (.+)$`)
	var inHelp []string
	for _, m := range help.FindAllStringSubmatch(exitStatusHelp, -1) {
		inHelp = append(inHelp, m[1]+"  "+m[2])
	}
	if len(readme) == 0 || strings.Join(readme, "\n") != strings.Join(inHelp, "\n") {
		t.Fatalf("docs/reference.md table:\n%s\n--help table:\n%s", strings.Join(readme, "\n"), strings.Join(inHelp, "\n"))
	}
	for _, code := range []int{ExitOK, ExitError, ExitUsage, ExitUnreadableArchive, ExitTurnRunning, ExitChangedSinceCapture, ExitGenerationChanged, ExitPartial} {
		if !regexp.MustCompile(`(?m)^  ` + strconv.Itoa(code) + `  `).MatchString(exitStatusHelp) {
			t.Errorf("exit status %d is returned but not documented", code)
		}
	}
}
