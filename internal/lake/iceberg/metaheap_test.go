package iceberg_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// metaHeapBound is the most live heap a table may hold after many small
// appends. Each snapshot's entry in the metadata is a few hundred bytes of
// summary (bronze's props included), so 300 snapshots are well under
// 1 MiB of metadata; the bound leaves room for the catalog and caches but
// not for one copy of the metadata per version (85 MiB at 200 commits
// measured before the fix, growing with the square of the commit count).
const metaHeapBound = 40 << 20

// A table that received many small commits holds its current metadata, not
// every version of it: after 300 one-row appends whose summaries carry
// bronze-like props, the live heap has grown by less than metaHeapBound.
func TestManyAppendsHoldOneMetadata(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"ns", "many"}, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	// Bronze's props: the cursor, slot, position, watermark, column ids.
	ids := strings.Repeat("col_name=12,", 20)
	base := liveHeap()
	const commits = 300
	for i := range commits {
		rec := wideRows(tbl.ArrowSchema(), int64(i), 1, func() string { return "x" })
		props := map[string]string{
			"tidemark.cursor":     fmt.Sprintf("%d:%d", 1<<32+i, i),
			"tidemark.slot":       "tidemark_slot",
			"tidemark.position":   fmt.Sprint(1<<32 + i),
			"tidemark.watermark":  "2026-12-04T01:02:03.123456789Z",
			"tidemark.column_ids": ids,
		}
		if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, props); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	now := liveHeap()
	live := now - min(now, base)
	t.Logf("live heap after %d appends: +%.1f MiB (%d snapshots)", commits, float64(live)/(1<<20), tbl.SnapshotCount())
	if live > metaHeapBound {
		t.Fatalf("live heap after %d appends: +%d MiB, want under %d MiB: the table keeps old versions of its metadata",
			commits, live>>20, metaHeapBound>>20)
	}
	runtime.KeepAlive(tbl)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
