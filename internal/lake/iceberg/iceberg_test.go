package iceberg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

var ordersIdent = []string{"bronze", "shop", "public", "orders"}

func openCatalog(t testing.TB, warehouse string) *iceberg.Catalog {
	t.Helper()
	cat, err := iceberg.Open(context.Background(), iceberg.Config{Warehouse: warehouse})
	if err != nil {
		t.Fatalf("open catalog: %v", err)
	}
	t.Cleanup(func() { _ = cat.Close() })
	return cat
}

func createAllTypes(t testing.TB, cat *iceberg.Catalog, ident []string) *iceberg.Table {
	t.Helper()
	tbl, err := cat.CreateTable(context.Background(), ident, iceberg.TableSpec{
		Schema:       allTypesSchema(),
		DayPartition: "tstz",
		Properties:   map[string]string{"tidemark.source": "shop"},
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return tbl
}

func release(recs ...arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

func TestCreateAppendReload(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	tbl := createAllTypes(t, cat, ordersIdent)

	if got := tbl.Summary(); got != nil {
		t.Errorf("summary of a new table = %v, want nil", got)
	}
	if got := tbl.SnapshotCount(); got != 0 {
		t.Errorf("snapshots of a new table = %d, want 0", got)
	}
	if got := tbl.Ident(); !reflect.DeepEqual(got, ordersIdent) {
		t.Errorf("Ident() = %v", got)
	}

	rows := allTypesRows()
	// First append: two records, one commit.
	r1 := buildAllTypes(t, tbl.ArrowSchema(), rows[:1])
	r2 := buildAllTypes(t, tbl.ArrowSchema(), rows[1:2])
	defer release(r1, r2)
	if err := tbl.Append(ctx, []arrow.RecordBatch{r1, r2}, map[string]string{
		"tidemark.position": "100", "tidemark.watermark": "2024-03-01T00:00:00Z",
	}); err != nil {
		t.Fatalf("first append: %v", err)
	}
	if got := tbl.SnapshotCount(); got != 1 {
		t.Fatalf("after one Append of two records: %d snapshots, want 1", got)
	}
	sum := tbl.Summary()
	if sum["tidemark.position"] != "100" || sum["added-records"] != "2" || sum["operation"] != "append" {
		t.Errorf("summary after first append = %v", sum)
	}

	r3 := buildAllTypes(t, tbl.ArrowSchema(), rows[2:])
	defer release(r3)
	if err := tbl.Append(ctx, []arrow.RecordBatch{r3}, map[string]string{"tidemark.position": "200"}); err != nil {
		t.Fatalf("second append: %v", err)
	}

	// A fresh catalog sees what was committed.
	if err := cat.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	cat2 := openCatalog(t, wh)
	re, err := cat2.LoadTable(ctx, ordersIdent)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := re.SnapshotCount(); got != 2 {
		t.Errorf("snapshots after reload = %d, want 2", got)
	}
	sum = re.Summary()
	if sum["tidemark.position"] != "200" || sum["added-records"] != "2" || sum["total-records"] != "4" {
		t.Errorf("summary after reload = %v", sum)
	}
	if _, ok := sum["tidemark.watermark"]; ok {
		t.Errorf("second snapshot inherited tidemark.watermark from the first: %v", sum)
	}

	want := jsonRows(t, []arrow.RecordBatch{r1, r2, r3})
	diffRows(t, scanRows(t, ctx, re), want)
}

func TestEmptyAppendCarriesProps(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl := createAllTypes(t, cat, ordersIdent)
	if err := tbl.Append(ctx, nil, map[string]string{"tidemark.position": "7"}); err != nil {
		t.Fatalf("empty append: %v", err)
	}
	if got := tbl.Summary()["tidemark.position"]; got != "7" {
		t.Errorf("tidemark.position = %q, want 7 (summary %v)", got, tbl.Summary())
	}
	if rows := scanRows(t, ctx, tbl); len(rows) != 0 {
		t.Errorf("empty append produced rows: %v", rows)
	}
}

func TestCreateTableExists(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	createAllTypes(t, cat, ordersIdent)
	_, err := cat.CreateTable(ctx, ordersIdent, iceberg.TableSpec{Schema: allTypesSchema()})
	if !errors.Is(err, iceberg.ErrTableExists) {
		t.Fatalf("second create: err = %v, want ErrTableExists", err)
	}
	if !strings.Contains(err.Error(), "bronze.shop.public.orders") {
		t.Errorf("error does not name the table: %v", err)
	}
}

func TestLoadMissingTable(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	check := func(ident []string) {
		t.Helper()
		_, err := cat.LoadTable(ctx, ident)
		if !errors.Is(err, iceberg.ErrNoSuchTable) {
			t.Fatalf("load %v: err = %v, want ErrNoSuchTable", ident, err)
		}
		if !strings.Contains(err.Error(), strings.Join(ident, ".")) {
			t.Errorf("error does not name the table: %v", err)
		}
	}
	check(ordersIdent) // namespace missing too
	if err := cat.EnsureNamespace(ctx, ordersIdent[:3]); err != nil {
		t.Fatal(err)
	}
	check(ordersIdent) // namespace exists
}

func TestInvalidIdentifiers(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	for _, ident := range [][]string{
		{"orders"},
		{"bronze", "", "orders"},
		{"bronze", "my.schema", "orders"},
	} {
		_, err := cat.CreateTable(ctx, ident, iceberg.TableSpec{Schema: allTypesSchema()})
		if !errors.Is(err, iceberg.ErrInvalidIdentifier) {
			t.Errorf("create %q: err = %v, want ErrInvalidIdentifier", ident, err)
		}
	}
}

func TestNamespaces(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	ns := []string{"bronze", "shop", "public"}
	for range 2 { // idempotent
		if err := cat.EnsureNamespace(ctx, ns); err != nil {
			t.Fatalf("ensure namespace: %v", err)
		}
	}
	if err := cat.EnsureNamespace(ctx, []string{"silver", "shop", "public"}); err != nil {
		t.Fatal(err)
	}
	got, err := cat.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"bronze"}, {"bronze", "shop"}, {"bronze", "shop", "public"},
		{"silver"}, {"silver", "shop"}, {"silver", "shop", "public"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListNamespaces = %v, want %v", got, want)
	}

	props, err := cat.NamespaceProperties(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(props) != 0 {
		t.Errorf("properties of a new namespace = %v, want none", props)
	}
	if err := cat.SetNamespaceProperties(ctx, ns, map[string]string{"owner": "a", "tidemark.slot": "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.SetNamespaceProperties(ctx, ns, map[string]string{"owner": "b"}); err != nil {
		t.Fatal(err)
	}
	props, err = cat.NamespaceProperties(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"owner": "b", "tidemark.slot": "s1"}; !reflect.DeepEqual(props, want) {
		t.Errorf("namespace properties = %v, want %v", props, want)
	}
	if _, err := cat.NamespaceProperties(ctx, []string{"nope"}); !errors.Is(err, iceberg.ErrNoSuchNamespace) {
		t.Errorf("properties of a missing namespace: err = %v, want ErrNoSuchNamespace", err)
	}

	createAllTypes(t, cat, ordersIdent)
	createAllTypes(t, cat, []string{"bronze", "shop", "public", "customers"})
	createAllTypes(t, cat, []string{"bronze", "shop", "_messages"})
	tables, err := cat.ListTables(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	wantTables := [][]string{{"bronze", "shop", "public", "customers"}, ordersIdent}
	if !reflect.DeepEqual(tables, wantTables) {
		t.Errorf("ListTables(%v) = %v, want %v", ns, tables, wantTables)
	}
}

// simpleSchema is a narrow table for evolution tests.
func simpleSchema() *iceberggo.Schema {
	return iceberggo.NewSchema(0,
		iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true},
		iceberggo.NestedField{ID: 2, Name: "qty", Type: iceberggo.PrimitiveTypes.Int32},
		iceberggo.NestedField{ID: 3, Name: "price", Type: iceberggo.PrimitiveTypes.Float32},
		iceberggo.NestedField{ID: 4, Name: "amount", Type: iceberggo.DecimalTypeOf(10, 2)},
		iceberggo.NestedField{ID: 5, Name: "name", Type: iceberggo.PrimitiveTypes.String},
	)
}

// buildRows builds a record of sc from rows given as column name -> value
// (int64 for any integer column, float64 for any float column, string for
// decimal and string columns, nil for null).
func buildRows(t testing.TB, sc *arrow.Schema, rows ...map[string]any) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, row := range rows {
		for i, f := range sc.Fields() {
			v, ok := row[f.Name]
			if !ok || v == nil {
				b.Field(i).AppendNull()
				continue
			}
			switch fb := b.Field(i).(type) {
			case *array.Int32Builder:
				fb.Append(int32(v.(int64)))
			case *array.Int64Builder:
				fb.Append(v.(int64))
			case *array.Float32Builder:
				fb.Append(float32(v.(float64)))
			case *array.Float64Builder:
				fb.Append(v.(float64))
			case *array.StringBuilder:
				fb.Append(v.(string))
			case *array.Decimal128Builder:
				dt := f.Type.(*arrow.Decimal128Type)
				appendDecimal(t, fb, ptr(v.(string)), dt.Precision, dt.Scale)
			default:
				t.Fatalf("buildRows: unhandled builder %T", fb)
			}
		}
	}
	return b.NewRecordBatch()
}

func appendRows(t testing.TB, tbl *iceberg.Table, props map[string]string, rows ...map[string]any) {
	t.Helper()
	rec := buildRows(t, tbl.ArrowSchema(), rows...)
	defer rec.Release()
	if err := tbl.Append(context.Background(), []arrow.RecordBatch{rec}, props); err != nil {
		t.Fatalf("append: %v", err)
	}
}

func TestAddColumns(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	ident := []string{"bronze", "shop", "public", "items"}
	tbl, err := cat.CreateTable(ctx, ident, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, tbl, nil, map[string]any{"id": int64(1), "qty": int64(5), "name": "old"})

	cols := []iceberggo.NestedField{
		{Name: "note", Type: iceberggo.PrimitiveTypes.String},
		{Name: "labels", Type: &iceberggo.ListType{Element: iceberggo.PrimitiveTypes.String}},
		{Name: "big", Type: iceberggo.PrimitiveTypes.Int64},
	}
	if err := tbl.AddColumns(ctx, cols); err != nil {
		t.Fatalf("add columns: %v", err)
	}
	schemaID := tbl.Schema().ID
	if err := tbl.AddColumns(ctx, cols); err != nil { // retried evolution: no-op
		t.Fatalf("add the same columns again: %v", err)
	}
	if tbl.Schema().ID != schemaID {
		t.Errorf("re-adding existing columns changed the schema: %d -> %d", schemaID, tbl.Schema().ID)
	}
	err = tbl.AddColumns(ctx, []iceberggo.NestedField{{Name: "note", Type: iceberggo.PrimitiveTypes.Int64}})
	if !errors.Is(err, iceberg.ErrIncompatibleType) {
		t.Errorf("re-add note as long: err = %v, want ErrIncompatibleType", err)
	}
	if err := tbl.AddColumns(ctx, []iceberggo.NestedField{{Name: "must", Type: iceberggo.PrimitiveTypes.Int64, Required: true}}); err == nil {
		t.Error("adding a required column succeeded")
	}

	// Records with the new schema, including the list column.
	sc := tbl.ArrowSchema()
	if sc.NumFields() != 8 {
		t.Fatalf("arrow schema after add = %v", sc)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	b.Field(0).(*array.Int64Builder).Append(2)
	b.Field(1).AppendNull()
	b.Field(2).AppendNull()
	b.Field(3).AppendNull()
	b.Field(4).(*array.StringBuilder).Append("new")
	b.Field(5).(*array.StringBuilder).Append("hello")
	lb := b.Field(6).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.StringBuilder).Append("x")
	b.Field(7).(*array.Int64Builder).Append(1 << 40)
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "2"}); err != nil {
		t.Fatalf("append with new schema: %v", err)
	}

	re, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	got := scanRows(t, ctx, re)
	want := []map[string]any{
		{"id": int64(1), "qty": int64(5), "price": nil, "amount": nil, "name": "old", "note": nil, "labels": nil, "big": nil},
		{"id": int64(2), "qty": nil, "price": nil, "amount": nil, "name": "new", "note": "hello", "labels": []any{"x"}, "big": int64(1 << 40)},
	}
	diffRows(t, got, want)
}

func TestWidenColumn(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	ident := []string{"bronze", "shop", "public", "widen"}
	tbl, err := cat.CreateTable(ctx, ident, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, tbl, nil, map[string]any{"id": int64(1), "qty": int64(-2147483648), "price": 1.5, "amount": "-12345678.99"})

	// Refused changes leave the schema alone.
	for _, c := range []struct {
		col string
		to  iceberggo.Type
	}{
		{"name", iceberggo.PrimitiveTypes.Int64},   // string -> long
		{"name", iceberggo.PrimitiveTypes.Binary},  // string -> binary: iceberg-go allows it, we do not
		{"id", iceberggo.PrimitiveTypes.Int32},     // narrowing
		{"qty", iceberggo.PrimitiveTypes.Float64},  // int -> double
		{"amount", iceberggo.DecimalTypeOf(12, 3)}, // scale change
		{"amount", iceberggo.DecimalTypeOf(9, 2)},  // precision narrowing
		{"price", iceberggo.PrimitiveTypes.String}, // float -> string
	} {
		err := tbl.WidenColumn(ctx, c.col, c.to)
		if !errors.Is(err, iceberg.ErrIncompatibleType) {
			t.Errorf("widen %s to %s: err = %v, want ErrIncompatibleType", c.col, c.to, err)
		} else if !strings.Contains(err.Error(), "bronze.shop.public.widen") {
			t.Errorf("error does not name the table: %v", err)
		}
	}
	if tbl.SnapshotCount() != 1 || tbl.Schema().ID != 0 {
		t.Fatalf("refused widenings changed the table: schema %d", tbl.Schema().ID)
	}

	for _, c := range []struct {
		col string
		to  iceberggo.Type
	}{
		{"qty", iceberggo.PrimitiveTypes.Int64},
		{"qty", iceberggo.PrimitiveTypes.Int64}, // already long: no-op
		{"price", iceberggo.PrimitiveTypes.Float64},
		{"amount", iceberggo.DecimalTypeOf(38, 2)},
	} {
		if err := tbl.WidenColumn(ctx, c.col, c.to); err != nil {
			t.Fatalf("widen %s to %s: %v", c.col, c.to, err)
		}
	}
	if f, _ := tbl.Schema().FindFieldByName("qty"); !f.Type.Equals(iceberggo.PrimitiveTypes.Int64) {
		t.Fatalf("qty is %s after widening", f.Type)
	}
	appendRows(t, tbl, nil, map[string]any{
		"id": int64(2), "qty": int64(1) << 40, "price": 1e300,
		"amount": "123456789012345678901234567890123456.78",
	})

	re, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	diffRows(t, scanRows(t, ctx, re), []map[string]any{
		{"id": int64(1), "qty": int64(-2147483648), "price": 1.5, "amount": "-12345678.99", "name": nil},
		{"id": int64(2), "qty": int64(1) << 40, "price": 1e300, "amount": "123456789012345678901234567890123456.78", "name": nil},
	})

	// Filters on the widened columns: files written before the widening
	// hold 4-byte bounds (iceberg-go cannot plan with them); the rows are
	// still filtered exactly.
	for i, c := range []struct {
		f    *iceberg.Filter
		want []int64
	}{
		{iceberg.In("qty", []any{int64(-2147483648)}), []int64{1}},
		{iceberg.In("qty", []any{int64(1) << 40, int64(7)}), []int64{2}},
		{iceberg.Less("price", 2.0), []int64{1}},
		{iceberg.And(iceberg.Equal("id", int64(2)), iceberg.Less("qty", int64(0))), nil},
	} {
		var got []int64
		err := re.ScanWhere(ctx, c.f, func(rec arrow.RecordBatch) error {
			ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
			got = append(got, ids.Int64Values()...)
			return nil
		})
		if err != nil {
			t.Fatalf("ScanWhere #%d after widening: %v", i, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ScanWhere #%d after widening: ids %v, want %v", i, got, c.want)
		}
	}
}

func TestAppendRejectsForeignRecords(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"bronze", "s", "p", "t"}, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	base := tbl.ArrowSchema()
	withField := func(f arrow.Field) *arrow.Schema {
		return arrow.NewSchema(append(base.Fields(), f), nil)
	}
	retyped := base.Fields()
	retyped[4].Type = arrow.PrimitiveTypes.Int64 // name: string -> int64
	cases := map[string]*arrow.Schema{
		"unknown column": withField(arrow.Field{Name: "extra", Type: arrow.BinaryTypes.String, Nullable: true,
			Metadata: arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{"99"})}),
		"wrong type":       arrow.NewSchema(retyped, nil),
		"missing required": arrow.NewSchema(base.Fields()[1:], nil),
	}
	for name, sc := range cases {
		rec := buildRows(t, sc, map[string]any{"id": int64(1)})
		err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil)
		rec.Release()
		if err == nil {
			t.Errorf("%s: append succeeded", name)
		} else if !strings.Contains(err.Error(), "bronze.s.p.t") {
			t.Errorf("%s: error does not name the table: %v", name, err)
		}
	}
	if tbl.SnapshotCount() != 0 {
		t.Errorf("refused appends committed %d snapshots", tbl.SnapshotCount())
	}

	// Records of the table's schema without field ids are matched by name.
	noIDs := make([]arrow.Field, 0, base.NumFields())
	for _, f := range base.Fields() {
		f.Metadata = arrow.Metadata{}
		noIDs = append(noIDs, f)
	}
	rec := buildRows(t, arrow.NewSchema(noIDs, nil), map[string]any{"id": int64(1), "name": "by name"})
	defer rec.Release()
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
		t.Fatalf("append without field ids: %v", err)
	}
	if rows := scanRows(t, ctx, tbl); len(rows) != 1 || rows[0]["name"] != "by name" {
		t.Errorf("rows = %v", rows)
	}
}

