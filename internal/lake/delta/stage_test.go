package delta_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
)

// A merge written in parts (StageMerge) is one version to delta-rs: its
// rows, and a change data feed that holds every part's changes once (an
// update as a pre- and post-image, a delete, an insert) and the rows its
// filter deleted.
func TestDeltaRsReadsAStagedMerge(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ident := []string{"silver", "s", "public", "t"}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	tbl, err := cat.Create(ctx, ident, lake.TableSpec{Schema: sc, Key: []string{"id"}, Properties: map[string]string{delta.PropKey: `["id"]`}})
	if err != nil {
		t.Fatal(err)
	}
	build := func(ids []int64, v string) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
		defer b.Release()
		for _, id := range ids {
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprint(v, id))
		}
		return b.NewRecordBatch()
	}
	rec := build([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "v")
	err = tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "1"})
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	st, err := tbl.StageMerge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	// Part 1 updates 1 and deletes 2; part 2 updates 6 and inserts 11; the
	// filter deletes 10.
	for _, part := range []struct {
		keys, del, up []int64
	}{{[]int64{1, 2, 3, 4, 5}, []int64{1, 2}, []int64{1}}, {[]int64{6, 7, 8, 9, 10}, []int64{6}, []int64{6, 11}}} {
		at := map[int64]lake.RowID{}
		live, err := tbl.ScanLiveKeys(ctx, nil, []string{"id"}, part.keys, func(rec arrow.RecordBatch, file int, pos lake.Positions) error {
			ids := rec.Column(0).(*array.Int64)
			for i := 0; i < ids.Len(); i++ {
				at[ids.Value(i)] = lake.RowID{File: file, Pos: pos.At(i)}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var rows []lake.RowID
		for _, k := range part.del {
			rows = append(rows, at[k])
		}
		rec := build(part.up, "new")
		err = st.Add(ctx, live, rows, []arrow.RecordBatch{rec})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Commit(ctx, lake.Equal("id", int64(10)), map[string]string{"tidemark.position": "2"}); err != nil {
		t.Fatal(err)
	}
	got := readWithDeltaRs(t, py, filepath.Join(append([]string{wh}, ident...)...), "--query", "--cdf")
	var rows []string
	for _, r := range got.Rows {
		rows = append(rows, fmt.Sprintf("%v=%v", r["id"], r["v"]))
	}
	slices.Sort(rows)
	want := []string{"1=new1", "11=new11", "3=v3", "4=v4", "5=v5", "6=new6", "7=v7", "8=v8", "9=v9"}
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Fatalf("delta-rs reads %v, want %v", rows, want)
	}
	var feed []string
	for _, r := range got.CDF {
		if v := r["_commit_version"].(float64); v == 2 {
			feed = append(feed, fmt.Sprintf("%v %v=%v", r["_change_type"], r["id"], r["v"]))
		}
	}
	slices.Sort(feed)
	wantFeed := []string{"delete 10=v10", "delete 2=v2", "insert 11=new11", "update_postimage 1=new1", "update_postimage 6=new6",
		"update_preimage 1=v1", "update_preimage 6=v6"}
	if !slices.Equal(feed, wantFeed) {
		t.Fatalf("delta-rs change data feed of the staged merge:\n got %v\nwant %v", feed, wantFeed)
	}
}
