package iceberg_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// keyedTable creates a merge-on-read keyed table (id, qty, name) in 4
// buckets and appends rows 1..n with qty = id, name "v<id>", in three
// commits (several data files per bucket).
func keyedTable(t *testing.T, cat *iceberg.Catalog, ident []string, mode string, n int) *iceberg.Table {
	t.Helper()
	sch := iceberggo.NewSchema(0,
		iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
		iceberggo.NestedField{ID: 2, Name: "qty", Type: iceberggo.PrimitiveTypes.Int64},
		iceberggo.NestedField{ID: 3, Name: "name", Type: iceberggo.PrimitiveTypes.String},
	)
	tbl, err := cat.CreateKeyedTable(context.Background(), ident, iceberg.KeyedTableSpec{
		Schema: sch, Key: []string{"id"}, Buckets: 4, DeleteMode: mode})
	if err != nil {
		t.Fatal(err)
	}
	for part := range 3 {
		var rows []map[string]any
		for id := part*n/3 + 1; id <= (part+1)*n/3; id++ {
			rows = append(rows, map[string]any{"id": int64(id), "qty": int64(id), "name": fmt.Sprint("v", id)})
		}
		appendRows(t, tbl, map[string]string{"step": fmt.Sprint(part)}, rows...)
	}
	return tbl
}

