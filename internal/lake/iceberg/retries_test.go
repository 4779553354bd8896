package iceberg_test

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// A commit that loses to another writer is made again on the new head, and
// counted (tidemark_lake_retries_total{reason="commit_conflict"}): a handle
// loaded before another handle's append appends after it.
func TestLostCommitRaceIsCounted(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	ident := []string{"bronze", "s", "p", "counted"}
	if _, err := openCatalog(t, wh).CreateTable(ctx, ident, iceberg.TableSpec{Schema: simpleSchema()}); err != nil {
		t.Fatal(err)
	}
	stale, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	first, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, first, nil, map[string]any{"id": int64(1)})
	before := lake.Retries(lake.RetryCommitConflict)
	appendRows(t, stale, nil, map[string]any{"id": int64(2)}) // its head is behind: the first commit attempt loses
	if got := lake.Retries(lake.RetryCommitConflict) - before; got < 1 {
		t.Errorf("commit conflict retries counted: %d, want >= 1", got)
	}
	tbl, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(scanRows(t, ctx, tbl)); got != 2 {
		t.Errorf("rows = %d, want 2 (the retried append landed)", got)
	}
}
