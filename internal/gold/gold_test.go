package gold_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/gold"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
)

// orders is a silver-shaped table: key, group column, amount, position.
var orders = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "customer_id", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "total", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
	{Name: silver.ColLSN, Type: arrow.PrimitiveTypes.Int64},
}, nil)

func ordersBatch(t *testing.T, rows [][3]int64) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, orders)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r[0])
		b.Field(1).(*array.Int32Builder).Append(int32(r[1]))
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(r[2]))
		b.Field(3).(*array.Int64Builder).Append(100)
	}
	return b.NewRecordBatch()
}

// goldRows reads a gold table as customer -> [orders, revenue (cents)].
func goldRows(t *testing.T, tbl lake.Table) map[int32][2]int64 {
	out := map[int32][2]int64{}
	if err := tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		c := rec.Column(0).(*array.Int32)
		n := rec.Column(1).(*array.Int64)
		s := rec.Column(2).(*array.Decimal128)
		for i := 0; i < int(rec.NumRows()); i++ {
			out[c.Value(i)] = [2]int64{n.Value(i), int64(s.Value(i).LowBits())}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRefreshReplaces: a refresh computes the SQL over silver's live rows
// into gold.<source>.<name>, replacing the previous result in one commit
// that records the silver snapshot it read; a bad query is a named
// configuration error, and the table keeps its previous version.
func TestRefreshReplaces(t *testing.T) {
	for _, format := range []string{"iceberg", "delta"} {
		t.Run(format, func(t *testing.T) {
			wh := t.TempDir()
			var cat lake.Catalog
			var err error
			if format == "delta" {
				cat, err = delta.OpenCatalog(wh)
			} else {
				cat, err = iceberg.Open(context.Background(), iceberg.Config{Warehouse: wh})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			testRefreshReplaces(t, cat, wh)
		})
	}
}

func testRefreshReplaces(t *testing.T, cat lake.Catalog, wh string) {
	ctx := context.Background()
	src, err := cat.Create(ctx, silver.Ident("shop", "public", "orders"), lake.TableSpec{Schema: orders, Key: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	// The source's capture has run: a table with no bronze table either is unknown.
	if _, err := cat.Create(ctx, []string{"bronze", "shop", "public", "orders"}, lake.TableSpec{Schema: orders}); err != nil {
		t.Fatal(err)
	}
	rec := ordersBatch(t, [][3]int64{{1, 7, 1000}, {2, 7, 250}, {3, 8, 99}})
	if err := src.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{silver.PropPosition: "100"}); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	r := gold.NewRefresher(cat, gold.Options{Source: "shop", Warehouse: wh, TempDir: filepath.Join(wh, "tmp"), MemoryLimit: 64 << 20}, slog.New(slog.DiscardHandler))
	spec := gold.Spec{Name: "per_customer", SQL: "SELECT customer_id, count(*) AS orders, sum(total) AS revenue FROM silver.public.orders GROUP BY 1;"}
	if _, err := r.Check(ctx, spec); err != nil {
		t.Fatal(err)
	}
	res, err := r.Refresh(ctx, spec, false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cat.Open(ctx, gold.Ident("shop", "per_customer"))
	if err != nil {
		t.Fatal(err)
	}
	if got := goldRows(t, g); len(got) != 2 || got[7] != [2]int64{2, 1250} || got[8] != [2]int64{1, 99} {
		t.Fatalf("gold after the first refresh: %v (res %+v)", got, res)
	}
	snap, _ := src.CurrentSnapshot()
	reads := gold.Reads(g.Summary())
	if len(reads) != 1 || reads[0].Table != "silver.public.orders" || reads[0].Snapshot != snap.ID || reads[0].Position != "100" {
		t.Fatalf("gold commit records reads %+v, want silver.public.orders@%d position 100", reads, snap.ID)
	}
	if g.Summary()[gold.PropPosition] != "100" {
		t.Fatalf("gold commit's tidemark.position = %q, want 100", g.Summary()[gold.PropPosition])
	}
	// Nothing moved: no new commit.
	if res, err := r.Refresh(ctx, spec, false); err != nil || !res.Unchanged {
		t.Fatalf("second refresh with silver unchanged: %+v, %v", res, err)
	}
	// Silver moves (a delete and an insert): the whole result is replaced.
	if err := src.Merge(ctx, lake.Equal("id", int64(1)), []arrow.RecordBatch{ordersBatch(t, [][3]int64{{4, 9, 5}})}, map[string]string{silver.PropPosition: "200"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refresh(ctx, spec, false); err != nil {
		t.Fatal(err)
	}
	if err := g.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := goldRows(t, g); len(got) != 3 || got[7] != [2]int64{1, 250} || got[9] != [2]int64{1, 5} {
		t.Fatalf("gold after silver moved: %v", got)
	}
	before, _ := g.CurrentSnapshot()

	for _, c := range []struct{ sql, want string }{
		{"SELECT customer_id, count(*) FROM silver.public.nope GROUP BY 1", "silver.public.nope is not a table of source shop"},
		{"SELECT custmer_id FROM silver.public.orders", "custmer_id"},
		{"SELECT * FROM orders", "name silver tables as silver.<schema>.<table>"},
		{"SELECT customer_id, INTERVAL 1 DAY AS d FROM silver.public.orders", `"d" has DuckDB type INTERVAL`},
		{"DELETE FROM silver.public.orders", "one SELECT"},
		{"SELECT sum(o.total) FROM silver.public.orders o", `"sum(o.total)" needs a name without dots`},
		{"SELECT customer_id, customer_id FROM silver.public.orders", "two columns named"},
		{"SELECT 1 AS a; SELECT 2 AS b", "one SELECT"},
		{"SELECT * FROM read_csv('/etc/passwd')", "passwd"},
	} {
		bad := gold.Spec{Name: "per_customer", SQL: c.sql}
		_, err := r.Check(ctx, bad)
		if !errors.Is(err, fault.ErrGoldInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "gold.shop.per_customer") {
			t.Errorf("Check(%q) = %v, want [gold_invalid] naming gold.shop.per_customer and %q", c.sql, err, c.want)
		}
		if _, err := r.Refresh(ctx, bad, true); err == nil {
			t.Errorf("Refresh(%q) succeeded", c.sql)
		}
	}
	if err := g.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if after, _ := g.CurrentSnapshot(); after.ID != before.ID {
		t.Fatalf("a failed refresh committed snapshot %d over %d", after.ID, before.ID)
	}
	st := gold.States(wh, "shop")["per_customer"]
	if st.Code != "gold_invalid" || st.Failures == 0 {
		t.Fatalf("recorded state after failures: %+v", st)
	}
}
