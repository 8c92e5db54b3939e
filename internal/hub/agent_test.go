package hub_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestSessionAgentOverHTTP: whoami lists envelope_agent; a session takes
// the first agent an envelope names (one delivered before, by a client
// without the field, leaves it unknown) and keeps it; a replay with the
// agent added is a duplicate (the agent is not in the digest); a session
// no envelope named an agent for reads "" (unknown); an invalid agent is
// refused. The record names each session's, event's and action's agent.
// Over HTTP with a repository token, so PostgreSQL's one-round-trip path
// is taken once the session's agent is known.
func TestSessionAgentOverHTTP(t *testing.T) {
	e := newMatrixEnv(t)
	w := e.freshWork(t, "wt-agent")
	tok := e.tokens[callerReadWrite]
	call := func(method, path string, in, out any) int {
		t.Helper()
		var body []byte
		if in != nil {
			body, _ = json.Marshal(in)
		}
		code, b := e.do(t, method, path, tok, body)
		if code == http.StatusOK && out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
		return code
	}
	var who api.Whoami
	if code := call("GET", "/v1/hub/whoami", nil, &who); code != 200 || !who.HasFeature(api.FeatureAgent) {
		t.Fatalf("whoami %d %+v", code, who)
	}
	targets := map[string]api.Target{}
	for _, n := range []string{"native-codex", "native-old"} {
		var tg api.Target
		if code := call("POST", "/v1/repositories/proj/resolve", api.ResolveRequest{WorktreeID: "wt-agent", NativeSessionID: n}, &tg); code != 200 {
			t.Fatalf("resolve %s: %d", n, code)
		}
		targets[n] = tg
	}
	ev := func(native string, seq int64, agent string) api.Envelope {
		tg := targets[native]
		kind := "tool_start"
		if seq == 1 {
			kind = "session_start"
		}
		return api.Envelope{Identity: identity(fmt.Sprint(native, seq)), Type: api.TypeEvents, WorkID: w.ID, Generation: tg.Generation,
			Session: tg.Session, NativeSessionID: native, Agent: agent, Events: []api.Event{{Seq: seq, Kind: kind}}}
	}
	deliver := func(x api.Envelope, status string) {
		t.Helper()
		var res api.IngestResult
		if code := call("POST", "/v1/repositories/proj/envelopes", x, &res); code != 200 || res.Status != status {
			t.Fatalf("envelope %s seq %d agent %q: %d %+v, want %s", x.NativeSessionID, x.Events[0].Seq, x.Agent, code, res, status)
		}
	}
	deliver(ev("native-codex", 1, ""), api.StatusAccepted) // a client before the field
	for seq := int64(2); seq <= 4; seq++ {
		deliver(ev("native-codex", seq, "codex"), api.StatusAccepted)
	}
	deliver(ev("native-codex", 5, "gemini"), api.StatusAccepted) // the first agent stays
	deliver(ev("native-codex", 1, "codex"), api.StatusDuplicate) // replay by an upgraded client
	deliver(ev("native-old", 1, ""), api.StatusAccepted)
	bad := ev("native-old", 2, "Codex CLI")
	if code := call("POST", "/v1/repositories/proj/envelopes", bad, nil); code != http.StatusBadRequest {
		t.Fatalf("agent %q: %d, want 400", bad.Agent, code)
	}
	start := api.Envelope{Identity: identity("action"), Type: api.TypeActionStart, WorkID: w.ID, Generation: targets["native-codex"].Generation,
		Session: targets["native-codex"].Session, Agent: "codex", ActionStart: &api.ActionStart{ActionID: "act-1", Tool: "Bash", Class: "execution"}}
	if code := call("POST", "/v1/repositories/proj/envelopes", start, nil); code != 200 {
		t.Fatalf("action start: %d", code)
	}

	var rec api.ChangeRecord
	if code := call("GET", "/v1/repositories/proj/works/"+w.ID+"/record", nil, &rec); code != 200 {
		t.Fatalf("record: %d", code)
	}
	want := map[string]string{targets["native-codex"].Session: "codex", targets["native-old"].Session: ""}
	got := map[string]string{}
	for _, s := range rec.Sessions {
		if slices.Contains(s.NativeSessionIDs, "native-codex") || slices.Contains(s.NativeSessionIDs, "native-old") {
			got[s.Session] = s.Agent
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("session agents %v, want %v", got, want)
	}
	for _, x := range rec.Events {
		if x.Agent != want[x.Session] {
			t.Fatalf("event %+v: agent %q, want %q", x, x.Agent, want[x.Session])
		}
	}
	if len(rec.Events) != 6 || len(rec.Actions) != 1 || rec.Actions[0].Agent != "codex" {
		t.Fatalf("events %d, actions %+v", len(rec.Events), rec.Actions)
	}
}
