package verify

import (
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestDecimalText(t *testing.T) {
	cases := []struct {
		v    int64
		s    int32
		want string
	}{
		{1250, 2, "12.50"}, {-1, 2, "-0.01"}, {12, 5, "0.00012"}, {0, 2, "0.00"}, {12000, 0, "12000"}, {-5, 0, "-5"}, {0, 0, "0"},
	}
	for _, c := range cases {
		if got := DecimalText(decimal128.FromI64(c.v), c.s); got != c.want {
			t.Errorf("decimalText(%d, %d) = %q, want %q", c.v, c.s, got, c.want)
		}
	}
}

// appendArrowField is AppendField of valueAt, for every lake type.
func TestAppendArrowField(t *testing.T) {
	mem := memory.DefaultAllocator
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "i", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "l", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "t", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "list", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	vals := []any{int32(-7), int64(1 << 40), "🌊 ü", []byte{0, 255}, true, arrow.Timestamp(-1), arrow.Date32(19724),
		decimal128.FromI64(-1), -0.0, []any{"a", nil}}
	for j, v := range vals {
		if err := coltype.AppendValue(b.Field(j), v); err != nil {
			t.Fatal(err)
		}
		b.Field(j).AppendNull()
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	for j := range vals {
		for i := 0; i < 2; i++ {
			a := rec.Column(j)
			want := string(AppendField(nil, valueAt(a, i), a.DataType()))
			if got := string(appendArrowField(nil, a, i)); got != want {
				t.Errorf("column %s row %d: %q, want %q", sc.Field(j).Name, i, got, want)
			}
		}
	}
}

// TestSQLCanonTimeAs checks, under time_as text and micros, that the SQL
// canonical forms of time columns (a key, a domain over time, time[]) agree
// with the Go ones, and that a key value in lake form (24:00:00 included)
// is found by its literal.