// locate reads id and qty of the rows whose id is in ids, with ScanLive.
func locate(t *testing.T, tbl *iceberg.Table, ids ...int64) (*iceberg.LiveRows, map[int64][]iceberg.RowID, map[int64]int64) {
	t.Helper()
	vals := make([]any, len(ids))
	want := map[int64]bool{}
	for i, id := range ids {
		vals[i], want[id] = id, true
	}
	at := map[int64][]iceberg.RowID{}
	qty := map[int64]int64{}
	live, err := tbl.ScanLive(context.Background(), iceberg.In("id", vals), []string{"id", "qty"},
		func(rec arrow.RecordBatch, file int, pos iceberg.Positions) error {
			idc, qc := rec.Column(0).(*array.Int64), rec.Column(1).(*array.Int64)
			for i := 0; i < int(rec.NumRows()); i++ {
				if id := idc.Value(i); want[id] {
					at[id] = append(at[id], iceberg.RowID{File: file, Pos: pos.At(i)})
					qty[id] = qc.Value(i)
				}
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return live, at, qty
}

// TestMergeRowsDeletesByPosition: a merge deletes exactly the rows found
// by ScanLive and appends their new versions in one snapshot carrying its
// props; a second merge finds only the live versions (the position deletes
// of the first apply); iceberg-go and PyIceberg read the same rows.
func TestMergeRowsDeletesByPosition(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	ident := []string{"silver", "shop", "public", "orders"}
	const n = 3000
	tbl := keyedTable(t, cat, ident, iceberg.MergeOnRead, n)
	before, _ := tbl.CurrentSnapshot()

	// Update 10, 20, ..., 500; delete 7 and 2999.
	var upd []int64
	for id := int64(10); id <= 500; id += 10 {
		upd = append(upd, id)
	}
	gone := []int64{7, 2999}
	live, at, _ := locate(t, tbl, append(upd, gone...)...)
	var del []iceberg.RowID
	var rows []map[string]any
	for _, id := range append(upd, gone...) {
		if len(at[id]) != 1 {
			t.Fatalf("ScanLive found id %d at %v, want one row", id, at[id])
		}
		del = append(del, at[id]...)
	}
	for _, id := range upd {
		rows = append(rows, map[string]any{"id": id, "qty": -id, "name": fmt.Sprint("new", id)})
	}
	rec := buildRows(t, tbl.ArrowSchema(), rows...)
	defer rec.Release()
	if err := tbl.MergeRows(ctx, live, del, nil, []arrow.RecordBatch{rec}, map[string]string{"tidemark.cursor": "42"}); err != nil {
		t.Fatal(err)
	}
	snap, _ := tbl.CurrentSnapshot()
	if snap.ParentID != before.ID || snap.Props["tidemark.cursor"] != "42" {
		t.Errorf("merge snapshot %+v: want one snapshot on %d carrying the props", snap, before.ID)
	}

	want := map[int64]map[string]any{}
	for id := int64(1); id <= n; id++ {
		want[id] = map[string]any{"id": id, "qty": id, "name": fmt.Sprint("v", id)}
	}
	for _, id := range upd {
		want[id] = map[string]any{"id": id, "qty": -id, "name": fmt.Sprint("new", id)}
	}
	for _, id := range gone {
		delete(want, id)
	}
	check := func(what string, got []map[string]any) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s reads %d rows, want %d", what, len(got), len(want))
		}
		seen := map[int64]bool{}
		for _, r := range got {
			id := r["id"].(int64)
			if seen[id] {
				t.Errorf("%s: id %d appears twice", what, id)
			}
			seen[id] = true
			w, ok := want[id]
			if !ok {
				t.Errorf("%s: deleted id %d is still there", what, id)
				continue
			}
			if fmt.Sprint(r["qty"]) != fmt.Sprint(w["qty"]) || r["name"] != w["name"] {
				t.Errorf("%s: id %d = %v, want %v", what, id, r, w)
			}
		}
	}
	check("iceberg-go", scanRows(t, ctx, tbl))

	// A second merge over the same keys sees only the new versions.
	live, at, qty := locate(t, tbl, append(upd, gone...)...)
	for _, id := range gone {
		if len(at[id]) != 0 {
			t.Errorf("ScanLive still finds deleted id %d", id)
		}
	}
	del = nil
	for _, id := range upd[:5] {
		if len(at[id]) != 1 || qty[id] != -id {
			t.Fatalf("ScanLive finds id %d at %v with qty %d, want one row with qty %d", id, at[id], qty[id], -id)
		}
		del = append(del, at[id]...)
		delete(want, id)
	}
	if err := tbl.MergeRows(ctx, live, del, nil, nil, map[string]string{"tidemark.cursor": "43"}); err != nil {
		t.Fatal(err)
	}
	check("iceberg-go after a delete-only merge", scanRows(t, ctx, tbl))

	py := pyiceberg(t)
	got := readWithPyIceberg(t, py, wh, "silver.shop.public.orders")
	check("PyIceberg", got.Rows)
	if got.Summary["tidemark.cursor"] != "43" {
		t.Errorf("PyIceberg summary = %v", got.Summary)
	}
}

// TestScanLiveColumnOrder: batches hold the columns in the order asked,
// not the table's.
func TestScanLiveColumnOrder(t *testing.T) {
	cat := openCatalog(t, t.TempDir())
	tbl := keyedTable(t, cat, []string{"silver", "shop", "public", "orders"}, iceberg.MergeOnRead, 30)
	rows := 0
	_, err := tbl.ScanLive(context.Background(), nil, []string{"name", "id"}, func(rec arrow.RecordBatch, _ int, _ iceberg.Positions) error {
		names, ok1 := rec.Column(0).(*array.String)
		ids, ok2 := rec.Column(1).(*array.Int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("columns %s, want name then id", rec.Schema())
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if names.Value(i) != fmt.Sprint("v", ids.Value(i)) {
				return fmt.Errorf("row %d: name %s, id %d", i, names.Value(i), ids.Value(i))
			}
		}
		rows += int(rec.NumRows())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 30 {
		t.Errorf("ScanLive with no filter read %d rows, want 30", rows)
	}
}

// TestMergeRowsRefusesStalePositions: positions read before another
// commit are not applied (they may point at replaced rows): the merge is a
// commit conflict and writes nothing.
func TestMergeRowsRefusesStalePositions(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	ident := []string{"silver", "shop", "public", "orders"}
	tbl := keyedTable(t, cat, ident, iceberg.MergeOnRead, 30)
	live, at, _ := locate(t, tbl, 5)
	other, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, other, nil, map[string]any{"id": int64(100), "qty": int64(1), "name": "x"})
	if err := tbl.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	head, _ := tbl.CurrentSnapshot()
	err = tbl.MergeRows(ctx, live, at[5], nil, nil, map[string]string{"k": "v"})
	if !errors.Is(err, iceberg.ErrCommitConflict) {
		t.Fatalf("merge with stale positions: %v, want ErrCommitConflict", err)
	}
	if now, _ := tbl.CurrentSnapshot(); now.ID != head.ID {
		t.Errorf("a refused merge committed snapshot %d", now.ID)
	}
}

// TestMergeRowsNeedsMergeOnRead: a copy-on-write table cannot take
// position deletes.
func TestMergeRowsNeedsMergeOnRead(t *testing.T) {
	cat := openCatalog(t, t.TempDir())
	tbl := keyedTable(t, cat, []string{"silver", "shop", "public", "orders"}, iceberg.CopyOnWrite, 30)
	if tbl.MergeOnRead() {
		t.Fatal("a copy-on-write table says it is merge-on-read")
	}
	live, at, _ := locate(t, tbl, 5)
	if err := tbl.MergeRows(context.Background(), live, at[5], nil, nil, nil); err == nil {
		t.Fatal("position deletes on a copy-on-write table: no error")
	}
}
