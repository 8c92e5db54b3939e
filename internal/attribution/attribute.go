package attribution

// Version is one state of a file in the history Attribute replays: its
// lines after one position, and who wrote what that position changed.
type Version struct {
	// Owner is the owner (an index chosen by the caller) of every line
	// this version adds.
	Owner int
	// Present is false when the file does not exist in this version.
	Present bool
	Lines   []string
	// Prefer lists earlier versions (indexes into the history) whose lines,
	// with their owners, this version takes before the previous version's:
	// a rewind to position N restores N's lines, so they keep N's owners.
	Prefer []int
	// Also lists earlier versions tried after the previous one: a revert
	// of call N brings back the lines N removed, with their owners then.
	Also []int
}

// Attribute replays history in order and returns, for every version, the
// owner of each of its lines (nil for an absent version). A line a
// version keeps from the version before it (by the line diff of Match)
// keeps its owner; every other line is the version's own. The first
// version is compared with nothing, so all its lines are its own.
func Attribute(history []Version) [][]int {
	owners := make([][]int, len(history))
	prev := -1
	for i, v := range history {
		if !v.Present {
			prev = i
			continue
		}
		own := make([]int, len(v.Lines))
		for j := range own {
			own[j] = -1
		}
		bases := append(append(append([]int(nil), v.Prefer...), prev), v.Also...)
		for _, b := range bases {
			if b < 0 || b >= i || !history[b].Present {
				continue
			}
			for j, k := range Match(history[b].Lines, v.Lines) {
				if own[j] < 0 && k >= 0 {
					own[j] = owners[b][k]
				}
			}
		}
		for j := range own {
			if own[j] < 0 {
				own[j] = v.Owner
			}
		}
		owners[i] = own
		prev = i
	}
	return owners
}

// SplitLines splits content into lines without their line ends ("\n" or
// "\r\n"); a final line without a line end is a line too.
func SplitLines(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == '\n' {
			end := i
			if end > start && b[end-1] == '\r' {
				end--
			}
			out = append(out, string(b[start:end]))
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}
