package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func validEnvelope() *Envelope {
	return &Envelope{Identity: strings.Repeat("ab", 32), Type: TypeEvents, WorkID: "wrk_1", Generation: 1, Session: "default",
		Events: []Event{{Seq: 1, Kind: "session_start", ObservedAt: 5}}}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(e *Envelope)
		ok   bool
	}{
		{"valid", func(e *Envelope) {}, true},
		{"uppercase identity", func(e *Envelope) { e.Identity = strings.ToUpper(e.Identity) }, false},
		{"short identity", func(e *Envelope) { e.Identity = "ab" }, false},
		{"generation 0", func(e *Envelope) { e.Generation = 0 }, false},
		{"no session", func(e *Envelope) { e.Session = "" }, false},
		{"slash in work id", func(e *Envelope) { e.WorkID = "../x" }, false},
		{"unknown type", func(e *Envelope) { e.Type = "nope" }, false},
		{"type/payload mismatch", func(e *Envelope) { e.Type = TypeUsage }, false},
		{"two payloads", func(e *Envelope) { e.Gap = &Gap{Kind: "redacted"} }, false},
		{"control character", func(e *Envelope) { e.Events[0].ToolName = "a\x00b" }, false},
		{"too long", func(e *Envelope) { e.Events[0].Reason = strings.Repeat("x", MaxTextLen+1) }, false},
		{"too many events", func(e *Envelope) {
			e.Events = make([]Event, MaxEventsPerBatch+1)
			for i := range e.Events {
				e.Events[i] = Event{Seq: int64(i + 1), Kind: "turn_end"}
			}
		}, false},
		{"negative time", func(e *Envelope) { e.Events[0].ObservedAt = -1 }, false},
		{"gap range reversed", func(e *Envelope) {
			e.Type, e.Events, e.Gap = TypeGap, nil, &Gap{Kind: "outage", FromSeq: 5, ToSeq: 2}
		}, false},
		{"usage negative", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: UsageScopeRequest, MessageID: "m", InputTokens: ptr(-1)}
		}, false},
		{"usage unknown counts", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: UsageScopeRequest, MessageID: "msg_1", OutputTokens: ptr(3)}
		}, true},
		{"usage without scope", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{MessageID: "msg_1", OutputTokens: ptr(3)}
		}, false},
		{"usage unknown scope", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: "total", MessageID: "msg_1"}
		}, false},
		{"request usage without message id", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: UsageScopeRequest, InputTokens: ptr(1)}
		}, false},
		{"cumulative usage", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: UsageScopeSessionCumulative, Model: "m", InputTokens: ptr(1)}
		}, true},
		{"cumulative usage with a message id", func(e *Envelope) {
			e.Type, e.Events, e.Usage = TypeUsage, nil, &Usage{Scope: UsageScopeSessionCumulative, MessageID: "msg_1"}
		}, false},
		{"setup", func(e *Envelope) {
			e.Events[0].Setup = &Setup{Artifact: "sha256:" + strings.Repeat("a", 64), PermissionMode: "default", Unobserved: []string{"model"}}
		}, true},
		{"setup without observed values", func(e *Envelope) {
			e.Events[0].Setup = &Setup{Artifact: "sha256:" + strings.Repeat("a", 64), Unobserved: []string{"model"}}
		}, false},
		{"setup without unobserved list", func(e *Envelope) {
			e.Events[0].Setup = &Setup{Artifact: "sha256:" + strings.Repeat("a", 64), Effort: "high"}
		}, false},
		{"setup bad artifact", func(e *Envelope) {
			e.Events[0].Setup = &Setup{Artifact: "sha256:XYZ", Effort: "high", Unobserved: []string{}}
		}, false},
		{"setup control character", func(e *Envelope) {
			e.Events[0].Setup = &Setup{Artifact: "sha256:" + strings.Repeat("a", 64), Model: "a\nb", Unobserved: []string{}}
		}, false},
		{"finish unknown result", func(e *Envelope) {
			e.Type, e.Events, e.ActionFinish = TypeActionFinish, nil, &ActionFinish{ActionID: "a", Result: "great", Verification: "unknown"}
		}, false},
		{"start bad digest", func(e *Envelope) {
			e.Type, e.Events, e.ActionStart = TypeActionStart, nil, &ActionStart{ActionID: "a", Tool: "Bash", Class: "execution", RecipeDigest: "zz"}
		}, false},
		{"start ok", func(e *Envelope) {
			e.Type, e.Events, e.ActionStart = TypeActionStart, nil, &ActionStart{ActionID: "a", Tool: "Bash", Class: "execution"}
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := validEnvelope()
			tc.mod(e)
			err := e.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				if ae, ok := AsError(err); !ok || ae.Status != http.StatusBadRequest {
					t.Fatalf("error %v is not a 400", err)
				}
			}
		})
	}
}

func TestDigestIgnoresReceiptTime(t *testing.T) {
	a, b := validEnvelope(), validEnvelope()
	b.Events[0].ObservedAt = 999
	if a.Digest() != b.Digest() {
		t.Fatal("observed_at changed the digest")
	}
	if a.Events[0].ObservedAt != 5 {
		t.Fatal("Digest modified its envelope")
	}
	b.Events[0].Source = "resume"
	if a.Digest() == b.Digest() {
		t.Fatal("a changed fact kept the digest")
	}
}

