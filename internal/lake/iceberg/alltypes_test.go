package iceberg_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// allTypesSchema has one column of every type tidemark maps source columns
// to, and is day-partitioned on tstz by the tests that create it.
func allTypesSchema() *iceberggo.Schema {
	return iceberggo.NewSchemaWithIdentifiers(0, []int{1},
		iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
		iceberggo.NestedField{ID: 2, Name: "i32", Type: iceberggo.PrimitiveTypes.Int32},
		iceberggo.NestedField{ID: 3, Name: "i64", Type: iceberggo.PrimitiveTypes.Int64},
		iceberggo.NestedField{ID: 4, Name: "f32", Type: iceberggo.PrimitiveTypes.Float32},
		iceberggo.NestedField{ID: 5, Name: "f64", Type: iceberggo.PrimitiveTypes.Float64},
		iceberggo.NestedField{ID: 6, Name: "flag", Type: iceberggo.PrimitiveTypes.Bool},
		iceberggo.NestedField{ID: 7, Name: "s", Type: iceberggo.PrimitiveTypes.String},
		iceberggo.NestedField{ID: 8, Name: "bin", Type: iceberggo.PrimitiveTypes.Binary},
		iceberggo.NestedField{ID: 9, Name: "dec", Type: iceberggo.DecimalTypeOf(10, 2)},
		iceberggo.NestedField{ID: 10, Name: "dec38", Type: iceberggo.DecimalTypeOf(38, 10)},
		iceberggo.NestedField{ID: 11, Name: "d", Type: iceberggo.PrimitiveTypes.Date},
		iceberggo.NestedField{ID: 12, Name: "t", Type: iceberggo.PrimitiveTypes.Time},
		iceberggo.NestedField{ID: 13, Name: "ts", Type: iceberggo.PrimitiveTypes.Timestamp},
		iceberggo.NestedField{ID: 14, Name: "tstz", Type: iceberggo.PrimitiveTypes.TimestampTz},
		iceberggo.NestedField{ID: 15, Name: "tags", Type: &iceberggo.ListType{
			ElementID: 17, Element: iceberggo.PrimitiveTypes.String}},
		iceberggo.NestedField{ID: 16, Name: "nums", Type: &iceberggo.ListType{
			ElementID: 18, Element: iceberggo.PrimitiveTypes.Int64}},
	)
}

// allTypesRow is one row of allTypesSchema; nil pointers and nil slices
// are SQL NULL.
type allTypesRow struct {
	id    int64
	i32   *int32
	i64   *int64
	f32   *float32
	f64   *float64
	flag  *bool
	s     *string
	bin   []byte
	dec   *string // decimal text, scale 2
	dec38 *string // decimal text, scale 10
	d     *time.Time
	t     *time.Duration // since midnight
	ts    *time.Time
	tstz  *time.Time
	tags  []*string
	nums  []*int64
}

func ptr[T any](v T) *T { return &v }

func utc(s string) time.Time {
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return v.UTC()
}

