package verify

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// timeAsOf names the time_as setting under which a PostgreSQL time column
// lands as lake type t ("" when t is none of them).
func timeAsOf(t arrow.DataType) string {
	if l, ok := t.(arrow.ListLikeType); ok {
		t = l.Elem()
	}
	switch t.ID() {
	case arrow.TIME64:
		return "time"
	case arrow.STRING, arrow.LARGE_STRING:
		return "text"
	case arrow.INT64:
		return "micros"
	}
	return ""
}

// timeAsMismatch explains why a table cannot be compared when a
// PostgreSQL time column of st is held in silver (schema sc) under another
// time_as than the one verify decodes the source by; "" when none is.
// Without it every row would be reported different.
func timeAsMismatch(st *SourceTable, sc *arrow.Schema) string {
	for _, c := range st.Cols {
		if !strings.HasPrefix(c.TypeName, "time") || !strings.Contains(c.TypeName, "without time zone") {
			continue
		}
		ix := sc.FieldIndices(c.Name)
		if len(ix) == 0 {
			continue
		}
		lakeAs, srcAs := timeAsOf(sc.Field(ix[0]).Type), timeAsOf(c.Arrow)
		if lakeAs != "" && srcAs != "" && lakeAs != srcAs {
			return fmt.Sprintf("column %q (%s) was captured under time_as: %s, but verify reads the source under time_as: %s; "+
				"run verify with the time_as the pipeline runs with (--time-as %s)", c.Name, c.TypeName, lakeAs, srcAs, lakeAs)
		}
	}
	return ""
}
