package iceberg_test

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestZZSchema(t *testing.T) {
	cat := openCatalog(t, t.TempDir())
	tbl := createAllTypes(t, cat, ordersIdent)
	rec := buildAllTypes(t, tbl.ArrowSchema(), allTypesRows())
	defer rec.Release()
	if err := tbl.Append(context.Background(), []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatal(err)
	}
	tbl.Scan(context.Background(), func(r arrow.RecordBatch) error {
		t.Logf("scan schema: %v\nequal to ArrowSchema: %v", r.Schema(), r.Schema().Equal(tbl.ArrowSchema()))
		return nil
	})
	t.Logf("ArrowSchema: %v", tbl.ArrowSchema())
}