// allTypesRows covers extremes (min/max ints, 38-digit decimals, pre-epoch
// dates and times, unicode, empty strings and lists, null list elements)
// and a row of nulls.
func allTypesRows() []allTypesRow {
	return []allTypesRow{
		{
			id: 1, i32: ptr(int32(math.MaxInt32)), i64: ptr(int64(math.MaxInt64)),
			f32: ptr(float32(1.5)), f64: ptr(3.141592653589793), flag: ptr(true),
			s: ptr("héllo ✓"), bin: []byte{0x00, 0xff, 0x10},
			dec: ptr("12345678.90"), dec38: ptr("1234567890123456789012345678.0123456789"),
			d: ptr(utc("2024-02-29T00:00:00Z")), t: ptr(23*time.Hour + 59*time.Minute + 59*time.Second + 999999*time.Microsecond),
			ts: ptr(utc("2024-02-29T12:34:56.123456Z")), tstz: ptr(utc("2024-02-29T23:59:59.999999Z")),
			tags: []*string{ptr("a"), nil, ptr("c")}, nums: []*int64{ptr(int64(1)), ptr(int64(-2)), ptr(int64(math.MaxInt64))},
		},
		{
			id: 2, i32: ptr(int32(math.MinInt32)), i64: ptr(int64(math.MinInt64)),
			f32: ptr(float32(-0.1)), f64: ptr(-1e300), flag: ptr(false),
			s: ptr(""), bin: []byte{},
			dec: ptr("-0.05"), dec38: ptr("-9999999999999999999999999999.9999999999"),
			d: ptr(utc("1969-07-20T00:00:00Z")), t: ptr(time.Duration(0)),
			ts: ptr(utc("1969-07-20T20:17:40Z")), tstz: ptr(utc("1969-07-20T20:17:40.000001Z")),
			tags: []*string{}, nums: []*int64{},
		},
		{
			id: 3, i32: ptr(int32(0)), i64: ptr(int64(0)), f32: ptr(float32(0)), f64: ptr(0.0),
			dec: ptr("0.00"), dec38: ptr("0.0000000001"),
			d: ptr(utc("2024-03-01T00:00:00Z")), t: ptr(12 * time.Hour),
			ts: ptr(utc("2024-03-01T00:00:00Z")), tstz: ptr(utc("2024-03-01T00:00:00Z")),
			tags: []*string{ptr("only")}, nums: []*int64{nil},
		},
		{id: 4}, // every optional column null
	}
}

// buildAllTypes builds one record of rows with the table's Arrow schema.
func buildAllTypes(t testing.TB, sc *arrow.Schema, rows []allTypesRow) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	col := func(name string) array.Builder {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			t.Fatalf("arrow schema has no column %s: %v", name, sc)
		}
		return b.Field(idx[0])
	}
	for _, r := range rows {
		col("id").(*array.Int64Builder).Append(r.id)
		appendOpt(col("i32").(*array.Int32Builder), r.i32)
		appendOpt(col("i64").(*array.Int64Builder), r.i64)
		appendOpt(col("f32").(*array.Float32Builder), r.f32)
		appendOpt(col("f64").(*array.Float64Builder), r.f64)
		appendOpt(col("flag").(*array.BooleanBuilder), r.flag)
		appendOpt(col("s").(*array.StringBuilder), r.s)
		if r.bin == nil {
			col("bin").AppendNull()
		} else {
			col("bin").(*array.BinaryBuilder).Append(r.bin)
		}
		appendDecimal(t, col("dec").(*array.Decimal128Builder), r.dec, 10, 2)
		appendDecimal(t, col("dec38").(*array.Decimal128Builder), r.dec38, 38, 10)
		if r.d == nil {
			col("d").AppendNull()
		} else {
			col("d").(*array.Date32Builder).Append(arrow.Date32FromTime(*r.d))
		}
		if r.t == nil {
			col("t").AppendNull()
		} else {
			col("t").(*array.Time64Builder).Append(arrow.Time64(r.t.Microseconds()))
		}
		for _, c := range []struct {
			name string
			v    *time.Time
		}{{"ts", r.ts}, {"tstz", r.tstz}} {
			if c.v == nil {
				col(c.name).AppendNull()
			} else {
				col(c.name).(*array.TimestampBuilder).Append(arrow.Timestamp(c.v.UnixMicro()))
			}
		}
		appendList(col("tags").(*array.ListBuilder), r.tags, func(vb array.Builder, v string) {
			vb.(*array.StringBuilder).Append(v)
		})
		appendList(col("nums").(*array.ListBuilder), r.nums, func(vb array.Builder, v int64) {
			vb.(*array.Int64Builder).Append(v)
		})
	}
	return b.NewRecordBatch()
}

type appender[T any] interface {
	Append(T)
	AppendNull()
}

