package typemap_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

func TestMapTypes(t *testing.T) {
	cases := []struct {
		oid     uint32
		typmod  int32
		source  string
		iceberg string
	}{
		{pgtype.Int2OID, -1, "smallint", "int"},
		{pgtype.Int4OID, -1, "integer", "int"},
		{pgtype.Int8OID, -1, "bigint", "long"},
		{pgtype.OIDOID, -1, "oid", "long"},
		{pgtype.XID8OID, -1, "xid8", "long"},
		{pgtype.Float4OID, -1, "real", "float"},
		{pgtype.Float8OID, -1, "double precision", "double"},
		{pgtype.BoolOID, -1, "boolean", "boolean"},
		{pgtype.TextOID, -1, "text", "string"},
		{pgtype.VarcharOID, 14, "character varying(10)", "string"},
		{pgtype.BPCharOID, 9, "character(5)", "string"},
		{pgtype.BPCharOID, -1, "bpchar", "string"},
		{pgtype.ByteaOID, -1, "bytea", "binary"},
		{pgtype.NumericOID, numMod(12, 2), "numeric(12,2)", "decimal(12, 2)"},
		{pgtype.NumericOID, numMod(38, 10), "numeric(38,10)", "decimal(38, 10)"},
		{pgtype.NumericOID, numMod(39, 0), "numeric(39,0)", "string"},
		{pgtype.NumericOID, numMod(2, 5), "numeric(2,5)", "decimal(5, 5)"},
		{pgtype.NumericOID, numMod(2, -3), "numeric(2,-3)", "decimal(5, 0)"},
		{pgtype.NumericOID, numMod(37, -3), "numeric(37,-3)", "string"},
		{pgtype.NumericOID, -1, "numeric", "string"},
		{pgtype.DateOID, -1, "date", "date"},
		{pgtype.TimeOID, 3, "time(3) without time zone", "time"},
		{pgtype.TimetzOID, -1, "time with time zone", "string"},
		{pgtype.TimestampOID, -1, "timestamp without time zone", "timestamp"},
		{pgtype.TimestamptzOID, 0, "timestamp(0) with time zone", "timestamptz"},
		{pgtype.IntervalOID, -1, "interval", "string"},
		{pgtype.IntervalOID, 2<<16 | 6, "interval month(6)", "string"},
		{pgtype.IntervalOID, 0x7FFF<<16 | 3, "interval(3)", "string"},
		{pgtype.IntervalOID, 6<<16 | 0xFFFF, "interval year to month", "string"},
		{pgtype.BitOID, 3, "bit(3)", "string"},
		{pgtype.UUIDOID, -1, "uuid", "string"},
		{pgtype.JSONBOID, -1, "jsonb", "string"},
		{pgtype.Int4ArrayOID, -1, "integer[]", "list<int>"},
		{pgtype.NumericArrayOID, numMod(10, 2), "numeric(10,2)[]", "list<decimal(10, 2)>"},
		{pgtype.NumericArrayOID, -1, "numeric[]", "list<string>"},
		{pgtype.TimestamptzArrayOID, -1, "timestamp with time zone[]", "list<timestamptz>"},
		{pgtype.TextArrayOID, -1, "text[]", "list<string>"},
		{moodOID, -1, "mood", "string"},
		{priceOID, -1, "price", "decimal(10, 2)"},
		{price2OID, -1, "price2", "decimal(10, 2)"},
		{posintArrOID, -1, "posint[]", "list<int>"},
		{intlistOID, -1, "intlist", "list<int>"},
		{intlistArrOID, -1, "intlist[]", "list<list<int>>"},
		{pairOID, -1, "pair", "string"},
		{citextArrOID, -1, "citext[]", "list<string>"},
	}
	for _, c := range cases {
		m, err := typemap.Map(typemap.Column{Name: "c", TypeOID: c.oid, TypeMod: c.typmod}, fakeLookup)
		if err != nil {
			t.Errorf("Map(%d, %d): %v", c.oid, c.typmod, err)
			continue
		}
		if m.SourceType() != c.source || m.IcebergType().String() != c.iceberg {
			t.Errorf("Map(%d, %d) = %s -> %s, want %s -> %s", c.oid, c.typmod, m.SourceType(), m.IcebergType(), c.source, c.iceberg)
		}
		// ArrowType must be what iceberg-go makes of IcebergType, so that
		// record batches built from decoded values write without a cast.
		want, err := table.TypeToArrowType(m.IcebergType(), false, false)
		if err != nil {
			t.Errorf("%s: iceberg-go can't convert %s: %v", c.source, m.IcebergType(), err)
			continue
		}
		if !arrow.TypeEqual(m.ArrowType(), want, arrow.CheckMetadata()) {
			t.Errorf("%s: ArrowType %s, iceberg-go says %s", c.source, m.ArrowType(), want)
		}
	}
}

