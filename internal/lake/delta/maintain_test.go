package delta_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
)

// TestMaintainFootprint: a silver-like table after many merges (deletion
// vectors, change data files, small files) is compacted (OPTIMIZE: rows
// and cursor unchanged) and expired (log cleanup and VACUUM): its bytes on
// disk end within twice its live data, and delta-rs reads it equal.
func TestMaintainFootprint(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "lsn", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	ident := []string{"silver", "src", "public", "t"}
	tbl, err := cat.Create(ctx, ident, lake.TableSpec{Schema: sc, Key: []string{"id"}, Properties: map[string]string{"tidemark.key": `["id"]`}})
	if err != nil {
		t.Fatal(err)
	}
	build := func(ids []int64, lsn int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for _, id := range ids {
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.StringBuilder).Append(strings.Repeat(fmt.Sprint("value of ", id, " at ", lsn, " "), 4))
			b.Field(2).(*array.Int64Builder).Append(lsn)
		}
		return b.NewRecordBatch()
	}
	want := map[int64]int64{} // id -> lsn
	for chunk := int64(0); chunk < 10; chunk++ {
		var ids []int64
		for id := chunk * 100; id < chunk*100+100; id++ {
			ids = append(ids, id)
			want[id] = 1
		}
		rec := build(ids, 1)
		if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "1"}); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for m := int64(2); m < 42; m++ {
		keys := map[int64]bool{}
		for len(keys) < 30 {
			keys[rng.Int64N(1100)] = true // some new keys
		}
		var ks []int64
		for k := range keys {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		live, found := liveKeys(t, tbl, ks)
		var rows []lake.RowID
		var up []int64
		for _, k := range ks {
			if r, ok := found[k]; ok {
				rows = append(rows, r)
			}
			if k%5 == 0 {
				delete(want, k) // deleted
				continue
			}
			up = append(up, k)
			want[k] = m
		}
		rec := build(up, m)
		if err := tbl.MergeRows(ctx, live, rows, nil, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": strconv.FormatInt(m, 10)}); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	check := func(what string, tbl lake.Table) {
		t.Helper()
		got := map[int64]int64{}
		err := tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
			ids, lsns := rec.Column(0).(*array.Int64), rec.Column(2).(*array.Int64)
			for i := 0; i < int(rec.NumRows()); i++ {
				if _, dup := got[ids.Value(i)]; dup {
					return fmt.Errorf("key %d twice", ids.Value(i))
				}
				got[ids.Value(i)] = lsns.Value(i)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: %d rows, want %d; differing", what, len(got), len(want))
		}
	}
	check("after the merges", tbl)
	mt := tbl.(lake.Maintained)
	before, err := mt.Footprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := tbl.CurrentSnapshot()

	c, err := mt.Compact(ctx, lake.CompactOptions{TargetFileSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.RemovedDataFiles != before.DataFiles || c.AddedDataFiles != 1 || c.Snapshot == 0 {
		t.Fatalf("compaction %+v of %d files", c, before.DataFiles)
	}
	check("after compaction", tbl)
	snap, _ := tbl.CurrentSnapshot()
	if snap.Operation != "replace" || snap.ParentID != head.ID || tbl.Summary()["tidemark.position"] != "41" {
		t.Fatalf("compaction snapshot %+v, summary %v: want a replace after %d keeping the cursor", snap, tbl.Summary(), head.ID)
	}
	if h, err := tbl.History(head.ID, snap.ID); err != nil || len(h) != 1 {
		t.Fatalf("history after the compaction: %v, %v", h, err)
	}

	onDisk := func() int64 {
		var n int64
		filepath.WalkDir(filepath.Join(wh, "silver", "src", "public", "t"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		return n
	}
	disk := onDisk()
	e, err := mt.ExpireSnapshots(ctx, lake.ExpireOptions{RetainLast: 1, KeepFrom: lake.NoSnapshot})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Expired) == 0 {
		t.Fatalf("expire: %+v, want old snapshots expired", e)
	}
	after, err := mt.Footprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(onDisk()) / float64(after.LiveBytes())
	t.Logf("footprint: %d files (%d with deleted rows), %d bytes before; %d on disk before expiry, %d after for %d live bytes: ratio %.2f; %d commits left",
		before.DataFiles, before.DeleteFiles, before.DataBytes, disk, onDisk(), after.LiveBytes(), ratio, after.Snapshots)
	if ratio > 2 {
		t.Errorf("bytes on disk ÷ live bytes = %.2f after maintenance, want ≤ 2", ratio)
	}
	again, err := cat.Open(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	check("reopened after expiry", again)
	if _, err := again.Snapshot(head.ID - 20); err == nil {
		t.Fatalf("snapshot %d is still there after expiry", head.ID-20)
	}

	py := deltars(t)
	got := readWithDeltaRs(t, py, filepath.Join(wh, "silver", "src", "public", "t"), "--query")
	if len(got.Rows) != len(want) {
		t.Fatalf("delta-rs reads %d rows after maintenance, want %d", len(got.Rows), len(want))
	}
	for _, r := range got.Rows {
		id, lsn := int64(r["id"].(float64)), int64(r["lsn"].(float64))
		if want[id] != lsn {
			t.Fatalf("delta-rs: key %d at %d, want %d", id, lsn, want[id])
		}
	}
}

// liveKeys finds the live rows of keys.
func liveKeys(t *testing.T, tbl lake.KeyedTable, keys []int64) (lake.LiveRows, map[int64]lake.RowID) {
	t.Helper()
	found := map[int64]lake.RowID{}
	l, err := tbl.ScanLiveKeys(context.Background(), nil, []string{"id"}, keys, func(rec arrow.RecordBatch, file int, pos lake.Positions) error {
		ids := rec.Column(0).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			found[ids.Value(i)] = lake.RowID{File: file, Pos: pos.At(i)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, found
}
