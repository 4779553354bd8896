package iceberg_test

import (
	"context"
	"errors"
	"testing"

	"github.com/apache/iceberg-go/catalog"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/lake/laketest"
)

// TestLakeContract runs the format-neutral conformance suite on the SQLite
// catalog of a warehouse directory.
func TestLakeContract(t *testing.T) {
	laketest.Run(t, func(t *testing.T, dir string) lake.Catalog {
		cat, err := iceberg.Open(context.Background(), iceberg.Config{Warehouse: dir})
		if err != nil {
			t.Fatalf("open catalog: %v", err)
		}
		return cat
	})
}

// TestErrorsMatchBothLayers: an error of iceberg-go's catalog matches
// package lake's sentinel and still iceberg-go's, with its text unchanged.
func TestErrorsMatchBothLayers(t *testing.T) {
	ctx := context.Background()
	cat, err := iceberg.Open(ctx, iceberg.Config{Warehouse: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	_, err = cat.LoadTable(ctx, []string{"bronze", "src", "public", "missing"})
	if !errors.Is(err, lake.ErrNoSuchTable) || !errors.Is(err, catalog.ErrNoSuchTable) || !errors.Is(err, iceberg.ErrNoSuchTable) {
		t.Fatalf("load a missing table: %v: want lake.ErrNoSuchTable and catalog.ErrNoSuchTable", err)
	}
	if want := "iceberg: load table bronze.src.public.missing: table does not exist: [bronze src public missing]"; err.Error() != want {
		t.Fatalf("the error's text %q, want iceberg-go's unchanged: %q", err, want)
	}
	_, err = cat.NamespaceProperties(ctx, []string{"nowhere"})
	if !errors.Is(err, lake.ErrNoSuchNamespace) || !errors.Is(err, catalog.ErrNoSuchNamespace) {
		t.Fatalf("properties of a missing namespace: %v", err)
	}
}
