package iceberg_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// A Bucketer puts every row in the bucket the table's writer put it in:
// each data file of a bucket-partitioned table holds one bucket's rows, by
// Of. A value's bucket does not depend on its integer width.
func TestBucketerMatchesTheWriter(t *testing.T) {
	cat := openCatalog(t, t.TempDir())
	tbl := keyedTable(t, cat, []string{"silver", "shop", "public", "b"}, iceberg.MergeOnRead, 300)
	b, ok := tbl.Bucketer()
	if !ok || b.Column() != "id" || b.Buckets() != 4 {
		t.Fatalf("Bucketer() = %+v, %v; want bucket(4, id)", b, ok)
	}
	fileBucket := map[int]int{}
	rows := 0
	if _, err := tbl.ScanLive(context.Background(), nil, []string{"id"}, func(rec arrow.RecordBatch, file int, _ iceberg.Positions) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			rows++
			bk, ok := b.Of(rec.Column(0), i)
			if !ok {
				t.Fatalf("no bucket for row %d", i)
			}
			if prev, seen := fileBucket[file]; seen && prev != bk {
				t.Errorf("data file %d holds rows of buckets %d and %d by the Bucketer", file, prev, bk)
			}
			fileBucket[file] = bk
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows != 300 || len(fileBucket) < 4 {
		t.Errorf("read %d rows in %d files, want 300 in at least 4", rows, len(fileBucket))
	}

	i16 := array.NewInt16Builder(memory.DefaultAllocator)
	i64 := array.NewInt64Builder(memory.DefaultAllocator)
	for v := -50; v < 50; v++ {
		i16.Append(int16(v))
		i64.Append(int64(v))
	}
	a16, a64 := i16.NewArray(), i64.NewArray()
	defer a16.Release()
	defer a64.Release()
	for i := 0; i < a16.Len(); i++ {
		x, ok1 := b.Of(a16, i)
		y, ok2 := b.Of(a64, i)
		if !ok1 || !ok2 || x != y {
			t.Errorf("bucket of %d: %d (int16), %d (int64)", i-50, x, y)
		}
	}
}
