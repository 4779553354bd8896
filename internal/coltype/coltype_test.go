package coltype_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/coltype"
)

func TestAppendValueMismatch(t *testing.T) {
	cases := []struct {
		dt arrow.DataType
		v  any
	}{
		{arrow.PrimitiveTypes.Int32, int64(1)},
		{arrow.PrimitiveTypes.Int64, int32(1)},
		{arrow.BinaryTypes.String, []byte("x")},
		{arrow.BinaryTypes.Binary, "x"},
		{&arrow.Decimal128Type{Precision: 3, Scale: 0}, decimal128.FromI64(1000)},
		{arrow.FixedWidthTypes.Timestamp_us, arrow.Date32(1)},
		{arrow.ListOf(arrow.PrimitiveTypes.Int32), []any{int64(1)}},
		{arrow.ListOf(arrow.PrimitiveTypes.Int32), int32(1)},
		{arrow.PrimitiveTypes.Uint8, uint8(1)},
	}
	for _, c := range cases {
		b := array.NewBuilder(memory.DefaultAllocator, c.dt)
		if err := coltype.AppendValue(b, c.v); err == nil {
			t.Errorf("AppendValue(%s builder, %T) succeeded", c.dt, c.v)
		}
		b.Release()
	}
}

func TestCanWiden(t *testing.T) {
	p := iceberg.PrimitiveTypes
	list := func(e iceberg.Type, req bool) iceberg.Type {
		return &iceberg.ListType{ElementID: 7, Element: e, ElementRequired: req}
	}
	cases := []struct {
		from, to iceberg.Type
		want     bool
	}{
		{p.Int32, p.Int32, true},
		{p.Int32, p.Int64, true},
		{p.Int64, p.Int32, false},
		{p.Float32, p.Float64, true},
		{p.Float64, p.Float32, false},
		{p.Int32, p.Float64, false},
		{iceberg.DecimalTypeOf(10, 2), iceberg.DecimalTypeOf(12, 2), true},
		{iceberg.DecimalTypeOf(10, 2), iceberg.DecimalTypeOf(10, 2), true},
		{iceberg.DecimalTypeOf(10, 2), iceberg.DecimalTypeOf(9, 2), false},
		{iceberg.DecimalTypeOf(10, 2), iceberg.DecimalTypeOf(12, 3), false},
		{iceberg.DecimalTypeOf(10, 2), p.String, false},
		{p.String, p.String, true},
		{p.Timestamp, p.TimestampTz, false},
		{p.Date, p.Timestamp, false},
		{list(p.Int32, false), &iceberg.ListType{ElementID: 9, Element: p.Int64}, true},
		{list(p.Int64, false), list(p.Int32, false), false},
		{list(p.Int32, false), list(p.Int32, true), false},
		{list(p.Int32, true), list(p.Int32, false), true},
		{list(p.Int32, false), p.Int32, false},
		{nil, p.Int32, false},
	}
	for _, c := range cases {
		if got := coltype.CanWiden(c.from, c.to); got != c.want {
			t.Errorf("CanWiden(%v, %v) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestParseDecimal: decimal text is read exactly or refused with a reason
// that names no value; string and []byte text read alike.
func TestParseDecimal(t *testing.T) {
	const d38 = "1234567890123456789012345678.0123456789"
	cases := []struct {
		text string
		p, s int32
		want string // the value at scale s, or "" for an error
		err  string
	}{
		{"-1234567890.12", 12, 2, "-1234567890.12", ""},
		{"0.00", 12, 2, "0.00", ""},
		{"-0.00", 12, 2, "0.00", ""},
		{"+7.5", 12, 2, "7.50", ""},
		{".5", 3, 2, "0.50", ""},
		{"5.", 3, 2, "5.00", ""},
		{"1.230", 5, 2, "1.23", ""},
		{"000123", 3, 0, "123", ""},
		{d38, 38, 10, d38, ""},
		{"-" + d38, 38, 10, "-" + d38, ""},
		{"-0.0000000001", 38, 10, "-0.0000000001", ""},
		{"1234", 3, 0, "", "more than 3 significant digits for decimal(3,0)"},
		{"99.5", 3, 2, "", "more than 3 significant digits"},
		{"1.234", 5, 2, "", "more fractional digits than scale 2"},
		{"1e5", 5, 2, "", coltype.ErrDecimalSyntax.Error()},
		{".", 5, 2, "", coltype.ErrDecimalSyntax.Error()},
		{"", 5, 2, "", coltype.ErrDecimalSyntax.Error()},
		{"-", 5, 2, "", coltype.ErrDecimalSyntax.Error()},
		{"1.2.3", 5, 2, "", coltype.ErrDecimalSyntax.Error()},
	}
	for _, c := range cases {
		for _, form := range []string{"string", "[]byte"} {
			var v decimal128.Num
			var err error
			if form == "string" {
				v, err = coltype.ParseDecimal(c.text, c.p, c.s)
			} else {
				v, err = coltype.ParseDecimal([]byte(c.text), c.p, c.s)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("ParseDecimal(%s %q, %d, %d) = %v, %v; want error %q", form, c.text, c.p, c.s, v.ToString(c.s), err, c.err)
				}
				continue
			}
			if err != nil || v.ToString(c.s) != c.want {
				t.Errorf("ParseDecimal(%s %q, %d, %d) = %v, %v; want %s", form, c.text, c.p, c.s, v.ToString(c.s), err, c.want)
			}
		}
	}
}

// TestScanDecimalAllocs: reading a decimal into a stack buffer allocates
// nothing (the snapshot and the stream read one per decimal value).
func TestScanDecimalAllocs(t *testing.T) {
	text := []byte("12345678.91")
	if n := testing.AllocsPerRun(100, func() {
		if _, err := coltype.ParseDecimal(text, 12, 2); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseDecimal allocates %v times per value", n)
	}
}