// TestConcurrentAppends commits from two handles of the same table at
// once: every commit that loses the race is replayed, none is lost.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	ident := []string{"bronze", "s", "p", "race"}
	if _, err := cat.CreateTable(ctx, ident, iceberg.TableSpec{Schema: simpleSchema()}); err != nil {
		t.Fatal(err)
	}
	const writers, appends = 3, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*appends)
	for w := range writers {
		tbl, err := openCatalog(t, wh).LoadTable(ctx, ident)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appends {
				rec := buildRows(t, tbl.ArrowSchema(), map[string]any{"id": int64(w*100 + i)})
				err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": fmt.Sprint(w*100 + i)})
				rec.Release()
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent append: %v", err)
	}
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.SnapshotCount(); got != writers*appends {
		t.Errorf("snapshots = %d, want %d", got, writers*appends)
	}
	if got := len(scanRows(t, ctx, tbl)); got != writers*appends {
		t.Errorf("rows = %d, want %d", got, writers*appends)
	}
}

func TestRelativeWarehouse(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cat := openCatalog(t, "lake")
	if want := dir + "/lake"; cat.Warehouse() != want {
		t.Errorf("Warehouse() = %s, want %s", cat.Warehouse(), want)
	}
	createAllTypes(t, cat, ordersIdent)
}

