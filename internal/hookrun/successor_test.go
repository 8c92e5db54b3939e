package hookrun

import (
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/capture"
)

func TestSuccessorDue(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	drained := t0.Add(capture.DelivererMaxDrain)
	for _, tc := range []struct {
		name string
		rep  *capture.DeliverReport
		want bool
	}{
		{"no report", nil, false},
		{"drain bound with work left", &capture.DeliverReport{Outcome: "bound", Resume: true, Started: t0, Finished: drained}, true},
		{"a window without progress before the drain bound", &capture.DeliverReport{Outcome: "bound", Resume: true, Started: t0, Finished: t0.Add(capture.DelivererMaxRun)}, false},
		{"idle after the drain bound", &capture.DeliverReport{Outcome: "idle", Started: t0, Finished: drained}, false},
		{"bound with nothing to resume", &capture.DeliverReport{Outcome: "bound", Started: t0, Finished: drained}, false},
		{"failed", &capture.DeliverReport{Outcome: "failed", Resume: true, Started: t0, Finished: drained}, false},
	} {
		if got := successorDue(tc.rep, capture.DelivererMaxDrain); got != tc.want {
			t.Errorf("%s: successorDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}
