package transcript

import (
	"encoding/json"
	"testing"

	"github.com/agentscm/agentscm/internal/event"
)

// FuzzParserLine feeds arbitrary lines to the record parser: it never
// panics, never keeps a body unless asked, never invents a count, and every
// record carries a usable time and the observed session.
func FuzzParserLine(f *testing.F) {
	f.Add([]byte(assistantLine(sess, "msg_1", textBlock("a"), 1, 2)), false)
	f.Add([]byte(userLine(sess, "hi")), true)
	f.Add([]byte(toolResultLine(sess, "toolu_1", "x", true)), true)
	f.Add([]byte(costState), false)
	f.Add([]byte(`{"type":"assistant","sessionId":"`+sess+`","message":{"id":"m","content":[{"type":"thinking","thinking":"T"}],"usage":{"input_tokens":-5}}}`), true)
	f.Add([]byte(`{"type":"user","message":{"content":[{"type":"text"},{"type":"tool_result","tool_use_id":"a b"}]}}`), true)
	f.Add([]byte(`[1,2,3]`), false)
	f.Fuzz(func(t *testing.T, line []byte, bodies bool) {
		p := Parser{Session: sess, Now: now, Select: Selection{Prompts: true, AssistantText: true, Tools: true, Bodies: bodies}}
		var out []event.Record
		// Twice: the second line exercises the parser's state.
		out = p.Line(line, out)
		out = p.Line(line, out)
		out = p.Flush(out)
		out = p.Gaps(out)
		for _, r := range out {
			if r.SessionID != sess || r.ObservedAt.Unix() <= 0 || r.ObservedAt.Unix() > maxUnixTime {
				t.Fatalf("record %+v", r)
			}
			if r.Body != nil && !bodies {
				t.Fatalf("body kept without being asked: %+v", r)
			}
			if u := r.Usage; u != nil {
				for _, n := range []*int64{u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens} {
					if n != nil && (*n < 0 || *n > maxTokenCount) {
						t.Fatalf("count outside the Hub's bound %+v", u)
					}
				}
				if u.Scope != event.UsageScopeRequest && u.Scope != event.UsageScopeSessionCumulative {
					t.Fatalf("scope %q", u.Scope)
				}
				if u.Scope == event.UsageScopeRequest && !validID(u.MessageID) {
					t.Fatalf("request usage without identity %+v", u)
				}
			}
			if (r.Kind == event.KindGap) != (r.Gap != nil) {
				t.Fatalf("gap shape %+v", r)
			}
		}
	})
}

// FuzzScanHead: the fast top-level scan accepts every valid JSON object and
// agrees with encoding/json on its type and sessionId.
func FuzzScanHead(f *testing.F) {
	f.Add([]byte(assistantLine(sess, "msg_1", textBlock(`a "quoted" \\ text`), 1, 2)))
	f.Add([]byte(costState))
	f.Add([]byte(`{"type":"x","sessionId":null,"a":[1,-2.5e3,true,false,null,{"b":"\"}"}]}`))
	f.Add([]byte(`{"sessionId":"a\u0062c","type":"user"} `))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		h, ok := scanHead(line)
		// Keys match exactly, as Claude Code writes them (encoding/json's
		// struct decoding would also match "TYPE"; a map does not).
		var obj map[string]json.RawMessage
		// json.Unmarshal accepts the literal null into a map (leaving it
		// nil): null is not an object, so scanHead refusing it is right.
		if json.Unmarshal(line, &obj) != nil || obj == nil {
			return // not an object: scanHead may accept or refuse
		}
		if !ok {
			t.Fatalf("scanHead refused a valid object: %q", line)
		}
		var typ, session string
		if v, ok := obj["type"]; ok && json.Unmarshal(v, &typ) == nil && h.typ != typ {
			t.Fatalf("type %q, want %q", h.typ, typ)
		}
		v, has := obj["sessionId"]
		if has && string(v) == "null" {
			has = false
		}
		if has != h.hasSession {
			t.Fatalf("hasSession %v, want %v", h.hasSession, has)
		}
		if has && json.Unmarshal(v, &session) == nil && h.session != session {
			t.Fatalf("session %q, want %q", h.session, session)
		}
	})
}
