package bronze_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// After a column with a missing value is added, rows decoded without it
// get the missing value while they predate it (a change of the old layout
// before the first row with the column, a snapshot chunk read before the
// ALTER), and NULL once they follow a DROP COLUMN. The table property
// records the value with the snapshot current at the add.
func TestRowsWithoutAnAddedColumnGetItsDefault(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, w := openWriter(t, wh)
	defer cat.Close()
	defer w.Close()
	id := change.TableID{Schema: "public", Name: "t"}
	old := &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int64, SourceType: "bigint"},
	}}
	withLate := &change.Schema{Key: old.Key, Fields: append(slices.Clone(old.Fields),
		change.Field{Name: "late", Type: iceberg.PrimitiveTypes.String, SourceType: "text", Missing: "x", MissingText: "x"})}
	write := func(s *change.Schema, lsn uint64, vals ...any) {
		t.Helper()
		c := &change.Change{Table: id, Op: change.OpUpdate, Schema: s, Values: vals, Pos: change.Position{LSN: lsn, Seq: 1},
			TxID: int64(lsn), CommitTime: time.Unix(int64(lsn), 0)}
		if err := w.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	chunk := func(lsn uint64, ids ...int64) {
		t.Helper()
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues(ids, nil)
		c := &change.Chunk{Table: id, Schema: &change.Schema{Key: old.Key, Fields: old.Fields}, Columns: []arrow.Array{b.NewArray()},
			Rows: len(ids), LSN: lsn, TxID: int64(lsn), CommitTime: time.Unix(int64(lsn), 0)}
		b.Release()
		if err := w.WriteChunk(ctx, c, map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":1}`}); err != nil {
			t.Fatal(err)
		}
	}
	flush := func(lsn uint64) {
		t.Helper()
		if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(lsn+1, 10), Pos: lsn, Watermark: time.Unix(int64(lsn), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.OpenTable(ctx, id, old); err != nil {
		t.Fatal(err)
	}
	write(old, 100, int64(1))
	flush(100)
	// ALTER TABLE t ADD COLUMN late text DEFAULT 'x', seen at a restart's
	// open: the stream replays a change from before it.
	if _, err := w.OpenTable(ctx, id, withLate); err != nil {
		t.Fatal(err)
	}
	write(old, 200, int64(2)) // the old layout, before the first row with the column: 'x'
	chunk(250, 10)            // a chunk read before the ALTER: 'x'
	write(withLate, 300, int64(3), "y")
	chunk(280, 11)            // read before the ALTER, written after the first row with it: 'x'
	write(old, 400, int64(4)) // after a DROP COLUMN: NULL
	chunk(450, 12)            // read after the DROP: NULL
	flush(450)

	got := map[int64]any{}
	for _, r := range bronzetest.Read(t, wh, bronze.Ident("src", id)...) {
		got[r["id"].(int64)] = r["late"]
	}
	want := map[int64]any{1: nil, 2: "x", 10: "x", 3: "y", 11: "x", 4: nil, 12: nil}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("late by id: %v, want %v", got, want)
	}
	tbl, err := cat.LoadTable(ctx, bronze.Ident("src", id))
	if err != nil {
		t.Fatal(err)
	}
	defs, err := bronze.Defaults(tbl.Properties())
	if err != nil {
		t.Fatal(err)
	}
	d, ok := defs["late"]
	cur, _ := tbl.CurrentSnapshot()
	hist, err := tbl.History(lake.NoSnapshot, cur.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The rows of the snapshot current at the add (only id 1's) predate it.
	if !ok || string(d.Value) != `"x"` || d.Text != "x" || d.Snapshot != hist[0].ID {
		t.Errorf("%s: %+v (present %v), want value \"x\" at snapshot %d", bronze.PropDefaults, d, ok, hist[0].ID)
	}
}
