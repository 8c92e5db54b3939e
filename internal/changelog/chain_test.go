package changelog

import (
	"errors"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

func TestCheckChain(t *testing.T) {
	m := func(pos int, merged ...incmeta.Merged) *incmeta.Meta {
		return &incmeta.Meta{Position: pos, Merged: merged}
	}
	cases := []struct {
		name  string
		metas []*incmeta.Meta
		want  error
	}{
		{"contiguous", []*incmeta.Meta{m(0), m(1), m(2)}, nil},
		{"merged hole", []*incmeta.Meta{m(0), m(3, incmeta.Merged{From: 1, To: 2}), m(4)}, nil},
		{"two ranges", []*incmeta.Meta{m(0), m(4, incmeta.Merged{From: 1, To: 1}, incmeta.Merged{From: 2, To: 3})}, nil},
		{"merged from 0", []*incmeta.Meta{m(2, incmeta.Merged{From: 0, To: 1})}, nil},
		{"hole without a merge", []*incmeta.Meta{m(0), m(2)}, ErrNoIncrement},
		{"first missing", []*incmeta.Meta{m(1)}, ErrNoIncrement},
		{"merge overlaps", []*incmeta.Meta{m(0), m(1), m(2, incmeta.Merged{From: 1, To: 1})}, ErrUnreadableArchive},
		{"range not ending before the position", []*incmeta.Meta{m(0), m(3, incmeta.Merged{From: 1, To: 1})}, ErrUnreadableArchive},
		{"ranges with a hole", []*incmeta.Meta{m(0), m(4, incmeta.Merged{From: 1, To: 1}, incmeta.Merged{From: 3, To: 3})}, ErrUnreadableArchive},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckChain(tc.metas)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("CheckChain: %v, want %v", err, tc.want)
			}
		})
	}
}
