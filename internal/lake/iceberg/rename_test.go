package iceberg_test

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// RenameColumns renames by field id: rows written before read under the
// new name; the properties land in the same commit; a retry is a no-op; a
// rename onto an existing name is refused.
func TestRenameColumns(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"bronze", "shop", "public", "ren"}, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, tbl, nil, map[string]any{"id": int64(1), "qty": int64(3), "price": nil, "amount": nil, "name": "old"})
	renames := []lake.Rename{{From: "name", To: "label"}}
	if err := tbl.RenameColumns(ctx, renames, map[string]string{"tidemark.x": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.RenameColumns(ctx, renames, nil); err != nil { // retried: done already
		t.Fatalf("retry: %v", err)
	}
	if tbl.Properties()["tidemark.x"] != "1" {
		t.Errorf("properties of the rename commit: %v", tbl.Properties())
	}
	// Two renames in one commit.
	if err := tbl.RenameColumns(ctx, []lake.Rename{{From: "qty", To: "n"}, {From: "price", To: "p"}}, nil); err != nil {
		t.Fatal(err)
	}
	if f, _ := tbl.Schema().FindFieldByName("n"); f.ID != 2 {
		t.Errorf("n has field id %d, want 2 (qty's)", f.ID)
	}
	if err := tbl.RenameColumns(ctx, []lake.Rename{{From: "label", To: "id"}}, nil); err == nil {
		t.Error("rename onto an existing column: no error")
	}
	diffRows(t, scanRows(t, ctx, tbl), []map[string]any{
		{"id": int64(1), "n": int64(3), "p": nil, "amount": nil, "label": "old"},
	})
}
