package iceberg_test

import (
	"context"
	"testing"

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
