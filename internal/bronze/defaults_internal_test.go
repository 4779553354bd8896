package bronze

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// A default's JSON reads back as the value it was made from, for each lake
// type a PostgreSQL column maps to.
func TestDefaultRoundTrip(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	for _, c := range []struct {
		typ  iceberg.Type
		v    any
		want string
	}{
		{iceberg.PrimitiveTypes.String, "x", `"x"`},
		{iceberg.PrimitiveTypes.String, "quote \" and \\ ", `"quote \" and \\ "`},
		{iceberg.PrimitiveTypes.Int32, int32(7), `7`},
		{iceberg.PrimitiveTypes.Int64, int64(-9007199254740993), `-9007199254740993`},
		{iceberg.PrimitiveTypes.Float64, 1.5, `1.5`},
		{iceberg.PrimitiveTypes.Bool, true, `true`},
		{iceberg.DecimalTypeOf(12, 2), decimal128.FromI64(1250), `"12.5"`},
		{iceberg.PrimitiveTypes.Date, arrow.Date32(19723), `"2024-01-01"`},
		{iceberg.PrimitiveTypes.TimestampTz, arrow.Timestamp(1704067200123456), `"2024-01-01T00:00:00.123456Z"`},
		{iceberg.PrimitiveTypes.Timestamp, arrow.Timestamp(1704067200123456), `"2024-01-01T00:00:00.123456"`},
		{iceberg.PrimitiveTypes.Time, arrow.Time64(3723000001), `"01:02:03.000001"`},
		{iceberg.PrimitiveTypes.Binary, []byte{0, 1, 0xff}, `"AAH/"`},
		{&iceberg.ListType{ElementID: 1, Element: iceberg.PrimitiveTypes.String}, []any{"a", nil}, `["a",null]`},
	} {
		js, err := encodeDefault(mem, c.typ, c.v)
		if err != nil {
			t.Errorf("%s %v: %v", c.typ, c.v, err)
			continue
		}
		if c.want != "" && string(js) != c.want {
			t.Errorf("%s %v: JSON %s, want %s", c.typ, c.v, js, c.want)
		}
		dt, _ := table.TypeToArrowType(c.typ, false, false)
		a, err := DefaultArray(mem, dt, Default{Value: js})
		if err != nil {
			t.Errorf("%s: read %s back: %v", c.typ, js, err)
			continue
		}
		t.Logf("%s %v -> %s -> %v", c.typ, c.v, js, a)
		a.Release()
	}
}
