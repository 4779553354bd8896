package lake_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// BenchmarkFormats runs one workload through the lake contract on Iceberg
// and on Delta, in the same run, and reports each phase's time on Delta
// over Iceberg (the medians of b.N runs):
//
//   - append: 20 appends of 10,000 change-log rows to a day-partitioned
//     table (bronze's write);
//
//   - scan-appended: reading those appends back (silver's read of bronze);
//
//   - merge: 20 merges into a keyed table of 50,000 rows, each finding
//     1,000 keys (ScanLiveKeys) and replacing their rows (MergeRows:
//     Iceberg position deletes, Delta deletion vectors and a change data
//     file);
//
//   - scan: reading the merged table whole.
//
//     go test ./internal/lake/ -run '^$' -bench Formats -benchtime 3x
func BenchmarkFormats(b *testing.B) {
	formats := []struct {
		name string
		open func(b *testing.B, dir string) lake.Catalog
	}{
		{"iceberg", func(b *testing.B, dir string) lake.Catalog {
			c, err := iceberg.Open(context.Background(), iceberg.Config{Warehouse: dir})
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
		{"delta", func(b *testing.B, dir string) lake.Catalog {
			c, err := delta.OpenCatalog(dir)
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
	}
	phases := []string{"append", "scan-appended", "merge", "scan"}
	took := map[string]map[string][]time.Duration{}
	for _, f := range formats {
		took[f.name] = map[string][]time.Duration{}
	}
	for i := 0; i < b.N; i++ {
		for _, f := range formats {
			cat := f.open(b, b.TempDir())
			for p, d := range runFormatWorkload(b, cat) {
				took[f.name][p] = append(took[f.name][p], d)
			}
			cat.Close()
		}
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	var line []string
	for _, p := range phases {
		ice, del := median(took["iceberg"][p]), median(took["delta"][p])
		ratio := float64(del) / float64(ice)
		b.ReportMetric(ratio, p+"-delta/iceberg")
		line = append(line, fmt.Sprintf("%s: iceberg %v, delta %v (%.2f×)", p, ice.Round(time.Millisecond), del.Round(time.Millisecond), ratio))
	}
	b.Log(strings.Join(line, "; "))
}

func runFormatWorkload(b *testing.B, cat lake.Catalog) map[string]time.Duration {
	ctx := context.Background()
	out := map[string]time.Duration{}
	logSc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "cdc_source_lsn", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "cdc_ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	}, nil)
	build := func(sc *arrow.Schema, from, n int, lsn int64) arrow.RecordBatch {
		bl := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer bl.Release()
		for id := from; id < from+n; id++ {
			bl.Field(0).(*array.Int64Builder).Append(int64(id))
			bl.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("customer %d, row %d, a value of a few dozen bytes", id%97, id))
			bl.Field(2).(*array.Int64Builder).Append(lsn)
			if sc.NumFields() > 3 {
				bl.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(id) * 60_000_000))
			}
		}
		return bl.NewRecordBatch()
	}
	log, err := cat.Create(ctx, []string{"bronze", "s", "public", "t"}, lake.TableSpec{Schema: logSc, DayPartition: "cdc_ts"})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for k := 0; k < 20; k++ {
		rec := build(logSc, k*10_000, 10_000, int64(k))
		if err := log.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": fmt.Sprint(k)}); err != nil {
			b.Fatal(err)
		}
		rec.Release()
	}
	out["append"] = time.Since(start)
	head, _ := log.CurrentSnapshot()
	start = time.Now()
	var n int64
	if err := log.ScanAppended(ctx, lake.NoSnapshot, head.ID, func(rec arrow.RecordBatch) error { n += rec.NumRows(); return nil }); err != nil {
		b.Fatal(err)
	}
	out["scan-appended"] = time.Since(start)
	if n != 200_000 {
		b.Fatalf("scan-appended read %d rows", n)
	}

	keySc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "cdc_source_lsn", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	kt, err := cat.Create(ctx, []string{"silver", "s", "public", "t"}, lake.TableSpec{Schema: keySc, Key: []string{"id"},
		Properties: map[string]string{"tidemark.key": `["id"]`}})
	if err != nil {
		b.Fatal(err)
	}
	rec := build(keySc, 0, 50_000, 0)
	if err := kt.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
		b.Fatal(err)
	}
	rec.Release()
	rng := rand.New(rand.NewPCG(7, 7))
	start = time.Now()
	for m := 1; m <= 20; m++ {
		keys := make([]int64, 0, 1000)
		for len(keys) < 1000 {
			keys = append(keys, rng.Int64N(50_000))
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		var rows []lake.RowID
		live, err := kt.ScanLiveKeys(ctx, nil, []string{"id"}, keys, func(r arrow.RecordBatch, file int, pos lake.Positions) error {
			for i := 0; i < int(r.NumRows()); i++ {
				rows = append(rows, lake.RowID{File: file, Pos: pos.At(i)})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		bl := array.NewRecordBuilder(memory.DefaultAllocator, keySc)
		for _, k := range keys {
			bl.Field(0).(*array.Int64Builder).Append(k)
			bl.Field(1).(*array.StringBuilder).Append(fmt.Sprint("updated ", k, " at ", m))
			bl.Field(2).(*array.Int64Builder).Append(int64(m))
		}
		up := bl.NewRecordBatch()
		bl.Release()
		if err := kt.MergeRows(ctx, live, rows, nil, []arrow.RecordBatch{up}, map[string]string{"tidemark.position": fmt.Sprint(m)}); err != nil {
			b.Fatal(err)
		}
		up.Release()
	}
	out["merge"] = time.Since(start)
	start = time.Now()
	n = 0
	if err := kt.Scan(ctx, func(r arrow.RecordBatch) error { n += r.NumRows(); return nil }); err != nil {
		b.Fatal(err)
	}
	out["scan"] = time.Since(start)
	if n != 50_000 {
		b.Fatalf("scan read %d rows of the keyed table, want 50000", n)
	}
	return out
}
