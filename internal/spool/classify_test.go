package spool

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
)

func TestClassifyName(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	tmp := fsutil.TempPrefix + "x1"
	tests := []struct {
		dir, name string
		want      nameClass
		check     func(spoolName) bool
	}{
		{"", commitFile, nameWellFormed, nil},
		{"", cursorFile, nameWellFormed, nil},
		{"", outboxDir, nameWellFormed, nil},
		{"", intakeDir, nameWellFormed, nil},
		{"", stagedDir, nameWellFormed, nil},
		{"", tmp, nameTemp, nil},
		{"", "notes.txt", nameUnexpected, nil},
		{outboxDir, outboxName(7, classStart, 120), nameWellFormed, func(n spoolName) bool {
			return n.outbox.seq == 7 && n.outbox.class == classStart && n.outbox.size == 120
		}},
		{outboxDir, tmp, nameTemp, nil},
		{outboxDir, ackName(7), nameUnexpected, nil},
		{acksDir, ackName(9), nameWellFormed, func(n spoolName) bool { return n.ackSeq == 9 }},
		{acksDir, outboxName(9, classEvent, 1), nameUnexpected, nil},
		{acksDir, tmp, nameTemp, nil},
		{artifactsDir, artifactName(sum, 42), nameWellFormed, func(n spoolName) bool { return n.digest == sum && n.artBytes == 42 }},
		{artifactsDir, sum + ".art", nameUnexpected, nil},
		{compactDir, indexName(3, 11, true), nameWellFormed, func(n spoolName) bool {
			return n.index.gen == 3 && n.index.high == 11 && n.index.pending
		}},
		{compactDir, "index-x", nameUnexpected, nil},
		{compactDir, tmp, nameTemp, nil},
		{intakeDir, intakeName(1, 2, "0123abcd", 10), nameWellFormed, func(n spoolName) bool { return n.intake.size == 10 }},
		{intakeDir, "x.in", nameUnexpected, nil},
		{intakeDir, tmp, nameTemp, nil},
		// Every name of the quarantine and of the staged blobs is an entry.
		{quarantineDir, tmp, nameWellFormed, nil},
		{quarantineDir, "anything", nameWellFormed, nil},
		{stagedDir, "anything", nameWellFormed, nil},
	}
	for _, tc := range tests {
		got := classifyName(tc.dir, tc.name)
		if got.class != tc.want || got.name != tc.name {
			t.Errorf("classifyName(%q, %q) = class %d name %q, want class %d", tc.dir, tc.name, got.class, got.name, tc.want)
			continue
		}
		if tc.check != nil && !tc.check(got) {
			t.Errorf("classifyName(%q, %q): parsed fields %+v", tc.dir, tc.name, got)
		}
	}
}

func TestClassifyNamesOrder(t *testing.T) {
	tmp := fsutil.TempPrefix + "t"
	rec := outboxName(1, classEvent, 5)
	tests := []struct {
		dir   string
		names []string
		want  []string
	}{
		// The outbox's temporaries come after its records and unexpected files.
		{outboxDir, []string{tmp, rec, "junk"}, []string{rec, "junk", tmp}},
		// Elsewhere the listing order is kept.
		{acksDir, []string{tmp, ackName(1), "junk"}, []string{tmp, ackName(1), "junk"}},
		{"", []string{tmp, commitFile}, []string{tmp, commitFile}},
		{outboxDir, nil, []string{}},
	}
	for _, tc := range tests {
		got := []string{}
		for _, n := range classifyNames(tc.dir, tc.names) {
			got = append(got, n.name)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("classifyNames(%q, %q) = %q, want %q", tc.dir, tc.names, got, tc.want)
		}
	}
}

func TestUnexpectedFate(t *testing.T) {
	for dir, want := range map[string]string{
		intakeDir:    "the next lock holder will quarantine it",
		outboxDir:    "recovery will quarantine it",
		acksDir:      "recovery will quarantine it",
		artifactsDir: "recovery will quarantine it",
	} {
		if got := unexpectedFate(dir); got != want {
			t.Errorf("unexpectedFate(%q) = %q, want %q", dir, got, want)
		}
	}
}

func TestSeqGroups(t *testing.T) {
	e := func(seq uint64, name string) outboxEntry { return outboxEntry{seq: seq, name: name} }
	tests := []struct {
		in   []outboxEntry
		want [][]string
	}{
		{nil, nil},
		{[]outboxEntry{e(1, "a")}, [][]string{{"a"}}},
		{[]outboxEntry{e(1, "a"), e(2, "b"), e(2, "c"), e(3, "d")}, [][]string{{"a"}, {"b", "c"}, {"d"}}},
		{[]outboxEntry{e(4, "a"), e(4, "b"), e(4, "c")}, [][]string{{"a", "b", "c"}}},
	}
	for _, tc := range tests {
		var got [][]string
		for _, g := range seqGroups(tc.in) {
			var names []string
			for _, x := range g {
				names = append(names, x.name)
			}
			got = append(got, names)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("seqGroups(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
