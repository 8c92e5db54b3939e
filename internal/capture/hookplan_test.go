package capture

import (
	"context"
	"os"
	"testing"
)

type plainOpener struct{}

func (plainOpener) Open(context.Context, string) (Hub, error) { return nil, nil }

type startingOpener struct{ plainOpener }

func (startingOpener) StartDeliverer(*os.File, string) error { return nil }

// TestPlanHook: the hook's mode is a field of its plan, decided from
// whether a detached deliverer can be started (every agent alike), and the
// plan's decisions on the spool's backlog follow from it.
func TestPlanHook(t *testing.T) {
	for _, tc := range []struct {
		name             string
		deliverer        bool
		waiting, pending int
		wantMode         HookMode
		wantBusy         writeStep
		wantInline       bool
		wantAdmit        int
	}{
		{"deliverer, empty spool", true, 0, 0, ModeIntakeFirst, stepIntake, false, backgroundAdmitPerHook},
		{"deliverer, intake below its bound", true, BackgroundIntakeBackpressure - 1, 0, ModeIntakeFirst, stepIntake, false, backgroundAdmitPerHook},
		{"deliverer, intake at its bound", true, BackgroundIntakeBackpressure, 0, ModeIntakeFirst, stepWaitLock, false, backgroundAdmitPerHook},
		{"deliverer, pending at its bound", true, 0, BackgroundPendingBackpressure, ModeIntakeFirst, stepWaitLock, true, backgroundAdmitPerHook},
		{"deliverer, pending below its bound", true, 0, BackgroundPendingBackpressure - 1, ModeIntakeFirst, stepIntake, false, backgroundAdmitPerHook},
		{"no deliverer, lock busy", false, 0, 0, ModeLocked, stepIntake, true, maxAdmitPerHook},
		{"no deliverer, intake at its bound", false, IntakeBackpressure, 0, ModeLocked, stepWaitLock, true, maxAdmitPerHook},
		{"no deliverer, pending at its bound", false, 0, PendingBackpressure, ModeLocked, stepWaitLock, true, maxAdmitPerHook},
		{"no deliverer, a backlog the deliverer's bounds allow", false, IntakeBackpressure + 1, PendingBackpressure + 1, ModeLocked, stepWaitLock, true, maxAdmitPerHook},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := planHook(tc.deliverer)
			if pl.Mode != tc.wantMode {
				t.Fatalf("mode %v, want %v", pl.Mode, tc.wantMode)
			}
			if got := pl.whenBusy(tc.waiting, tc.pending); got != tc.wantBusy {
				t.Errorf("whenBusy(%d, %d) = %v, want %v", tc.waiting, tc.pending, got, tc.wantBusy)
			}
			if got := pl.deliverInline(tc.pending); got != tc.wantInline {
				t.Errorf("deliverInline(%d) = %v, want %v", tc.pending, got, tc.wantInline)
			}
			if pl.AdmitLeft != tc.wantAdmit {
				t.Errorf("admits %d per hook, want %d", pl.AdmitLeft, tc.wantAdmit)
			}
		})
	}
}

// TestDepsOf: an opener's optional offers become the explicit
// dependencies, and only a deliverer makes a hook intake-first.
func TestDepsOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		hubs HubOpener
		mode HookMode
	}{
		{"opener only", plainOpener{}, ModeLocked},
		{"opener with a deliverer", startingOpener{}, ModeIntakeFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := DepsOf(tc.hubs)
			if m := planHook(d.Deliverer != nil).Mode; m != tc.mode {
				t.Fatalf("mode %v, want %v", m, tc.mode)
			}
		})
	}
}
