package postgres

import (
	"fmt"
	"math"
	"strings"
)

// exactSumLimit is the SQLite store's threshold (store.exactSumLimit): a
// column whose absolute values total at least this much is reported
// saturated, even where PostgreSQL's exact numeric sum would fit, so that
// both stores answer alike.
const exactSumLimit = "9.0e18"

// saturatingSums sums integer columns over "FROM ... WHERE ..." without
// failing: PostgreSQL sums bigint exactly (as numeric); a column whose
// absolute values total at least exactSumLimit is math.MaxInt64 (or
// math.MinInt64 for a negative total) with sat[i] set. cols are trusted
// column names, never client input.
func (t *pgTx) saturatingSums(from string, args []any, cols ...string) (sums []int64, sat []bool, err error) {
	sel := make([]string, 0, 2*len(cols))
	for _, c := range cols {
		big := fmt.Sprintf("coalesce(sum(abs(%s::numeric)),0) >= %s", c, exactSumLimit)
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
