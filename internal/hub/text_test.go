package hub_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestCheckpointNoteText: a checkpoint note is stored byte for byte when it
// is UTF-8 text (newlines, tabs and any script included), and refused at
// admission with 400 naming the field when it holds a NUL byte, is not
// UTF-8 or is too long — on SQLite and on PostgreSQL alike (PostgreSQL's
// text type cannot hold the refused ones, so without the check it would
// answer 500 where SQLite stores them).
func TestCheckpointNoteText(t *testing.T) {
	ctx := context.Background()
	e := newMatrixEnv(t)
	p, err := e.svc.EnsureLocal(ctx, "alice", "proj")
	if err != nil {
		t.Fatal(err)
	}
	w := e.freshWork(t, "wt-0")
	path := "/v1/repositories/proj/works/" + w.ID + "/checkpoints"
	for _, tc := range []struct {
		name, note string
		http       bool // send over HTTP (JSON cannot carry invalid UTF-8)
	}{
		{"NUL over HTTP", "before\x00after", true},
		{"only NUL", "\x00", true},
		{"NUL", "a\x00", false},
		{"invalid UTF-8", "caf\xe9", false},
		{"truncated rune", "\xe2\x82", false},
		{"too long", strings.Repeat("x", api.MaxTextLen+1), false},
		{"too long over HTTP", strings.Repeat("é", api.MaxTextLen/2+1), true},
	} {
		req := api.CheckpointRequest{Action: api.CheckpointPause, Note: tc.note}
		var got *api.Error
		if tc.http {
			b, _ := json.Marshal(req)
			status, body := e.do(t, "POST", path, e.tokens[callerReadWrite], b)
			var eb api.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
				t.Fatalf("%s: status %d: %s", tc.name, status, body)
			}
			if status != 400 {
				t.Fatalf("%s: status %d: %s", tc.name, status, body)
			}
			got = eb.Error
		} else {
			_, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, req)
			e, ok := api.AsError(err)
			if !ok || e.Status != 400 {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got = e
		}
		if got.Detail == nil || got.Detail.Field != "note" || got.Reason != api.ReasonBadText || !strings.Contains(got.Message, "note") {
			t.Fatalf("%s: %+v", tc.name, got)
		}
	}
	// The refusals changed nothing; these notes are kept as given.
	kept := []string{"line one\nline two\r\n\ttabbed", "日本語 ✓ émoji 🚀", strings.Repeat("ü", api.MaxTextLen/2)}
	actions := []string{api.CheckpointPause, api.CheckpointResume, api.CheckpointPause}
	for i, note := range kept {
		if _, err := e.svc.Checkpoint(ctx, p, "proj", w.ID, api.CheckpointRequest{Action: actions[i], Note: note}); err != nil {
			t.Fatalf("note %q: %v", note, err)
		}
	}
	cur, err := e.svc.GetWork(ctx, p, "proj", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, c := range cur.Checkpoints {
		if c.Note != "" {
			notes = append(notes, c.Note)
		}
	}
	if len(notes) != len(kept) {
		t.Fatalf("notes %q, want %q", notes, kept)
	}
	for i := range kept {
		if notes[i] != kept[i] {
			t.Fatalf("note %d = %q, want %q", i, notes[i], kept[i])
		}
	}
}
