package delta_test

import (
	"testing"

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
