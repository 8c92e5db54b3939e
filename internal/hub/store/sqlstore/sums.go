package sqlstore

import (
	"fmt"
	"math"
	"strings"
)

// exactSumLimit is the largest total of absolute values below which no
// partial sum of int64 values can leave the int64 range: SQLite's sum() is
// then exact and cannot fail. total() (a float that never fails) decides.
// Both engines use it, so that they answer alike: a column whose absolute
// values total at least this much is saturated even where PostgreSQL's
// exact numeric sum would fit.
const exactSumLimit = 9.0e18

// exactSumLimitSQL is exactSumLimit as a numeric literal.
const exactSumLimitSQL = "9.0e18"

// saturatingSums sums integer columns over the rows of "FROM ... WHERE ..."
// (from, with args) without ever failing on overflow. A column whose
// absolute values total below exactSumLimit gets its exact sum; any other
// column is saturated: math.MaxInt64 (or math.MinInt64 for a negative
// total) with sat[i] set, so a caller can say the sum is capped rather than
// exact. cols are trusted column expressions, never client input.
func (t *Tx) saturatingSums(from string, args []any, cols ...string) (sums []int64, sat []bool, err error) {
	if t.d.NumericSums {
		return t.numericSums(from, args, cols)
	}
	return t.probedSums(from, args, cols)
}

// numericSums decides in one query, on an engine that sums bigint exactly
// (as numeric): the sign of a saturated column's total, or its sum.
func (t *Tx) numericSums(from string, args []any, cols []string) (sums []int64, sat []bool, err error) {
	sel := make([]string, 0, 2*len(cols))
	for _, c := range cols {
		big := fmt.Sprintf("coalesce(sum(abs(%s::numeric)),0) >= %s", c, exactSumLimitSQL)
		sel = append(sel, big, fmt.Sprintf("CASE WHEN %s THEN sign(coalesce(sum(%s::numeric),0))::bigint ELSE coalesce(sum(%s),0)::bigint END", big, c, c))
	}
	sums, sat = make([]int64, len(cols)), make([]bool, len(cols))
	dest := make([]any, 0, 2*len(cols))
	for i := range cols {
		dest = append(dest, &sat[i], &sums[i])
	}
	if err := t.row("SELECT "+strings.Join(sel, ",")+" "+from, args, dest...); err != nil {
		return nil, nil, err
	}
	for i := range cols {
		if sat[i] {
			if sums[i] < 0 {
				sums[i] = math.MinInt64
			} else {
				sums[i] = math.MaxInt64
			}
		}
	}
	return sums, sat, nil
}

// probedSums first totals each column's absolute values as a float
// (SQLite's total() never fails; abs of a real, since abs(-2^63) itself
// overflows), then sums exactly the columns below exactSumLimit.
func (t *Tx) probedSums(from string, args []any, cols []string) (sums []int64, sat []bool, err error) {
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