// Every decoded value appends to a builder of the mapping's ArrowType, and
// reads back equal.
func TestAppendValue(t *testing.T) {
	cases := []struct {
		oid    uint32
		typmod int32
		texts  []string
	}{
		{pgtype.Int4OID, -1, []string{"1", null, "-7"}},
		{pgtype.Int8OID, -1, []string{"9223372036854775807"}},
		{pgtype.Float4OID, -1, []string{"NaN", "-0"}},
		{pgtype.Float8OID, -1, []string{"Infinity", "0.1"}},
		{pgtype.BoolOID, -1, []string{"t", "f", null}},
		{pgtype.TextOID, -1, []string{"a", ""}},
		{pgtype.ByteaOID, -1, []string{`\x00ff`}},
		{pgtype.NumericOID, numMod(38, 10), []string{"-9999999999999999999999999999.9999999999", "0.5000000000"}},
		{pgtype.DateOID, -1, []string{"infinity", "2024-01-02"}},
		{pgtype.TimeOID, -1, []string{"12:00:00"}},
		{pgtype.TimestampOID, -1, []string{"2024-01-02 03:04:05"}},
		{pgtype.TimestamptzOID, -1, []string{"-infinity", "2024-01-02 03:04:05+00"}},
		{pgtype.Int4ArrayOID, -1, []string{"{1,NULL}", null, "{}"}},
		{pgtype.NumericArrayOID, numMod(5, 2), []string{"{1.00,NULL,-2.50}"}},
		{intlistArrOID, -1, []string{`{"{1,2}",NULL}`}},
	}
	for _, c := range cases {
		m, err := typemap.Map(typemap.Column{Name: "c", TypeOID: c.oid, TypeMod: c.typmod}, fakeLookup)
		if err != nil {
			t.Fatal(err)
		}
		b := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
		var want []string
		for _, text := range c.texts {
			var raw []byte
			if text != null {
				raw = []byte(text)
			}
			v, err := m.Decode(raw)
			if err != nil {
				t.Fatalf("%s: Decode: %v", m.SourceType(), err)
			}
			if err := coltype.AppendValue(b, v); err != nil {
				t.Fatalf("%s: AppendValue(%s): %v", m.SourceType(), render(v, m.ArrowType()), err)
			}
			want = append(want, render(v, m.ArrowType()))
		}
		arr := b.NewArray()
		for i := range want {
			if got := render(valueAt(arr, i), m.ArrowType()); got != want[i] {
				t.Errorf("%s row %d: array holds %s, appended %s", m.SourceType(), i, got, want[i])
			}
		}
		arr.Release()
		b.Release()
	}
}

// valueAt reads element i of an array back as the Go value Decode returns.
func valueAt(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Int32:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.Boolean:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return a.Value(i)
	case *array.Decimal128:
		return a.Value(i)
	case *array.Date32:
		return a.Value(i)
	case *array.Time64:
		return a.Value(i)
	case *array.Timestamp:
		return a.Value(i)
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := start; j < end; j++ {
			out = append(out, valueAt(a.ListValues(), int(j)))
		}
		return out
	}
	return "unsupported array " + a.DataType().String()
}

func TestSessionSettings(t *testing.T) {
	s := typemap.SessionSettings()
	for k, v := range map[string]string{
		"DateStyle": "ISO, MDY", "TimeZone": "UTC", "IntervalStyle": "iso_8601",
		"extra_float_digits": "3", "bytea_output": "hex", "lc_monetary": "C", "client_encoding": "UTF8",
	} {
		if s[k] != v {
			t.Errorf("SessionSettings()[%q] = %q, want %q", k, s[k], v)
		}
	}
	s["TimeZone"] = "Europe/Paris"
	if typemap.SessionSettings()["TimeZone"] != "UTC" {
		t.Error("SessionSettings shares its map between calls")
	}
}
