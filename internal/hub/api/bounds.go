package api

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"unicode/utf8"
)

// Integer bounds of client input, checked at admission. Each is far above
// anything a real client sends, and low enough that no sum the Hub computes
// over accepted values can overflow int64 in practice (the change record
// still saturates, and says so, should a sum reach 2^63-1). A value outside
// its bound is refused with 400 bad_request, reason out_of_bounds and
// Detail.Field naming the field; it is never clamped.
const (
	// MaxSeq bounds an event's seq, a gap's from_seq/to_seq and an action
	// start's observation_order: 2^40 (about 1.1e12) events in one stream.
	MaxSeq = 1 << 40
	// MaxGeneration bounds a generation (envelopes, expect_generation);
	// only a takeover raises a Work's generation, by one.
	MaxGeneration = 1<<31 - 1
	// MaxUnixTime bounds every time field in Unix seconds
	// (observed_at, started_at, finished_at): 9999-12-31T23:59:59Z.
	MaxUnixTime = 253402300799
	// MaxTokenCount bounds each usage token count: 2^40 (about 1.1e12)
	// tokens in one provider request or one session's running total. Summing
	// 2^23 (8.4 million) records at the bound is needed to reach 2^63.
	MaxTokenCount = 1 << 40
	// MinExitCode and MaxExitCode bound action_finish.exit_code (the
	// capture reads it as a 32-bit integer).
	MinExitCode = math.MinInt32
	MaxExitCode = math.MaxInt32
)

// ReasonOutOfBounds refines a 400 bad_request whose Detail.Field names an
// integer field outside its bound.
const ReasonOutOfBounds = "out_of_bounds"

// CheckInt refuses v unless min <= v <= max, naming field (a JSON path such
// as "events[3].seq") in the message and in Detail.Field.
func CheckInt(field string, v, min, max int64) *Error {
	if v >= min && v <= max {
		return nil
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Reason: ReasonOutOfBounds,
		Message: fmt.Sprintf("%s must be %d to %d, not %d", field, min, max, v),
		Detail:  &ErrorDetail{Field: field}}
}

// checkBounds checks every integer field of an envelope against its bound.
func (e *Envelope) checkBounds() *Error {
	if err := CheckInt("generation", e.Generation, 1, MaxGeneration); err != nil {
		return err
	}
	for i, ev := range e.Events {
		if err := CheckInt(fmt.Sprintf("events[%d].seq", i), ev.Seq, 1, MaxSeq); err != nil {
			return err
		}
		if err := CheckInt(fmt.Sprintf("events[%d].observed_at", i), ev.ObservedAt, 0, MaxUnixTime); err != nil {
			return err
		}
	}
	if a := e.ActionStart; a != nil {
		if err := CheckInt("action_start.observation_order", a.ObservationOrder, 0, MaxSeq); err != nil {
			return err
		}
		if err := CheckInt("action_start.started_at", a.StartedAt, 0, MaxUnixTime); err != nil {
			return err
		}
	}
	if f := e.ActionFinish; f != nil {
		if f.ExitCode != nil {
			if err := CheckInt("action_finish.exit_code", int64(*f.ExitCode), MinExitCode, MaxExitCode); err != nil {
				return err
			}
		}
		if err := CheckInt("action_finish.finished_at", f.FinishedAt, 0, MaxUnixTime); err != nil {
			return err
		}
	}
	if u := e.Usage; u != nil {
		for _, c := range []struct {
			name string
			n    *int64
		}{{"usage.input_tokens", u.InputTokens}, {"usage.output_tokens", u.OutputTokens},
			{"usage.cache_creation_input_tokens", u.CacheCreationInputTokens}, {"usage.cache_read_input_tokens", u.CacheReadInputTokens}} {
			if c.n != nil {
				if err := CheckInt(c.name, *c.n, 0, MaxTokenCount); err != nil {
					return err
				}
			}
		}
	}
	if g := e.Gap; g != nil {
		if err := CheckInt("gap.from_seq", g.FromSeq, 0, MaxSeq); err != nil {
			return err
		}
		if err := CheckInt("gap.to_seq", g.ToSeq, 0, MaxSeq); err != nil {
			return err
		}
	}
	return nil
}

// ReasonBadText refines a 400 bad_request whose Detail.Field names a free
// text field that is too long, not UTF-8 or holds a NUL byte.
const ReasonBadText = "bad_text"

// CheckText refuses a free text field (a note: newlines and tabs allowed)
// longer than max bytes, not valid UTF-8, or holding a NUL byte, naming
// field in the message and in Detail.Field. Every store keeps what it is
// given byte for byte, but PostgreSQL's text type holds neither NUL nor
// invalid UTF-8, so both stores refuse them at admission alike.
func CheckText(field, s string, max int) *Error {
	why := ""
	switch {
	case len(s) > max:
		why = fmt.Sprintf("is longer than %d bytes", max)
	case !utf8.ValidString(s):
		why = "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		why = "holds a NUL byte"
	default:
		return nil
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest, Reason: ReasonBadText,
		Message: fmt.Sprintf("%s %s", field, why), Detail: &ErrorDetail{Field: field}}
}

// Validate checks a checkpoint request's integer field and its note.
func (r CheckpointRequest) Validate() error {
	if err := CheckText("note", r.Note, MaxTextLen); err != nil {
		return err
	}
	if r.ExpectGeneration != nil {
		if err := CheckInt("expect_generation", *r.ExpectGeneration, 1, MaxGeneration); err != nil {
			return err
		}
	}
	return nil
}

// GenerationChanged reports whether err is a 409 generation_changed
// conflict, and the Work's generation it names.
func GenerationChanged(err error) (int64, bool) {
	e, ok := AsError(err)
	if !ok || e.Code != CodeConflict || e.Reason != ReasonGenerationChanged {
		return 0, false
	}
	if e.Detail == nil {
		return 0, true
	}
	return e.Detail.Generation, true
}
