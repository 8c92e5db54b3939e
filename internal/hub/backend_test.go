package hub_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/agentscm/agentscm/internal/hub/store/postgres"
	"github.com/agentscm/agentscm/internal/hub/store/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// suite is the service test suite: each test runs on the embedded SQLite
// store as itself, and again, unchanged, on PostgreSQL under TestPostgres.
var suite = map[string]func(*testing.T){
	"TestActionStartFinishRecord":           TestActionStartFinishRecord,
	"TestIncrementUploadListDownload":       TestIncrementUploadListDownload,
	"TestIncrementUploadRefusals":           TestIncrementUploadRefusals,
	"TestIncrementGrantRefusal":             TestIncrementGrantRefusal,
	"TestIncrementOversizeBodyRefused":      TestIncrementOversizeBodyRefused,
	"TestIncrementUnpackedPastGrantRefused": TestIncrementUnpackedPastGrantRefused,
	"TestIncrementSequencesPerWorktree":     TestIncrementSequencesPerWorktree,
	"TestAuthorizationMatrix":               TestAuthorizationMatrix,
	"TestHTTPRefusals":                      TestHTTPRefusals,
	"TestIntegerBoundsOverHTTP":             TestIntegerBoundsOverHTTP,
	"TestOtherRoutesHostileIntegers":        TestOtherRoutesHostileIntegers,
	"TestTakeoverCompareAndSwap":            TestTakeoverCompareAndSwap,
	"TestStreamsShareNoSequence":            TestStreamsShareNoSequence,
	"TestIncrementMergedUploads":            TestIncrementMergedUploads,
	"TestBodyUploadAccess":                  TestBodyUploadAccess,
	"TestBodyHTTP":                          TestBodyHTTP,
	"TestBodyRefusals":                      TestBodyRefusals,
	"TestBodySweep":                         TestBodySweep,
	"TestBodySweepRetriesFailedRemovals":    TestBodySweepRetriesFailedRemovals,
	"TestBodySweepBatches":                  TestBodySweepBatches,
	"TestBodySweepSeveralInstances":         TestBodySweepSeveralInstances,
	"TestCheckpointNoteText":                TestCheckpointNoteText,
	"TestIngestEventsOutcomes":              TestIngestEventsOutcomes,
	"TestSessionAgentOverHTTP":              TestSessionAgentOverHTTP,
}

// notInSuite are the tests that are about something other than the store,
// or that write the SQLite file behind the Hub's back (the PostgreSQL store
// has its own tests of the same: internal/hub/store/postgres).
var notInSuite = []string{"TestPostgres", "TestSuiteListsEveryTest", "TestTwoInstances",
	"TestRecordNeverFailsOnSums", "TestTakeoverAtLastGeneration", "TestAcceptingStates"}

// TestPostgres runs the service suite on PostgreSQL (a throwaway server;
// skipped when PostgreSQL is not installed, failed then under
// AGENTSCM_REQUIRE_POSTGRES=1).
func TestPostgres(t *testing.T) {
	pgtest.Shared(t)
	names := make([]string, 0, len(suite))
	for n := range suite {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, suite[n])
	}
}

// onPostgres says whether t runs under TestPostgres.
func onPostgres(t testing.TB) bool { return strings.HasPrefix(t.Name(), "TestPostgres/") }

// openTestService opens a fresh Hub on the store t runs against.
func openTestService(t testing.TB, cfg hub.Config) *hub.Service {
	t.Helper()
	ctx := context.Background()
	var svc *hub.Service
	var err error
	if onPostgres(t) {
		st, err := postgres.Open(ctx, pgtest.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		obj, err := objects.OpenDir(filepath.Join(t.TempDir(), "objects"))
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		if svc, err = hub.New(st, obj, cfg); err != nil {
			st.Close()
			t.Fatal(err)
		}
	} else if svc, err = hub.Open(ctx, filepath.Join(t.TempDir(), "data"), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// TestSuiteListsEveryTest keeps the suite whole: a new service test is run
// on PostgreSQL too unless it is named in notInSuite.
func TestSuiteListsEveryTest(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
				continue
			}
			if _, ok := suite[fd.Name.Name]; !ok && !slices.Contains(notInSuite, fd.Name.Name) {
				t.Errorf("%s (%s) is neither in the PostgreSQL suite nor in notInSuite", fd.Name.Name, f)
			}
		}
	}
}
