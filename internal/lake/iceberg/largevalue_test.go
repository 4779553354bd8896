package iceberg_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// TestLargeValueFilesAreRewritten: a data file holding a value over the
// 64 MiB page arrow-go's readers accept by default (iceberg-go's reads
// refuse it) is rewritten like any other: by a copy-on-write merge that
// deletes another of its rows, and by compaction, position deletes folded
// in; the rows read the same after each.
func TestLargeValueFilesAreRewritten(t *testing.T) {
	if testing.Short() {
		t.Skip("a 70 MiB value, about 1 GiB of memory")
	}
	raw := make([]byte, 52<<20)
	rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw) // ~70 MiB, incompressible
	raw = nil
	for _, mode := range []string{iceberg.CopyOnWrite, iceberg.MergeOnRead} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			cat := openCatalog(t, t.TempDir())
			sch := iceberggo.NewSchema(0,
				iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
				iceberggo.NestedField{ID: 2, Name: "name", Type: iceberggo.PrimitiveTypes.String},
				iceberggo.NestedField{ID: 3, Name: "qty", Type: iceberggo.PrimitiveTypes.Int64}, // locate reads it
			)
			tbl, err := cat.CreateKeyedTable(ctx, []string{"silver", "s", "public", "big"}, iceberg.KeyedTableSpec{
				Schema: sch, Key: []string{"id"}, DeleteMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			appendRows(t, tbl, nil, map[string]any{"id": int64(1), "name": big},
				map[string]any{"id": int64(2), "name": "a"}, map[string]any{"id": int64(3), "name": "b"})
			// Replace row 2 of the file holding the large value.
			rec := buildRows(t, tbl.ArrowSchema(), map[string]any{"id": int64(2), "name": "a2"})
			defer rec.Release()
			props := map[string]string{"tidemark.cursor": "1"}
			if mode == iceberg.CopyOnWrite {
				err = tbl.Merge(ctx, iceberg.In("id", []any{int64(2)}), []arrow.RecordBatch{rec}, props)
			} else {
				live, at, _ := locate(t, tbl, 2)
				err = tbl.MergeRows(ctx, live, at[2], nil, []arrow.RecordBatch{rec}, props)
			}
			if err != nil {
				t.Fatalf("merge: %v", err)
			}
			want := map[int64]string{1: fmt.Sprintf("%.8s…×%d", big, len(big)), 2: "a2×2", 3: "b×1"}
			checkNames(t, tbl, want, "after the merge")
			res, err := tbl.Compact(ctx, iceberg.CompactOptions{})
			if err != nil {
				t.Fatalf("compact: %v", err)
			}
			fp, err := tbl.Footprint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.RemovedDataFiles != 2 || fp.DataFiles != 1 || fp.DeleteFiles != 0 {
				t.Errorf("compaction rewrote %d data files, leaving %d data and %d delete files; want 2 rewritten into 1, no deletes",
					res.RemovedDataFiles, fp.DataFiles, fp.DeleteFiles)
			}
			if fp.DataBytes > int64(len(big))*5/4 {
				t.Errorf("after compaction the table holds %d bytes of data files, want one copy of the %d-byte value", fp.DataBytes, len(big))
			}
			checkNames(t, tbl, want, "after compaction")
		})
	}
}

// checkNames reads id and name of every row of tbl and compares each name,
// summarized as its first 8 characters and its length when longer.
func checkNames(t *testing.T, tbl *iceberg.Table, want map[int64]string, when string) {
	t.Helper()
	got := map[int64]string{}
	err := tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		names := rec.Column(rec.Schema().FieldIndices("name")[0]).(*array.String)
		for i := range int(rec.NumRows()) {
			v := names.Value(i)
			if len(v) > 8 {
				got[ids.Value(i)] = fmt.Sprintf("%.8s…×%d", v, len(v))
			} else {
				got[ids.Value(i)] = fmt.Sprintf("%s×%d", v, len(v))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", when, err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s the table reads %v, want %v", when, got, want)
	}
}
