package silver

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestBuildKeepsLargeRunUncopied: a build whose rows come from two input
// batches, the first holding a large value, assembles the rows in order
// without copying that value (the output references the input batch's
// column): before, the two runs were concatenated into one column, one
// more copy of the value in flight (issue 21: a 200 MiB value was held
// once more by the silver build).
func TestBuildKeepsLargeRunUncopied(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	big := strings.Repeat("x", 2*keepRunBytes)
	batch := func(ids []int64, vs []string) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).AppendValues(ids, nil)
		b.Field(1).(*array.StringBuilder).AppendValues(vs, nil)
		return b.NewRecordBatch()
	}
	in := newInput([]string{"id"}, []string{"id", "v"})
	for _, b := range []arrow.RecordBatch{batch([]int64{1, 2}, []string{"a", big}), batch([]int64{3, 4}, []string{"b", "c"})} {
		in.add(b)
		b.Release()
	}
	defer func() {
		for _, b := range in.batches {
			b.Release()
		}
	}()
	rows := []outRow{{base: 0, meta: 0}, {base: 1, meta: 1}, {base: 2, meta: 2}, {base: 3, meta: 3}}

	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	recs, err := in.build(context.Background(), mem, sc, rows)
	if err != nil {
		t.Fatal(err)
	}
	if got := mem.CurrentAlloc(); got >= keepRunBytes {
		t.Errorf("the build allocated %d bytes for rows holding a %d-byte value: it copied the value", got, len(big))
	}
	var ids []int64
	var vs []string
	for _, r := range recs {
		id, v := r.Column(0).(*array.Int64), r.Column(1).(*array.String)
		for i := range int(r.NumRows()) {
			ids = append(ids, id.Value(i))
			vs = append(vs, v.Value(i))
		}
		r.Release()
	}
	want := []string{"a", big, "b", "c"}
	if len(ids) != 4 || ids[0] != 1 || ids[1] != 2 || ids[2] != 3 || ids[3] != 4 {
		t.Fatalf("ids %v, want [1 2 3 4]", ids)
	}
	for i := range want {
		if vs[i] != want[i] {
			t.Errorf("row %d: value of %d bytes, want %d", i, len(vs[i]), len(want[i]))
		}
	}
	mem.AssertSize(t, 0)
}
