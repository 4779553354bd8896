package iceberg_test

import (
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// The files appended in a range, planned from the last snapshot's manifest
// list (issue 22), are those iceberg-go's incremental append scan plans;
// across a compaction it falls back to that scan, and ScanAppended still
// reads every row appended in the range.
func TestPlanAppendedMatchesTheIncrementalScan(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"ns", "appended"}, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 12; i++ {
		appendRows(t, tbl, nil, map[string]any{"id": i, "name": "a"}, map[string]any{"id": 100 + i, "name": "b"})
	}
	check := func(hist []iceberg.SnapshotInfo, wantOK bool) {
		t.Helper()
		for _, r := range [][2]int{{-1, len(hist) - 1}, {-1, 0}, {0, 1}, {2, 7}, {5, len(hist) - 1}, {len(hist) - 2, len(hist) - 1}} {
			after := iceberg.NoSnapshot
			if r[0] >= 0 {
				after = hist[r[0]].ID
			}
			ours, theirs, ok, err := iceberg.PlanAppendedBoth(ctx, tbl, after, hist[r[1]].ID)
			if err != nil {
				t.Fatal(err)
			}
			if ok && !slices.Equal(ours, theirs) {
				t.Errorf("range %v: planned %v, the incremental scan %v", r, ours, theirs)
			}
			if len(theirs) == 0 {
				t.Errorf("range %v: no files", r)
			}
			if wantOK && !ok {
				t.Errorf("range %v of appends only: fell back to the incremental scan", r)
			}
		}
	}
	hist, err := tbl.History(iceberg.NoSnapshot, mustHead(t, tbl))
	if err != nil {
		t.Fatal(err)
	}
	check(hist, true)

	// A compaction rewrites the files appended so far: a range across it
	// is planned by the incremental scan (the files as they were added).
	if _, err := tbl.Compact(ctx, iceberg.CompactOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := int64(13); i <= 15; i++ {
		appendRows(t, tbl, nil, map[string]any{"id": i, "name": "c"})
	}
	hist, err = tbl.History(iceberg.NoSnapshot, mustHead(t, tbl))
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 16 || hist[12].Operation == "append" {
		t.Fatalf("history %d snapshots, the 13th %q: want 16 with a compaction", len(hist), hist[12].Operation)
	}
	_, _, across, err := iceberg.PlanAppendedBoth(ctx, tbl, hist[3].ID, hist[15].ID)
	if err != nil || across {
		t.Errorf("range across the compaction: ok %v, %v; want the incremental scan", across, err)
	}
	var rows int64
	if err := tbl.ScanAppended(ctx, hist[3].ID, hist[15].ID, func(rec arrow.RecordBatch) error {
		rows += rec.NumRows()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rows != 8*2+3 {
		t.Errorf("ScanAppended across the compaction read %d rows, want %d", rows, 8*2+3)
	}
	// After the compaction: appends only.
	ours, theirs, ok, err := iceberg.PlanAppendedBoth(ctx, tbl, hist[12].ID, hist[15].ID)
	if err != nil || !ok || len(ours) != 3 || !slices.Equal(ours, theirs) {
		t.Errorf("range after the compaction: planned %v (ok %v, %v), the incremental scan %v", ours, ok, err, theirs)
	}
}

func mustHead(t *testing.T, tbl *iceberg.Table) int64 {
	t.Helper()
	s, ok := tbl.CurrentSnapshot()
	if !ok {
		t.Fatal("no snapshot")
	}
	return s.ID
}
