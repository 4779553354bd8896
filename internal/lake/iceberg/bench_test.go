package iceberg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// BenchmarkAppend measures one Append commit of 100k narrow bronze-like
// rows (10 batches of 10k), unpartitioned and partitioned by day over a
// few days, and the fixed cost of a commit (one row; the table's snapshot
// history grows with b.N, as it does in production until snapshots are
// expired). Run with: go test -bench Append -run '^$' ./internal/lake/iceberg/
func BenchmarkAppend(b *testing.B) {
	b.Run("100k/unpartitioned", func(b *testing.B) { benchAppend(b, "", 10, 10_000) })
	b.Run("100k/day(cdc_ts)", func(b *testing.B) { benchAppend(b, "cdc_ts", 10, 10_000) })
	b.Run("1row/day(cdc_ts)", func(b *testing.B) { benchAppend(b, "cdc_ts", 1, 1) })
}

func benchAppend(b *testing.B, dayPartition string, batches, rowsPerBatch int) {
	ctx := context.Background()
	cat := openCatalog(b, b.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"bronze", "bench", "public", "t"}, iceberg.TableSpec{
		Schema: iceberggo.NewSchema(0,
			iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
			iceberggo.NestedField{ID: 2, Name: "name", Type: iceberggo.PrimitiveTypes.String},
			iceberggo.NestedField{ID: 3, Name: "cdc_op", Type: iceberggo.PrimitiveTypes.String},
			iceberggo.NestedField{ID: 4, Name: "cdc_ts", Type: iceberggo.PrimitiveTypes.TimestampTz},
			iceberggo.NestedField{ID: 5, Name: "cdc_source_lsn", Type: iceberggo.PrimitiveTypes.Int64},
		),
		DayPartition: dayPartition,
	})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	recs := make([]arrow.RecordBatch, batches)
	for i := range recs {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
		for j := range rowsPerBatch {
			n := int64(i*rowsPerBatch + j)
			rb.Field(0).(*array.Int64Builder).Append(n)
			rb.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("customer-%d", n))
			rb.Field(2).(*array.StringBuilder).Append("c")
			ts := start.Add(time.Duration(n) * 3 * time.Second) // 100k rows span ~3.5 days
			rb.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
			rb.Field(4).(*array.Int64Builder).Append(1<<32 + n)
		}
		recs[i] = rb.NewRecordBatch()
		rb.Release()
	}
	defer release(recs...)

	for i := 0; b.Loop(); i++ {
		if err := tbl.Append(ctx, recs, map[string]string{"tidemark.position": fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batches*rowsPerBatch)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