func appendOpt[T any](b appender[T], v *T) {
	if v == nil {
		b.AppendNull()
	} else {
		b.Append(*v)
	}
}

func appendDecimal(t testing.TB, b *array.Decimal128Builder, v *string, prec, scale int32) {
	if v == nil {
		b.AppendNull()
		return
	}
	n, err := decimal128.FromString(*v, prec, scale)
	if err != nil {
		t.Fatalf("decimal %s: %v", *v, err)
	}
	b.Append(n)
}

func appendList[T any](lb *array.ListBuilder, vs []*T, add func(array.Builder, T)) {
	if vs == nil {
		lb.AppendNull()
		return
	}
	lb.Append(true)
	for _, v := range vs {
		if v == nil {
			lb.ValueBuilder().AppendNull()
		} else {
			add(lb.ValueBuilder(), *v)
		}
	}
}

// jsonRows turns records into rows of JSON-safe values, the same
// representation scripts/pyiceberg_read.py prints: decimals as fixed-point
// strings, binary as lower-case hex, dates/times/timestamps in ISO 8601
// with microseconds (timestamptz with "+00:00"), ints as int64.
func jsonRows(t testing.TB, recs []arrow.RecordBatch) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range recs {
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for c, f := range rec.Schema().Fields() {
				row[f.Name] = jsonValue(t, rec.Column(c), i)
			}
			out = append(out, row)
		}
	}
	sortRows(out)
	return out
}

func jsonValue(t testing.TB, arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return float64(a.Value(i))
	case *array.Float64:
		return a.Value(i)
	case *array.Boolean:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return hex.EncodeToString(a.Value(i))
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Date32:
		return a.Value(i).ToTime().Format("2006-01-02")
	case *array.Time64:
		return time.UnixMicro(int64(a.Value(i))).UTC().Format("15:04:05.000000")
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		if tt.Unit != arrow.Microsecond {
			t.Fatalf("timestamp unit %s, want µs", tt.Unit)
		}
		v := time.UnixMicro(int64(a.Value(i))).UTC()
		if tt.TimeZone != "" {
			return v.Format("2006-01-02T15:04:05.000000") + "+00:00"
		}
		return v.Format("2006-01-02T15:04:05.000000")
	case *array.List:
		start, end := a.ValueOffsets(i)
		l := []any{}
		for j := start; j < end; j++ {
			l = append(l, jsonValue(t, a.ListValues(), int(j)))
		}
		return l
	}
	t.Fatalf("jsonValue: unhandled arrow type %s", arr.DataType())
	return nil
}

func sortRows(rows []map[string]any) {
	sort.Slice(rows, func(a, b int) bool {
		return rows[a]["id"].(int64) < rows[b]["id"].(int64)
	})
}

// normalizeJSON makes values decoded with UseNumber comparable with
// jsonRows' values: integers become int64, other numbers float64.
func normalizeJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalizeJSON(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeJSON(e)
		}
		return out
	}
	return v
}

// diffRows reports the first difference between two row sets.
func diffRows(t testing.TB, got, want []map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d rows, want %d\ngot:  %v\nwant: %v", len(got), len(want), got, want)
	}
	for i := range want {
		for k, w := range want[i] {
			if g, ok := got[i][k]; !ok || !reflect.DeepEqual(g, w) {
				t.Errorf("row id=%v column %s: got %#v, want %#v", want[i]["id"], k, g, w)
			}
		}
		for k := range got[i] {
			if _, ok := want[i][k]; !ok {
				t.Errorf("row id=%v: unexpected column %s", want[i]["id"], k)
			}
		}
	}
}

// scanRows reads every row of tbl as jsonRows.
func scanRows(t testing.TB, ctx context.Context, tbl *iceberg.Table) []map[string]any {
	t.Helper()
	var recs []arrow.RecordBatch
	err := tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		rec.Retain()
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	return jsonRows(t, recs)
}
