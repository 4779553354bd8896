package gold

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestMapType: every DuckDB result type gold stores lands as the Arrow
// (Iceberg) type a reader expects; any other is an error naming the
// column, its type and what to cast it to.
func TestMapType(t *testing.T) {
	for _, c := range []struct {
		duck string
		want arrow.DataType
	}{
		{"TINYINT", arrow.PrimitiveTypes.Int32},
		{"SMALLINT", arrow.PrimitiveTypes.Int32},
		{"INTEGER", arrow.PrimitiveTypes.Int32},
		{"UTINYINT", arrow.PrimitiveTypes.Int32},
		{"USMALLINT", arrow.PrimitiveTypes.Int32},
		{"BIGINT", arrow.PrimitiveTypes.Int64},
		{"UINTEGER", arrow.PrimitiveTypes.Int64},
		{"UBIGINT", arrow.PrimitiveTypes.Int64},
		{"HUGEINT", arrow.PrimitiveTypes.Int64},
		{"FLOAT", arrow.PrimitiveTypes.Float32},
		{"DOUBLE", arrow.PrimitiveTypes.Float64},
		{"DECIMAL(38,2)", &arrow.Decimal128Type{Precision: 38, Scale: 2}},
		{"DECIMAL(12, 4)", &arrow.Decimal128Type{Precision: 12, Scale: 4}},
		{"VARCHAR", arrow.BinaryTypes.String},
		{"BOOLEAN", arrow.FixedWidthTypes.Boolean},
		{"DATE", arrow.FixedWidthTypes.Date32},
		{"TIMESTAMP", &arrow.TimestampType{Unit: arrow.Microsecond}},
		{"TIMESTAMP_NS", &arrow.TimestampType{Unit: arrow.Microsecond}},
		{"TIMESTAMP WITH TIME ZONE", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
	} {
		got, err := MapType("c", c.duck)
		if err != nil {
			t.Errorf("%s: %v", c.duck, err)
			continue
		}
		if !arrow.TypeEqual(got.Arrow, c.want) {
			t.Errorf("%s: stored as %s, want %s", c.duck, got.Arrow, c.want)
		}
	}
	for _, duck := range []string{"INTERVAL", "BLOB", "UUID", "TIME", "INTEGER[]", "STRUCT(a INTEGER)", "MAP(VARCHAR, INTEGER)", "DECIMAL(40,2)"} {
		_, err := MapType("total_time", duck)
		if err == nil {
			t.Errorf("%s: stored, want an error", duck)
			continue
		}
		for _, want := range []string{`"total_time"`, duck, "CAST"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", duck, err, want)
			}
		}
	}
}
