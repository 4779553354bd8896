package iceberg_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// A table created under a staging name with PlaceAs keeps its files where
// a table of the final name would, before and after the rename; a table
// created without it stays where it was (existing lakes keep working).
func TestCreatePlaceAsThenRename(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	sch := iceberggo.NewSchema(0,
		iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
		iceberggo.NestedField{ID: 2, Name: "name", Type: iceberggo.PrimitiveTypes.String},
	)
	staging := []string{"silver", "src", "_building", "public", "t"}
	final := []string{"silver", "src", "public", "t"}
	tbl, err := cat.CreateKeyedTable(ctx, staging, iceberg.KeyedTableSpec{Schema: sch, Key: []string{"id"}, Buckets: 2, PlaceAs: final})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, tbl, nil, map[string]any{"id": int64(1), "name": "a"}, map[string]any{"id": int64(2), "name": "b"})
	moved, err := cat.RenameTable(ctx, staging, final)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, moved, nil, map[string]any{"id": int64(3), "name": "c"})
	old, err := cat.CreateKeyedTable(ctx, []string{"silver", "src", "_building", "public", "u"}, iceberg.KeyedTableSpec{Schema: sch, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, old, nil, map[string]any{"id": int64(1), "name": "a"})

	var underFinal, underBuilding, other []string
	err = filepath.WalkDir(wh, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") && !strings.HasSuffix(p, ".json") && !strings.HasSuffix(p, ".avro") {
			return err
		}
		rel, _ := filepath.Rel(wh, p)
		switch {
		case strings.HasPrefix(rel, "silver.src.public.db/t/"):
			underFinal = append(underFinal, rel)
		case strings.Contains(rel, "_building") && strings.Contains(rel, "/u/"):
			underBuilding = append(underBuilding, rel)
		default:
			other = append(other, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(underFinal) == 0 || len(underBuilding) == 0 || len(other) > 0 {
		t.Errorf("files under the final name: %d; of the table created without PlaceAs, under its own: %d; elsewhere: %q",
			len(underFinal), len(underBuilding), other)
	}
	if n := len(scanRows(t, ctx, moved)); n != 3 {
		t.Errorf("the renamed table reads %d rows, want 3", n)
	}
}
