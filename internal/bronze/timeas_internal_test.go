package bronze

import (
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
)

// TestTimeAsChanged: only a PostgreSQL time column whose lake type moved
// between the forms of time_as gets the time_as message; a source type
// change gets the general one.
func TestTimeAsChanged(t *testing.T) {
	str, tm, long := iceberg.PrimitiveTypes.String, iceberg.PrimitiveTypes.Time, iceberg.PrimitiveTypes.Int64
	list := func(e iceberg.Type) iceberg.Type { return &iceberg.ListType{Element: e} }
	for _, c := range []struct {
		have, now iceberg.Type
		source    string
		want      bool
	}{
		{tm, str, "time without time zone", true},
		{str, long, "time(3) without time zone", true},
		{long, tm, "time without time zone", true},
		{list(tm), list(str), "time without time zone[]", true},
		{tm, str, "text", false},                // ALTER COLUMN … TYPE text at the source
		{long, str, "varchar(10)", false},       // MySQL TIME → VARCHAR
		{str, long, "time(6)", false},           // MySQL: a VARCHAR became TIME
		{tm, str, "time with time zone", false}, // time → timetz at the source
		{iceberg.PrimitiveTypes.Date, str, "time without time zone", false},
	} {
		if got := timeAsChanged(c.have, change.Field{Name: "c", Type: c.now, SourceType: c.source}); got != c.want {
			t.Errorf("%s → %s (%s): timeAsChanged %v, want %v", c.have, c.now, c.source, got, c.want)
		}
	}
}
