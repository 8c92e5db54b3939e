package store

import (
	"fmt"
	"math"
	"strings"
)

// exactSumLimit is the largest total of absolute values below which no
// partial sum of int64 values can leave the int64 range: SQLite's sum() is
// then exact and cannot fail. total() (a float that never fails) decides.
const exactSumLimit = 9.0e18

// saturatingSums sums integer columns over the rows of "FROM ... WHERE ..."
// (from, with args) without ever failing on overflow. A column whose
// absolute values total below exactSumLimit gets its exact sum; any other
// column is saturated: math.MaxInt64 (or math.MinInt64 for a negative
// total) with sat[i] set, so a caller can say the sum is capped rather than
// exact. The probe takes abs of a real, since abs(-2^63) itself overflows.
// cols are trusted column expressions, never client input.
func (t *sqliteTx) saturatingSums(from string, args []any, cols ...string) (sums []int64, sat []bool, err error) {
	probe := make([]string, 0, 2*len(cols))
	for _, c := range cols {
		probe = append(probe, fmt.Sprintf("total(abs(%s*1.0))", c), fmt.Sprintf("total(%s)", c))
	}
	totals := make([]float64, 2*len(cols))
	dest := make([]any, len(totals))
	for i := range totals {
		dest[i] = &totals[i]
	}
	if err := t.row("SELECT "+strings.Join(probe, ",")+" "+from, args, dest...); err != nil {
		return nil, nil, err
	}
	sums, sat = make([]int64, len(cols)), make([]bool, len(cols))
	exact := make([]string, 0, len(cols))
	for i, c := range cols {
		abs, tot := totals[2*i], totals[2*i+1]
		// NaN cannot arise from integers; a REAL written directly into the
		// database could make one: treat it as saturated too.
		if abs < exactSumLimit {
			exact = append(exact, fmt.Sprintf("coalesce(sum(%s),0)", c))
			continue
		}
		sat[i] = true
		sums[i] = math.MaxInt64
		if tot < 0 {
			sums[i] = math.MinInt64
		}
	}
	if len(exact) == 0 {
		return sums, sat, nil
	}
	vals := make([]int64, len(exact))
	dest = dest[:0]
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if err := t.row("SELECT "+strings.Join(exact, ",")+" "+from, args, dest...); err != nil {
		return nil, nil, err
	}
	j := 0
	for i := range cols {
		if !sat[i] {
			sums[i] = vals[j]
			j++
		}
	}
	return sums, sat, nil
}
