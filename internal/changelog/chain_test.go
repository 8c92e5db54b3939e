package changelog

import (
	"errors"
	"testing"
)

func TestCheckChain(t *testing.T) {
	m := func(pos int, merged ...Merged) *Meta { return &Meta{Position: pos, Merged: merged} }
	cases := []struct {
		name  string
		metas []*Meta
		want  error
	}{
		{"contiguous", []*Meta{m(0), m(1), m(2)}, nil},
		{"merged hole", []*Meta{m(0), m(3, Merged{From: 1, To: 2}), m(4)}, nil},
		{"two ranges", []*Meta{m(0), m(4, Merged{From: 1, To: 1}, Merged{From: 2, To: 3})}, nil},
		{"merged from 0", []*Meta{m(2, Merged{From: 0, To: 1})}, nil},
		{"hole without a merge", []*Meta{m(0), m(2)}, ErrNoIncrement},
		{"first missing", []*Meta{m(1)}, ErrNoIncrement},
		{"merge overlaps", []*Meta{m(0), m(1), m(2, Merged{From: 1, To: 1})}, ErrUnreadableArchive},
		{"range not ending before the position", []*Meta{m(0), m(3, Merged{From: 1, To: 1})}, ErrUnreadableArchive},
		{"ranges with a hole", []*Meta{m(0), m(4, Merged{From: 1, To: 1}, Merged{From: 3, To: 3})}, ErrUnreadableArchive},
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
