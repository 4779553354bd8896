package delta_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark/tidemark/internal/lake/delta"
)

// BenchmarkAppendVsParquet measures an Append of 100k bronze-like rows
// (statistics, day partitions, the commit) against writing the same
// records to one Parquet file with the same writer settings, in the same
// run, and reports the ratio of the medians (delta/parquet).
//
//	go test ./internal/lake/delta/ -run '^$' -bench AppendVsParquet -benchtime 5x
func BenchmarkAppendVsParquet(b *testing.B) {
	var recs []arrow.RecordBatch
	for k := 0; k < 10; k++ {
		// 100k rows 2 s apart: three days, three partitions.
		recs = append(recs, ordersStep(k*10_000, k*10_000+10_000, 2*time.Second))
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	ctx := context.Background()
	tbl, err := delta.Create(ctx, filepath.Join(b.TempDir(), "t"), delta.Spec{Schema: ordersSchema, DayPartition: "cdc_ts", ChangeDataFeed: true, AppendOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	var base, dl []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		f, err := os.Create(filepath.Join(dir, "base.parquet"))
		if err != nil {
			b.Fatal(err)
		}
		w, err := pqarrow.NewFileWriter(ordersSchema, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy)),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		base = append(base, time.Since(start))

		start = time.Now()
		if _, err := tbl.Append(ctx, recs, delta.Commit{AppID: "bench", Version: int64(i + 1)}); err != nil {
			b.Fatal(err)
		}
		dl = append(dl, time.Since(start))
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	mb, md := med(base), med(dl)
	b.ReportMetric(float64(md)/float64(mb), "delta/parquet")
	b.Logf("100k rows: parquet file %v, delta append %v (median of %d), ratio %.2f", mb, md, b.N, float64(md)/float64(mb))
}
