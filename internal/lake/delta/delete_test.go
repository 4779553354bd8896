package delta_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
)

// createDV creates an unpartitioned table with deletion vectors.
func createDV(t *testing.T, dir string, interval int) *delta.Table {
	t.Helper()
	tbl, err := delta.Create(context.Background(), dir, delta.Spec{Schema: ordersSchema, DeletionVectors: true, CheckpointInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// positions returns the file positions of ids in the table's only file
// of each id, by scanning row order (rows are written in id order).
func fileOf(t *testing.T, tbl *delta.Table, id int64) (string, int64) {
	t.Helper()
	for _, f := range tbl.Files() {
		var lo, hi int64
		if _, err := fmt.Sscanf(minMaxID(t, f.Stats), "%d %d", &lo, &hi); err != nil {
			t.Fatal(err)
		}
		if id >= lo && id <= hi {
			return f.Path, id - lo
		}
	}
	t.Fatalf("no file holds id %d", id)
	return "", 0
}

func TestDeleteWithDeletionVectors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createDV(t, dir, 3)
	if p := tbl.Protocol(); p.MinReaderVersion != 3 || !slices.Contains(p.ReaderFeatures, "deletionVectors") || !slices.Contains(p.WriterFeatures, "deletionVectors") {
		t.Fatalf("protocol %+v", p)
	}
	appendRows(t, tbl, 0, 10, delta.Commit{})
	appendRows(t, tbl, 10, 20, delta.Commit{})
	del := func(ids []int64, recs []arrow.RecordBatch, c delta.Commit) delta.Result {
		t.Helper()
		rows := map[string][]int64{}
		for _, id := range ids {
			p, pos := fileOf(t, tbl, id)
			rows[p] = append(rows[p], pos)
		}
		res, err := tbl.Delete(ctx, rows, recs, c)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	del([]int64{0, 3, 12}, nil, delta.Commit{AppID: "silver", Version: 1})
	// Deleting more rows of a file that has a deletion vector unions them;
	// the same commit appends new rows.
	extra := orders(t, 20, 22)
	defer extra.Release()
	del([]int64{4, 19}, []arrow.RecordBatch{extra}, delta.Commit{AppID: "silver", Version: 2})
	// A replay of the same position does nothing.
	if res := del([]int64{5}, nil, delta.Commit{AppID: "silver", Version: 2}); res.Committed {
		t.Fatalf("replay committed %+v", res)
	}
	want := []int64{1, 2, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 20, 21}
	for _, d := range []string{"", "reopen"} {
		re := tbl
		if d != "" {
			var err error
			if re, err = delta.Open(ctx, dir); err != nil {
				t.Fatal(err)
			}
		}
		if got := scanIDs(t, re); !slices.Equal(got, want) {
			t.Fatalf("%s ids %v, want %v", d, got, want)
		}
	}
	// Version 3 is checkpointed: the table reads the same from it alone.
	cp := filepath.Join(t.TempDir(), "cp")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	for v := 0; v <= 3; v++ {
		os.Remove(filepath.Join(cp, "_delta_log", fmt.Sprintf("%020d.json", v)))
	}
	re, err := delta.Open(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	if got := scanIDs(t, re); !slices.Equal(got, want) {
		t.Fatalf("from the checkpoint: ids %v", got)
	}
	// ScanAppended of the delete commits gives only the rows they appended.
	var appended []int64
	tbl.ScanAppended(ctx, 2, 4, func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			appended = append(appended, rec.Column(0).(interface{ Value(int) int64 }).Value(i))
		}
		return nil
	})
	if !slices.Equal(appended, []int64{20, 21}) {
		t.Fatalf("appended by the deletes: %v", appended)
	}
	// A stale handle deleting from a file another writer changed meanwhile
	// conflicts.
	stale, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	p, pos := fileOf(t, tbl, 6)
	if _, err := tbl.Delete(ctx, map[string][]int64{p: {pos}}, nil, delta.Commit{}); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Delete(ctx, map[string][]int64{p: {pos + 1}}, nil, delta.Commit{}); !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("stale delete: %v, want ErrCommitConflict", err)
	}
	// An append-only table refuses deletes.
	ao := createOrders(t, t.TempDir(), 0)
	if _, err := ao.Delete(ctx, map[string][]int64{}, nil, delta.Commit{}); !errors.Is(err, delta.ErrUnsupported) {
		t.Fatalf("delete from a table without deletion vectors: %v", err)
	}
}
