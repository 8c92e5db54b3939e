// Package attribution says who last wrote each line of a file: an agent's
// tool call, work done outside the agent, or nobody since the changelog
// began (before capture). It replays the changelog's increments of the file
// with a line diff per position, and turns the result into per-change
// summaries, git notes and Agent Trace records.
package attribution

// MaxEdits bounds the edit distance Match searches: past it, the lines
// between the common head and tail count as all replaced. The search keeps
// one row per edit, so its memory is quadratic in this bound (8 MB).
const MaxEdits = 1000

// Match returns, for each line of b, the index of the line of a it keeps
// (a shortest edit script by Myers' algorithm), or -1 for a line b adds.
// Matched indexes increase.
func Match(a, b []string) []int {
	out := make([]int, len(b))
	for i := range out {
		out[i] = -1
	}
	// The common head and tail need no search.
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		out[head] = head
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		out[len(b)-1-tail] = len(a) - 1 - tail
		tail++
	}
	ma, mb := a[head:len(a)-tail], b[head:len(b)-tail]
	for _, p := range myers(ma, mb) {
		out[head+p[1]] = head + p[0]
	}
	return out
}

// myers returns the matched pairs (index in a, index in b) of a shortest
// edit script from a to b, or none when it needs more than MaxEdits edits.
func myers(a, b []string) [][2]int {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return nil
	}
	maxD := min(n+m, MaxEdits)
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
				break
			}
		}
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
	}
	if found < 0 {
		return nil
	}
	// Walk back through the saved rows (row d holds k in -d-1..d+1): each
	// step back is a snake (matched lines) after one edit.
	var pairs [][2]int
	x, y := n, m
	at := func(d, k int) int { return trace[d][k+d+1] }
	for d := found; d > 0; d-- {
		k := x - y
		pk := k - 1
		if k == -d || (k != d && at(d-1, k-1) < at(d-1, k+1)) {
			pk = k + 1
		}
		px := at(d-1, pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			pairs = append(pairs, [2]int{x, y})
		}
		x, y = px, py
	}
	for x > 0 && y > 0 {
		x--
		y--
		pairs = append(pairs, [2]int{x, y})
	}
	for i, j := 0, len(pairs)-1; i < j; i, j = i+1, j-1 {
		pairs[i], pairs[j] = pairs[j], pairs[i]
	}
	return pairs
}
