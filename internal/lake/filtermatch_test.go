package lake_test

import (
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
)

// TestFilterSelectRows checks the filter evaluation of the files read by
// tidemark's own reader (readTasks, Delta's scans) against what the filters mean.
func TestFilterSelectRows(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{1, 2, 3, 4}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"a", "b", "", "d"}, []bool{true, true, false, true})
	rec := b.NewRecordBatch()
	defer rec.Release()
	cases := []struct {
		name string
		f    *lake.Filter
		want []int32
	}{
		{"in", lake.In("id", []any{int32(1), int64(3), int64(9)}), []int32{1, 3}},
		{"in none", lake.In("id", nil), nil},
		{"less", lake.Less("id", int64(3)), []int32{1, 2}},
		{"equal string", lake.Equal("v", "b"), []int32{2}},
		{"null never matches", lake.Less("v", "zzz"), []int32{1, 2, 4}},
		{"and", lake.And(lake.Less("id", int64(4)), lake.In("v", []any{"a", "d", "b"})), []int32{1, 2}},
		{"or", lake.Or(lake.Equal("id", int64(4)), lake.Equal("v", "a")), []int32{1, 4}},
		{"all", lake.Less("id", int64(100)), []int32{1, 2, 3, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := tc.f.SelectRows(context.Background(), mem, rec)
			if err != nil {
				t.Fatal(err)
			}
			var got []int32
			if sel != nil {
				got = slices.Clone(sel.Column(0).(*array.Int32).Int32Values())
				sel.Release()
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("rows %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := lake.Equal("missing", int64(1)).SelectRows(context.Background(), mem, rec); err == nil {
		t.Error("a filter on a missing column: no error")
	}
	if _, err := lake.Equal("id", "one").SelectRows(context.Background(), mem, rec); err == nil {
		t.Error("a string value for an int column: no error")
	}
}