func TestDecodeStrict(t *testing.T) {
	cases := []struct {
		in     string
		status int
		code   string
	}{
		{`{"worktree_id":"a","native_session_id":"b"}`, 0, ""},
		{`{"worktree_id":"a","x":1}`, 400, CodeUnknownField},
		{`{"worktree_id":`, 400, CodeBadJSON},
		{`{} {}`, 400, CodeBadJSON},
		{`{"worktree_id":"` + strings.Repeat("a", 100) + `"}`, 413, CodeTooLarge},
	}
	for _, tc := range cases {
		var r ResolveRequest
		err := DecodeStrict(strings.NewReader(tc.in), 64, &r)
		if tc.status == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		e, ok := AsError(err)
		if !ok || e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%.30s: %v, want %d %s", tc.in, err, tc.status, tc.code)
		}
	}
}

// FuzzEnvelope feeds hostile bodies to the envelope decoder and validator:
// they must refuse or accept without panicking, and an accepted envelope's
// digest must survive a JSON round trip.
func FuzzEnvelope(f *testing.F) {
	b, _ := json.Marshal(validEnvelope())
	f.Add(b)
	f.Add([]byte(`{"identity":"","type":"gap","gap":{"kind":"outage","from_seq":1,"to_seq":0}}`))
	f.Add([]byte(`{"type":"action_start","action_start":{"action_id":"x","tool":"Bash","class":"edit","source":{"head":"h"}}}`))
	id := strings.Repeat("a", 64)
	for _, v := range []string{"9223372036854775807", "-9223372036854775808", "1099511627776", "1099511627777", "2147483648", "1.5", "1e19", `"1"`} {
		f.Add([]byte(`{"identity":"` + id + `","type":"events","work_id":"w","generation":1,"session":"s","events":[{"seq":` + v + `,"kind":"turn_end","observed_at":` + v + `}]}`))
		f.Add([]byte(`{"identity":"` + id + `","type":"usage","work_id":"w","generation":` + v + `,"session":"s","usage":{"scope":"request","message_id":"m","input_tokens":` + v + `,"output_tokens":null,"cache_creation_input_tokens":0,"cache_read_input_tokens":` + v + `}}`))
		f.Add([]byte(`{"identity":"` + id + `","type":"action_finish","work_id":"w","generation":1,"session":"s","action_finish":{"action_id":"a","result":"failed","verification":"unknown","exit_code":` + v + `,"finished_at":` + v + `}}`))
		f.Add([]byte(`{"identity":"` + id + `","type":"gap","work_id":"w","generation":1,"session":"s","gap":{"kind":"outage","from_seq":` + v + `,"to_seq":` + v + `}}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var e Envelope
		if err := DecodeBytesStrict(body, &e); err != nil {
			if _, ok := AsError(err); !ok {
				t.Fatalf("decode error is not an *Error: %v", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			ae, ok := AsError(err)
			if !ok || ae.Status != 400 {
				t.Fatalf("validation error is not a 400 *Error: %v", err)
			}
			if ae.Reason == ReasonOutOfBounds && (ae.Detail == nil || ae.Detail.Field == "" || !strings.Contains(ae.Message, ae.Detail.Field)) {
				t.Fatalf("out_of_bounds refusal without its field: %+v", ae)
			}
			return
		}
		// Accepted: every integer is within its bound.
		in := func(name string, v, min, max int64) {
			if v < min || v > max {
				t.Fatalf("accepted %s = %d outside %d..%d", name, v, min, max)
			}
		}
		in("generation", e.Generation, 1, MaxGeneration)
		for _, ev := range e.Events {
			in("seq", ev.Seq, 1, MaxSeq)
			in("observed_at", ev.ObservedAt, 0, MaxUnixTime)
		}
		if a := e.ActionStart; a != nil {
			in("observation_order", a.ObservationOrder, 0, MaxSeq)
			in("started_at", a.StartedAt, 0, MaxUnixTime)
		}
		if a := e.ActionFinish; a != nil {
			in("finished_at", a.FinishedAt, 0, MaxUnixTime)
			if a.ExitCode != nil {
				in("exit_code", int64(*a.ExitCode), MinExitCode, MaxExitCode)
			}
		}
		if u := e.Usage; u != nil {
			for _, n := range []*int64{u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens} {
				if n != nil {
					in("token count", *n, 0, MaxTokenCount)
				}
			}
		}
		if g := e.Gap; g != nil {
			in("from_seq", g.FromSeq, 0, MaxSeq)
			in("to_seq", g.ToSeq, 0, MaxSeq)
		}
		d := e.Digest()
		out, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		var again Envelope
		if err := DecodeBytesStrict(out, &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("re-validate: %v", err)
		}
		if again.Digest() != d {
			t.Fatal("digest changed over a round trip")
		}
	})
}

func ptr(v int64) *int64 { return &v }
