package delivery

import (
	"errors"
	"fmt"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// actionEnvelope maps an action_start or action_finish spool record onto
// the Hub's action_start / action_finish envelope. The record's target,
// native session and identity were set by Envelope.
func actionEnvelope(env *api.Envelope, r event.Record) (*api.Envelope, error) {
	a := r.Action
	if a == nil || a.ID == "" {
		return nil, fmt.Errorf("%s record %d without its action fact", r.Kind, r.Seq)
	}
	if r.Kind == event.ActionStart {
		st := &api.ActionStart{ActionID: a.ID, Tool: r.ToolName, Class: a.Class, Coverage: a.Coverage,
			RecipeDigest: a.RecipeDigest, SetupDigest: a.SetupDigest, ObservationScope: a.ObservationScope, ObservationOrder: a.ObservationOrder}
		if !a.StartedAt.IsZero() {
			st.StartedAt = a.StartedAt.Unix()
		}
		if s := a.Source; s != nil {
			st.Source = &api.SourceBinding{Head: s.Head, Tree: s.Tree, MergeBase: s.MergeBase, ManifestDigest: s.ManifestDigest, Dirty: s.Dirty, Partial: s.Partial,
				ManifestBytes: s.ManifestBytes, Retained: s.Retained, Transformed: s.Transformed, Omissions: s.Omissions, Stopped: s.Stopped}
		}
		env.Type, env.ActionStart = api.TypeActionStart, st
		return env, nil
	}
	if a.Result == "" || a.Verification == "" {
		return nil, errors.New("action finish record without result or verification")
	}
	f := &api.ActionFinish{ActionID: a.ID, Result: a.Result, Verification: a.Verification, ExitCode: a.ExitCode,
		Drift: a.Drift, SetupDigest: a.CompletionSetupDigest, Stale: a.Stale}
	if !a.FinishedAt.IsZero() {
		f.FinishedAt = a.FinishedAt.Unix()
	}
	env.Type, env.ActionFinish = api.TypeActionFinish, f
	return env, nil
}