// TestWarehousePathNeedingEscapes: iceberg-go writes file locations
// percent-encoded ("my%20lake") and PyIceberg does not decode them, so a
// warehouse path that needs escaping is refused up front.
func TestWarehousePathNeedingEscapes(t *testing.T) {
	for _, dir := range []string{"my lake", "100%", "lac-glacé"} {
		_, err := iceberg.Open(context.Background(), iceberg.Config{Warehouse: filepath.Join(t.TempDir(), dir)})
		if err == nil || !strings.Contains(err.Error(), "URL escaping") {
			t.Errorf("open warehouse %q: err = %v, want a refusal", dir, err)
		}
	}
	// Characters that need no escaping are fine.
	cat := openCatalog(t, filepath.Join(t.TempDir(), "lake_v1.2-x+y=z@host:1"))
	createAllTypes(t, cat, ordersIdent)
	if _, err := os.Stat(filepath.Join(cat.Warehouse(), "bronze.shop.public.db", "orders", "metadata")); err != nil {
		t.Errorf("table not under the warehouse: %v", err)
	}
}

// TestOpenReadOnly: a read-only open (tidemark status, show) reads an
// existing catalog and its tables, creates nothing, refuses writes, and
// names a missing warehouse as a configuration error. (As a user who may
// not write the warehouse: TestBadInputReadOnlyStatus in internal/app.)
func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	wh := filepath.Join(t.TempDir(), "lake")
	rw := openCatalog(t, wh)
	tbl := createAllTypes(t, rw, ordersIdent)
	appendRows(t, tbl, map[string]string{"tidemark.position": "7"}, map[string]any{"id": int64(1)})
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := iceberg.Open(ctx, iceberg.Config{Warehouse: wh, ReadOnly: true})
	if err != nil {
		t.Fatalf("open read-only: %v", err)
	}
	defer ro.Close()
	got, err := ro.LoadTable(ctx, ordersIdent)
	if err != nil {
		t.Fatalf("load table read-only: %v", err)
	}
	if got.Summary()["tidemark.position"] != "7" {
		t.Errorf("summary %v", got.Summary())
	}
	if _, err := ro.CreateTable(ctx, []string{"bronze", "shop", "public", "other"}, iceberg.TableSpec{Schema: simpleSchema()}); err == nil {
		t.Errorf("a read-only catalog created a table")
	}

	missing := filepath.Join(t.TempDir(), "nothing")
	_, err = iceberg.Open(ctx, iceberg.Config{Warehouse: missing, ReadOnly: true})
	if !errors.Is(err, fault.ErrBadConfig) || !strings.Contains(err.Error(), "--warehouse") {
		t.Errorf("read-only open of a missing warehouse: %v, want bad_config naming --warehouse", err)
	}
	if _, serr := os.Stat(missing); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a read-only open created %s", missing)
	}
}

