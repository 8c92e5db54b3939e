package timeline

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestCoverageWords: the host's normal missing identities read as complete
// for what the host reports; anything else stays partial and is named.
func TestCoverageWords(t *testing.T) {
	rec, incs := fixture(t)
	for _, tc := range []struct {
		name   string
		mutate func(*api.ChangeRecord)
		want   string
	}{
		{"only the host's missing identities", nil, "complete for what Claude Code reports"},
		{"a session still open", func(r *api.ChangeRecord) {
			r.Coverage.Reasons = append(r.Coverage.Reasons, "session default (generation 1) has not ended")
		}, "complete for what Claude Code reports so far (a session is still running, or ended without saying so)"},
		{"an outage", func(r *api.ChangeRecord) {
			r.Gaps = append(r.Gaps, api.GapRecord{Session: "default", Generation: 1, Gap: api.Gap{Kind: "outage", Reason: "hub_unreachable"}})
			r.Coverage.Reasons = append(r.Coverage.Reasons, "1 outage gaps")
		}, "partial: the Hub or the Work was unreachable for these events: they were kept locally but not sent (1 outage gaps)"},
		{"an identity gap for another reason", func(r *api.ChangeRecord) {
			r.Gaps = append(r.Gaps, api.GapRecord{Session: "default", Generation: 1, Gap: api.Gap{Kind: "identity_uncertain", Reason: "claim_limit"}})
			r.Coverage.Reasons = []string{"3 identity_uncertain gaps"}
		}, "partial: the event may be counted twice: Claude Code gave it no identity of its own, so a hook that ran again after a timeout could not be told apart from a real repeat (3 identity_uncertain gaps)"},
		{"complete", func(r *api.ChangeRecord) { r.Gaps, r.Coverage = nil, api.Coverage{State: "complete"} }, "complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rec
			r.Gaps = append([]api.GapRecord(nil), rec.Gaps...)
			r.Coverage.Reasons = append([]string(nil), rec.Coverage.Reasons...)
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			if got := Build(r, incs, Source{Name: "local changelog"}).CoverageWords; got != tc.want {
				t.Errorf("coverage words = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestWriteSummary: the default view leads with the coverage in words and
// one summary line per session, then one line per call with its files and
// position, and names no internal identifier.
func TestWriteSummary(t *testing.T) {
	rec, incs := fixture(t)
	tl := Build(rec, incs, Source{Name: "local changelog"})
	var out bytes.Buffer
	WriteSummary(&out, tl)
	text := out.String()
	for _, want := range []string{
		"\nrecord: complete for what Claude Code reports\n",
		"\nsession 1 (Claude Code) ",
		": 3 calls, 1 failed; 1 created, 1 modified, 1 deleted\n",
		"  Write      succeeded [0]  +new.txt\n",
		"  Bash       succeeded [1]  ~README.md -b.txt\n",
		"  Bash       failed    [2]  no files changed\n",
		"\n3 calls, 1 failed; 1 created, 1 modified, 1 deleted\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	if lines := strings.Split(text, "\n"); !regexp.MustCompile(`^session 1 \(Claude Code\) \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, \d+s(, not ended)?: `).MatchString(lines[3]) {
		t.Errorf("session line = %q, want its start and duration first", lines[3])
	}
	for _, id := range []string{rec.Work.ID, "default", "s1", "obs_", "identity_uncertain", "#", "toolu_", "generation"} {
		if id != "" && strings.Contains(text, id) {
			t.Errorf("summary names the internal identifier %q:\n%s", id, text)
		}
	}
}
