package api

import (
	"strings"
	"testing"
)

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"0", 0, true}, {"17", 17, true}, {"999999", 999999, true},
		{"1000000", 0, false}, {"-1", 0, false}, {"007", 0, false}, {"+3", 0, false}, {"", 0, false}, {"1e3", 0, false},
	} {
		got, err := ParsePosition(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParsePosition(%q) = %d, %v", tc.in, got, err)
		}
	}
}

func TestValidDigestAndGrant(t *testing.T) {
	if !IsDigest(strings.Repeat("0a", 32)) || IsDigest(strings.Repeat("0A", 32)) || IsDigest("abc") {
		t.Error("ValidDigest")
	}
	if err := DefaultGrant().Validate(); err != nil {
		t.Error(err)
	}
	for _, g := range []Grant{{0, 1}, {1, 0}, {MaxGrantObjects + 1, 1}, {1, MaxGrantBytes + 1}, {-1, 5}} {
		if err := g.Validate(); err == nil {
			t.Errorf("grant %+v accepted", g)
		}
	}
	if q := (IncrementUpload{Digest: "d", Session: "a b&c"}).Query(); q != "digest=d&session=a+b%26c" {
		t.Errorf("query %q", q)
	}
}