// TestExpireAfterAConcurrentCommit expires snapshots through a handle
// that has not seen another writer's commit (a silver merge committing
// while maintenance runs): the catalog refuses the first attempt, and the
// expiry is planned again on the new head instead of failing maintenance.
func TestExpireAfterAConcurrentCommit(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	ident := []string{"silver", "s", "p", "expire"}
	writer, err := cat.CreateTable(ctx, ident, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	appendOne := func(id int64) {
		rec := buildRows(t, writer.ArrowSchema(), map[string]any{"id": id})
		defer rec.Release()
		if err := writer.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		appendOne(int64(i))
	}
	stale, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(4) // committed after stale was loaded
	res, err := stale.ExpireSnapshots(ctx, iceberg.ExpireOptions{RetainLast: 2, KeepFrom: iceberg.NoSnapshot})
	if err != nil {
		t.Fatalf("expire after a concurrent commit: %v", err)
	}
	if len(res.Expired) != 3 {
		t.Errorf("expired %d snapshots, want 3 (5 committed, the last 2 kept): %v", len(res.Expired), res.Expired)
	}
	re, err := openCatalog(t, wh).LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	if got := re.SnapshotCount(); got != 2 {
		t.Errorf("snapshots after expiry = %d, want 2", got)
	}
	if got := len(scanRows(t, ctx, re)); got != 5 {
		t.Errorf("rows = %d, want 5: the concurrent commit's row must survive", got)
	}
}
