package attribution

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
)

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// lcsLen is the length of a longest common subsequence, by dynamic
// programming: the reference Match's shortest edit script must reach.
func lcsLen(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want []int
	}{
		{"", "", []int{}},
		{"", "x,y", []int{-1, -1}},
		{"x,y", "", []int{}},
		{"a,b,c", "a,b,c", []int{0, 1, 2}},
		{"a,b,c", "a,x,c", []int{0, -1, 2}},
		{"a,b,c", "a,b,c,d", []int{0, 1, 2, -1}},
		{"a,b,c", "z,a,b,c", []int{-1, 0, 1, 2}},
		{"a,b,c,d", "a,d", []int{0, 3}},
		{"a,b,c,a,b,b,a", "c,b,a,b,a,c", nil}, // Myers' paper example: checked by length
		{"x,a,y,a,z", "a,a", []int{1, 3}},
		{"a,b", "b,a", nil},
	} {
		got := Match(lines(tc.a), lines(tc.b))
		if tc.want != nil && !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		checkMatch(t, lines(tc.a), lines(tc.b), got)
	}
}

// checkMatch asserts that m is a valid, maximal matching of b onto a.
func checkMatch(t *testing.T, a, b []string, m []int) {
	t.Helper()
	last, n := -1, 0
	for j, i := range m {
		if i < 0 {
			continue
		}
		if i <= last || a[i] != b[j] {
			t.Fatalf("Match(%q, %q) = %v: not an increasing match of equal lines", a, b, m)
		}
		last = i
		n++
	}
	if want := lcsLen(a, b); n != want {
		t.Fatalf("Match(%q, %q) = %v keeps %d lines, a longest common subsequence has %d", a, b, m, n, want)
	}
}

func TestMatchRandom(t *testing.T) {
	r := rand.New(rand.NewSource(34))
	for i := 0; i < 2000; i++ {
		gen := func() []string {
			out := make([]string, r.Intn(12))
			for k := range out {
				out[k] = fmt.Sprint(r.Intn(4))
			}
			return out
		}
		a, b := gen(), gen()
		checkMatch(t, a, b, Match(a, b))
	}
}

// TestMatchPastMaxEdits: past the bound the middle counts as replaced,
// the common head and tail still match.
func TestMatchPastMaxEdits(t *testing.T) {
	var a, b []string
	a, b = append(a, "head"), append(b, "head")
	for i := 0; i < MaxEdits; i++ {
		a = append(a, fmt.Sprint("a", i))
		b = append(b, fmt.Sprint("b", i))
	}
	a, b = append(a, "tail"), append(b, "tail")
	m := Match(a, b)
	if m[0] != 0 || m[len(m)-1] != len(a)-1 || m[1] != -1 {
		t.Fatalf("head %d, tail %d, middle %d", m[0], m[len(m)-1], m[1])
	}
}

func TestAttribute(t *testing.T) {
	v := func(owner int, content string, prefer ...int) Version {
		return Version{Owner: owner, Present: true, Lines: lines(content), Prefer: prefer}
	}
	gone := Version{Owner: 9}
	for _, tc := range []struct {
		name    string
		history []Version
		want    [][]int
	}{
		{"created by one call", []Version{v(1, "a,b")}, [][]int{{1, 1}}},
		{"before capture, then an append", []Version{v(0, "a,b"), v(1, "a,b,c")}, [][]int{{0, 0}, {0, 0, 1}}},
		{"an edit of one line", []Version{v(1, "a,b,c"), v(2, "a,B,c")}, [][]int{{1, 1, 1}, {1, 2, 1}}},
		{"write, append, outside edit, edit", []Version{
			v(1, "one,two,three"), v(2, "one,two,three,four"), v(3, "one,TWO,three,four"), v(4, "one,TWO,three,FOUR"),
		}, [][]int{{1, 1, 1}, {1, 1, 1, 2}, {1, 3, 1, 2}, {1, 3, 1, 4}}},
		{"deleted and written again", []Version{v(1, "a"), gone, v(2, "a")}, [][]int{{1}, nil, {2}}},
		{"a rewind keeps the owners of its target", []Version{
			v(1, "a,b"), v(2, "a,x"), v(3, "a,b", 0),
		}, [][]int{{1, 1}, {1, 2}, {1, 1}}},
		{"a revert brings removed lines back with their owners", []Version{
			v(1, "a,b,c"), v(2, "a,c"), {Owner: 3, Present: true, Lines: lines("a,b,c,d"), Also: []int{0}},
		}, [][]int{{1, 1, 1}, {1, 1}, {1, 1, 1, 3}}},
		{"a swapped line is new", []Version{v(1, "a,b"), v(2, "b,a")}, [][]int{{1, 1}, {1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Attribute(tc.history); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplitLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"a\n", []string{"a"}},
		{"a\r\nb", []string{"a", "b"}},
		{"\n\n", []string{"", ""}},
	} {
		if got := SplitLines([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitLines(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
