package lake

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Take returns the rows of rec at the indices idx (an integer array), in
// that order, as a new batch the caller releases.
func Take(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, idx arrow.Array) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for j := range cols {
		c, err := compute.TakeArray(compute.WithAllocator(ctx, mem), rec.Column(j), idx)
		if err != nil {
			return nil, err
		}
		cols[j] = c
	}
	return array.NewRecordBatch(rec.Schema(), cols, int64(idx.Len())), nil
}

// RecordBytes is the size of the buffers behind rec's columns (shared
// buffers counted once per column that refers to them).
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += arrayBytes(c.Data())
	}
	return n
}

func arrayBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += arrayBytes(c)
	}
	// Dictionary returns a typed nil when there is none.
	if dict, ok := d.Dictionary().(*array.Data); ok && dict != nil {
		n += arrayBytes(dict)
	}
	return n
}
