package agent

import (
	"slices"
	"testing"
)

func TestObservedSetup(t *testing.T) {
	cases := []struct {
		name, payload                string
		model, permission, effort    string
		none                         bool
		unobservedModel, unobsEffort bool
	}{
		{name: "no setup fields", payload: `{"session_id":"s","hook_event_name":"Stop"}`, none: true},
		{name: "claude code 2.1.328 tool event", payload: `{"permission_mode":"default","effort":{"level":"medium"}}`,
			permission: "default", effort: "medium", unobservedModel: true},
		{name: "prompt event", payload: `{"permission_mode":"acceptEdits"}`, permission: "acceptEdits", unobservedModel: true, unobsEffort: true},
		{name: "model as object", payload: `{"model":{"id":"claude-opus-5-5","display_name":"Opus"}}`, model: "claude-opus-5-5", unobsEffort: true},
		{name: "model as string", payload: `{"model":"claude-x","effort":"high"}`, model: "claude-x", effort: "high"},
		{name: "values with spaces or too long are not observed", payload: `{"model":"a b","permission_mode":"` + string(make([]byte, 200)) + `"}`, none: true},
		{name: "wrong shapes", payload: `{"model":3,"effort":[1],"permission_mode":{"x":1}}`, none: true},
		{name: "not json", payload: `nope`, none: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := ObservedSetup([]byte(tc.payload))
			if tc.none {
				if s != nil {
					t.Fatalf("setup = %+v, want none", s)
				}
				return
			}
			if s == nil || s.Model != tc.model || s.PermissionMode != tc.permission || s.Effort != tc.effort {
				t.Fatalf("setup = %+v", s)
			}
			if len(s.Artifact) != len("sha256:")+64 {
				t.Fatalf("artifact identity %q", s.Artifact)
			}
			if slices.Contains(s.Unobserved, "model") != tc.unobservedModel || slices.Contains(s.Unobserved, "effort") != tc.unobsEffort {
				t.Fatalf("unobserved = %v", s.Unobserved)
			}
			// A hook never observes the whole setup.
			if !slices.Contains(s.Unobserved, "system_prompt") || !slices.Contains(s.Unobserved, "mcp_servers") {
				t.Fatalf("unobserved = %v", s.Unobserved)
			}
		})
	}
	a := ObservedSetup([]byte(`{"permission_mode":"default"}`))
	b := ObservedSetup([]byte(`{"permission_mode":"plan"}`))
	if a.Artifact == b.Artifact {
		t.Fatal("different setups share an artifact identity")
	}
}
