package iceberg

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
)

// TestFooterCacheBoundedByBytes: the footer cache keeps footers up to its
// byte bound, oldest out first, and finds the ones it keeps (by path and
// size).
func TestFooterCacheBoundedByBytes(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues([]int64{1, 2, 3}, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, 3)
	var buf bytes.Buffer
	if err := writeParquet(&buf, rec); err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	md := pf.MetaData()
	each := 5 * int64(md.Size())
	c := footerCache{max: 3 * each}
	for i := range 5 {
		c.put(fmt.Sprint("f", i), 100, md)
	}
	for i := range 5 {
		got := c.get(fmt.Sprint("f", i), 100) != nil
		if want := i >= 2; got != want {
			t.Errorf("f%d cached: %v, want %v", i, got, want)
		}
	}
	if c.get("f4", 101) != nil {
		t.Error("a footer was found for a file of another size")
	}
	if c.used != 3*each {
		t.Errorf("%d bytes accounted, want %d", c.used, 3*each)
	}
	c.put("f4", 100, md) // again: no double count
	if c.used != 3*each || len(c.order) != 3 {
		t.Errorf("after putting f4 again: %d bytes, %d entries", c.used, len(c.order))
	}
}
