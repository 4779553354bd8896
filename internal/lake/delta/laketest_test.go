package delta_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	"github.com/tidemark/tidemark/internal/lake/laketest"
)

// TestLakeContract runs the format-neutral conformance suite on the
// directory catalog of a warehouse.
func TestLakeContract(t *testing.T) {
	laketest.Run(t, func(t *testing.T, dir string) lake.Catalog {
		cat, err := delta.OpenCatalog(dir)
		if err != nil {
			t.Fatalf("open catalog: %v", err)
		}
		return cat
	})
}

// TestCatalogLayout: what the directory catalog leaves on disk, where
// readers find it: namespaces are directories with their properties in
// NamespaceFile, a table is a directory with _delta_log that Rename moves
// whole (refusing any existing target, an empty directory included), and
// Drop moves aside to _tidemark/dropped/, files kept.
func TestCatalogLayout(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	ident := []string{"silver", "src", "public", "t"}
	tbl, err := cat.Create(ctx, ident, lake.TableSpec{Schema: sc, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewInt64Builder(memory.DefaultAllocator)
	b.AppendValues([]int64{1, 2, 3}, nil)
	col := b.NewArray()
	rec := array.NewRecordBatch(sc, []arrow.Array{col}, 3)
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "1"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range [][]string{{"silver"}, {"silver", "src"}, {"silver", "src", "public"}} {
		data, err := os.ReadFile(filepath.Join(append(append([]string{wh}, ns...), delta.NamespaceFile)...))
		if err != nil || !json.Valid(data) {
			t.Fatalf("namespace %v: its properties file: %v %q", ns, err, data)
		}
	}
	dir := filepath.Join(wh, "silver", "src", "public", "t")
	if d, err := delta.Open(ctx, dir); err != nil || d.Version() != 1 {
		t.Fatalf("the table's directory %s: %v", dir, err)
	}

	// A rename onto an existing (even empty) directory is refused, and
	// changes nothing.
	blocker := filepath.Join(wh, "silver", "src", "public", "u")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Rename(ctx, ident, []string{"silver", "src", "public", "u"}); !errors.Is(err, lake.ErrTableExists) {
		t.Fatalf("rename onto an empty directory: %v, want ErrTableExists", err)
	}
	if _, err := cat.Open(ctx, ident); err != nil {
		t.Fatalf("the table after a refused rename: %v", err)
	}
	moved := []string{"silver", "src", "other", "t"}
	if _, err := cat.Rename(ctx, ident, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old directory after a rename: %v", err)
	}

	if err := cat.Drop(ctx, moved); err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(wh, "_tidemark", "dropped", "silver.src.other.t-*", "_delta_log", "*.json"))
	if len(kept) != 2 {
		t.Fatalf("the dropped table's commits under _tidemark/dropped: %q, want 2", kept)
	}
	if nss, err := cat.ListNamespaces(ctx); err != nil || slices.ContainsFunc(nss, func(n []string) bool { return n[0] == "_tidemark" }) {
		t.Fatalf("namespaces %q, %v: _tidemark is not one", nss, err)
	}
	if _, err := cat.Create(ctx, []string{"_tidemark", "t"}, lake.TableSpec{Schema: sc}); !errors.Is(err, lake.ErrInvalidIdentifier) {
		t.Fatalf("a table under _tidemark: %v, want ErrInvalidIdentifier", err)
	}
}

// TestEvolveNamedErrors: what Delta cannot evolve fails with a named
// error that says why, and changes nothing.
func TestEvolveNamedErrors(t *testing.T) {
	ctx := context.Background()
	cat, err := delta.OpenCatalog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	tbl, err := cat.Create(ctx, []string{"silver", "s", "public", "t"}, lake.TableSpec{Schema: sc, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range map[string]lake.Evolution{
		"delete": {Delete: []string{"v"}},
		"rename": {Rename: []lake.Rename{{From: "v", To: "w"}}},
	} {
		err := tbl.Evolve(ctx, e)
		if !errors.Is(err, delta.ErrColumnMapping) || !errors.Is(err, lake.ErrUnsupported) || !strings.Contains(err.Error(), "silver.s.public.t") {
			t.Errorf("%s a column: %v, want ErrColumnMapping (lake.ErrUnsupported) naming the table", name, err)
		}
	}
	err = tbl.Evolve(ctx, lake.Evolution{Widen: []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32}}})
	if !errors.Is(err, lake.ErrIncompatibleType) {
		t.Errorf("narrow long to int: %v, want ErrIncompatibleType", err)
	}
	if !tbl.ArrowSchema().Equal(sc) {
		t.Errorf("schema after refused evolutions:\n%s", tbl.ArrowSchema())
	}
}

// TestEvolveNoteReadsTheTable: Evolve's Note may read the table it
// evolves (bronze's reads its properties) without blocking.
func TestEvolveNoteReadsTheTable(t *testing.T) {
	ctx := context.Background()
	cat, err := delta.OpenCatalog(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	tbl, err := cat.Create(ctx, []string{"bronze", "s", "public", "t"}, lake.TableSpec{Schema: sc, Properties: map[string]string{"tidemark.k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- tbl.Evolve(ctx, lake.Evolution{
			Add: []arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true}},
			Note: func(snap int64) map[string]string {
				return map[string]string{"tidemark.noted": tbl.Properties()["tidemark.k"] + fmt.Sprint(tbl.ArrowSchema().NumFields())}
			},
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Evolve with a Note that reads the table did not return in 10 s")
	}
	if got := tbl.Properties()["tidemark.noted"]; got != "v1" {
		t.Fatalf("noted property %q, want v1 (the table as the Note read it)", got)
	}
}
