// Package laketest is the conformance suite of the format-neutral lake
// contract (package lake): what bronze and silver rely on of a table
// format, checked through the interfaces only. Every format runs it:
//
//	func TestLakeContract(t *testing.T) {
//		laketest.Run(t, func(t *testing.T, dir string) lake.Catalog { … open a catalog over dir … })
//	}
//
// open is called with a fresh directory for each test, and again with the
// same directory where a test checks that a reopened catalog sees what the
// first one committed (a restart, or another process). The catalogs are
// closed by the suite.
package laketest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
)

// Opener opens a catalog over the state in dir (a directory the suite
// owns; empty on first use).
type Opener func(t *testing.T, dir string) lake.Catalog

// Run runs the suite, one subtest per guarantee.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"CatalogNamesAndErrors", testCatalog},
		{"AppendCommitsPropsWithTheRows", testAppendProps},
		{"AppendOnAStaleHandleLandsOnce", testStaleAppend},
		{"AppendedRanges", testAppendedRanges},
		{"ReopenSeesTheSameState", testReopen},
		{"EvolveAddsAndWidens", testEvolve},
		{"EvolveDeletesForGood", testEvolveDelete},
		{"MergeUpsertsAndDeletes", testMerge},
		{"LiveKeys", testLiveKeys},
		{"StaleMergeIsACommitConflict", testConflict},
		{"ScanAnEarlierSnapshot", testScanSnapshot},
		{"StagedMergeCommitsOnce", testStagedMerge},
		{"StaleStagedMergeIsACommitConflict", testStagedConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &env{t: t, open: open, dir: t.TempDir(), ctx: context.Background()}
			e.cat = e.reopen()
			tc.fn(t, e)
		})
	}
}

type env struct {
	t    *testing.T
	open Opener
	dir  string
	ctx  context.Context
	cat  lake.Catalog
}

// reopen opens another catalog over the same state, closed at the end.
func (e *env) reopen() lake.Catalog {
	c := e.open(e.t, e.dir)
	e.t.Cleanup(func() {
		if err := c.Close(); err != nil {
			e.t.Errorf("close catalog: %v", err)
		}
	})
	return c
}

const (
	posKey = "tidemark.position"
)

var logIdent = []string{"bronze", "src", "public", "log"}

// logSchema is a change log: id, value, position, commit time.
func logSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "lsn", Type: arrow.PrimitiveTypes.Int64, Nullable: false},
		{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
	}, nil)
}

// keyedSchema is a replica table keyed by id.
func keyedSchema() *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: false},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "lsn", Type: arrow.PrimitiveTypes.Int64, Nullable: false},
	}, nil)
}

// batch builds a record of sc's columns from rows of Go values (nil: null).
func batch(t *testing.T, sc *arrow.Schema, rows ...[]any) arrow.RecordBatch {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		for j, v := range r {
			fb := b.Field(j)
			if v == nil {
				fb.AppendNull()
				continue
			}
			switch x := fb.(type) {
			case *array.Int32Builder:
				x.Append(int32(v.(int)))
			case *array.Int64Builder:
				x.Append(int64(v.(int)))
			case *array.StringBuilder:
				x.Append(v.(string))
			case *array.TimestampBuilder:
				x.Append(arrow.Timestamp(v.(int)))
			default:
				t.Fatalf("batch: column %d: builder %T", j, fb)
			}
		}
	}
	return b.NewRecordBatch()
}

// rows renders rows as "col=value,…" lines, sorted, with the columns
// sorted by name so that the order of columns does not matter.
func rows(t *testing.T, scan func(fn func(arrow.RecordBatch) error) error) []string {
	t.Helper()
	var out []string
	err := scan(func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			out = append(out, line(rec, i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func line(rec arrow.RecordBatch, i int) string {
	var cols []string
	for j, f := range rec.Schema().Fields() {
		c := rec.Column(j)
		v := "null"
		if !c.IsNull(i) {
			v = c.ValueStr(i)
		}
		cols = append(cols, f.Name+"="+v)
	}
	slices.Sort(cols)
	s := ""
	for k, c := range cols {
		if k > 0 {
			s += ","
		}
		s += c
	}
	return s
}

func want(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

func (e *env) createLog() lake.Table {
	e.t.Helper()
	tbl, err := e.cat.Create(e.ctx, logIdent, lake.TableSpec{Schema: logSchema(), DayPartition: "ts"})
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

func (e *env) append(tbl lake.Table, pos int, rs ...[]any) lake.Snapshot {
	e.t.Helper()
	var recs []arrow.RecordBatch
	if len(rs) > 0 {
		rec := batch(e.t, tbl.ArrowSchema(), rs...)
		defer rec.Release()
		recs = append(recs, rec)
	}
	if err := tbl.Append(e.ctx, recs, map[string]string{posKey: strconv.Itoa(pos)}); err != nil {
		e.t.Fatal(err)
	}
	head, ok := tbl.CurrentSnapshot()
	if !ok {
		e.t.Fatal("no current snapshot after an append")
	}
	return head
}

// testCatalog: namespaces, listing, create/open/rename/drop and the
// sentinel errors callers test with errors.Is.
func testCatalog(t *testing.T, e *env) {
	ctx := e.ctx
	if _, err := e.cat.Open(ctx, logIdent); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("open a missing table: %v, want ErrNoSuchTable", err)
	}
	if _, err := e.cat.NamespaceProperties(ctx, []string{"nowhere"}); !errors.Is(err, lake.ErrNoSuchNamespace) {
		t.Fatalf("properties of a missing namespace: %v, want ErrNoSuchNamespace", err)
	}
	if _, err := e.cat.Open(ctx, []string{"a.b", "t"}); !errors.Is(err, lake.ErrInvalidIdentifier) {
		t.Fatalf("open a.b.t with a dotted level: %v, want ErrInvalidIdentifier", err)
	}
	tbl := e.createLog()
	if got := tbl.Ident(); !slices.Equal(got, logIdent) {
		t.Fatalf("Ident() = %q, want %q", got, logIdent)
	}
	if _, ok := tbl.CurrentSnapshot(); ok || tbl.Summary() != nil {
		t.Fatalf("a new table has a snapshot (summary %v)", tbl.Summary())
	}
	if _, err := e.cat.Create(ctx, logIdent, lake.TableSpec{Schema: logSchema()}); !errors.Is(err, lake.ErrTableExists) {
		t.Fatalf("create an existing table: %v, want ErrTableExists", err)
	}

	ns := []string{"bronze", "src"}
	if err := e.cat.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := e.cat.EnsureNamespace(ctx, ns); err != nil {
		t.Fatalf("EnsureNamespace is not idempotent: %v", err)
	}
	if err := e.cat.SetNamespaceProperties(ctx, ns, map[string]string{"tidemark.k": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.cat.SetNamespaceProperties(ctx, ns, map[string]string{"tidemark.j": "2"}); err != nil {
		t.Fatal(err)
	}
	props, err := e.cat.NamespaceProperties(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if props["tidemark.k"] != "1" || props["tidemark.j"] != "2" {
		t.Fatalf("namespace properties %v: want tidemark.k=1 and tidemark.j=2 (set merges)", props)
	}
	other := []string{"bronze", "src", "public", "other"}
	if _, err := e.cat.Create(ctx, other, lake.TableSpec{Schema: logSchema()}); err != nil {
		t.Fatal(err)
	}
	ids, err := e.cat.ListTables(ctx, []string{"bronze", "src", "public"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(ids, [][]string{logIdent, other}, slices.Equal) {
		t.Fatalf("ListTables = %q", ids)
	}
	under, err := e.cat.TablesUnder(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(under, [][]string{logIdent, other}, slices.Equal) {
		t.Fatalf("TablesUnder(bronze.src) = %q", under)
	}
	nss, err := e.cat.ListNamespaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(nss, func(n []string) bool { return slices.Equal(n, []string{"bronze", "src", "public"}) }) {
		t.Fatalf("ListNamespaces = %q lacks bronze.src.public", nss)
	}

	e.append(tbl, 1, []any{1, "a", 1, 0})
	moved := []string{"silver", "src", "public", "log"}
	if _, err := e.cat.Rename(ctx, logIdent, other); !errors.Is(err, lake.ErrTableExists) {
		t.Fatalf("rename onto an existing table: %v, want ErrTableExists", err)
	}
	rt, err := e.cat.Rename(ctx, logIdent, moved)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows of the renamed table", rows(t, func(fn func(arrow.RecordBatch) error) error { return rt.Scan(ctx, fn) }),
		"id=1,lsn=1,ts=1970-01-01T00:00:00Z,v=a")
	if _, err := e.cat.Open(ctx, logIdent); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("open the old name after a rename: %v, want ErrNoSuchTable", err)
	}
	if _, err := e.cat.Rename(ctx, logIdent, moved); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("rename a missing table: %v, want ErrNoSuchTable", err)
	}
	if err := e.cat.Drop(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cat.Open(ctx, moved); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("open a dropped table: %v, want ErrNoSuchTable", err)
	}
	if err := e.cat.Drop(ctx, moved); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("drop a missing table: %v, want ErrNoSuchTable", err)
	}
}

// testAppendProps: an append's props are its snapshot's, visible with its
// rows; an append of no rows still commits its props; another handle sees
// nothing until it refreshes, then both.
func testAppendProps(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	other, err := e.cat.Open(ctx, logIdent)
	if err != nil {
		t.Fatal(err)
	}
	s1 := e.append(tbl, 10, []any{1, "a", 5, 0}, []any{2, nil, 10, 86_400_000_000})
	if s1.Props[posKey] != "10" || tbl.Summary()[posKey] != "10" {
		t.Fatalf("snapshot props %v, summary %v: want %s=10", s1.Props, tbl.Summary(), posKey)
	}
	if s1.ParentID != lake.NoSnapshot || s1.AddedRecords != 2 || s1.Operation != "append" {
		t.Fatalf("first snapshot %+v: want parent NoSnapshot, 2 added records, operation append", s1)
	}
	if _, ok := other.CurrentSnapshot(); ok {
		t.Fatal("a handle opened before the append sees it without Refresh")
	}
	if err := other.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if other.Summary()[posKey] != "10" {
		t.Fatalf("after Refresh: summary %v", other.Summary())
	}
	want(t, "rows after the append", rows(t, func(fn func(arrow.RecordBatch) error) error { return other.Scan(ctx, fn) }),
		"id=1,lsn=5,ts=1970-01-01T00:00:00Z,v=a", "id=2,lsn=10,ts=1970-01-02T00:00:00Z,v=null")

	s2 := e.append(tbl, 11)
	if s2.ID == s1.ID || s2.ParentID != s1.ID || s2.Props[posKey] != "11" || s2.AddedRecords != 0 {
		t.Fatalf("an append of no rows: snapshot %+v, want a new snapshot after %d with %s=11", s2, s1.ID, posKey)
	}
	got, err := tbl.Snapshot(s1.ID)
	if err != nil || got.Props[posKey] != "10" {
		t.Fatalf("Snapshot(%d) = %+v, %v", s1.ID, got, err)
	}
	if s2.SequenceNumber <= s1.SequenceNumber {
		t.Fatalf("sequence numbers %d then %d: want growing", s1.SequenceNumber, s2.SequenceNumber)
	}
	if err := tbl.SetProperties(ctx, map[string]string{"tidemark.key": `["id"]`}); err != nil {
		t.Fatal(err)
	}
	if tbl.Properties()["tidemark.key"] != `["id"]` {
		t.Fatalf("table properties %v", tbl.Properties())
	}
	if sum := tbl.Summary(); sum[posKey] != "11" {
		t.Fatalf("setting table properties moved the cursor: summary %v", sum)
	}
}

// testStaleAppend: an append through a handle that has not seen another
// writer's commit lands on top of it, once, with its own props; neither
// commit is lost.
func testStaleAppend(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	stale, err := e.reopen().Open(ctx, logIdent)
	if err != nil {
		t.Fatal(err)
	}
	first := e.append(tbl, 1, []any{1, "a", 1, 0})
	rec := batch(t, stale.ArrowSchema(), []any{2, "b", 2, 0})
	defer rec.Release()
	if err := stale.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{posKey: "2"}); err != nil {
		t.Fatalf("append through a stale handle: %v", err)
	}
	head, _ := stale.CurrentSnapshot()
	if head.ParentID != first.ID || head.Props[posKey] != "2" {
		t.Fatalf("the stale handle's commit %+v: want a child of %d with %s=2", head, first.ID, posKey)
	}
	if err := tbl.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	want(t, "rows after both appends", rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) }),
		"id=1,lsn=1,ts=1970-01-01T00:00:00Z,v=a", "id=2,lsn=2,ts=1970-01-01T00:00:00Z,v=b")
	if h, err := tbl.History(lake.NoSnapshot, head.ID); err != nil || len(h) != 2 {
		t.Fatalf("history: %d snapshots, %v; want 2", len(h), err)
	}
}

// testAppendedRanges: History, ScanAppended, ScanAppendedWhere and
// AppendedBounds over (after, to].
func testAppendedRanges(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	s1 := e.append(tbl, 1, []any{1, "a", 100, 0})
	s2 := e.append(tbl, 2, []any{2, "b", 200, 0}, []any{3, "c", 300, 0})
	s3 := e.append(tbl, 3, []any{4, "d", 400, 0})
	hist, err := tbl.History(s1.ID, s3.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].ID != s2.ID || hist[1].ID != s3.ID || hist[0].Props[posKey] != "2" {
		t.Fatalf("History(s1, s3) = %+v: want s2, s3", hist)
	}
	if all, err := tbl.History(lake.NoSnapshot, s3.ID); err != nil || len(all) != 3 {
		t.Fatalf("History(NoSnapshot, s3) = %d snapshots, %v: want 3", len(all), err)
	}
	if h, err := tbl.History(s2.ID, s2.ID); err != nil || len(h) != 0 {
		t.Fatalf("History(s2, s2) = %v, %v: want empty", h, err)
	}
	if _, err := tbl.History(s3.ID, s1.ID); !errors.Is(err, lake.ErrSnapshotNotFound) {
		t.Fatalf("History from a descendant: %v, want ErrSnapshotNotFound", err)
	}
	if _, err := tbl.Snapshot(s3.ID + 12345); !errors.Is(err, lake.ErrSnapshotNotFound) {
		t.Fatalf("Snapshot(unknown): %v, want ErrSnapshotNotFound", err)
	}
	ids := func(after, to int64, f *lake.Filter) []string {
		var out []string
		err := tbl.ScanAppendedWhere(ctx, after, to, f, func(rec arrow.RecordBatch) error {
			for i := 0; i < int(rec.NumRows()); i++ {
				out = append(out, line(rec, i))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	row := func(id, lsn int, v string) string {
		return fmt.Sprintf("id=%d,lsn=%d,ts=1970-01-01T00:00:00Z,v=%s", id, lsn, v)
	}
	want(t, "appended (s1, s2]", ids(s1.ID, s2.ID, nil), row(2, 200, "b"), row(3, 300, "c"))
	want(t, "appended (NoSnapshot, s3]", ids(lake.NoSnapshot, s3.ID, nil),
		row(1, 100, "a"), row(2, 200, "b"), row(3, 300, "c"), row(4, 400, "d"))
	want(t, "appended (s1, s3] where lsn < 300", ids(s1.ID, s3.ID, lake.Less("lsn", int64(300))), row(2, 200, "b"))
	want(t, "appended (s1, s3] where v in (c, d)", ids(s1.ID, s3.ID, lake.In("v", []any{"c", "d"})), row(3, 300, "c"), row(4, 400, "d"))
	got := rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.ScanAppended(ctx, s2.ID, s3.ID, fn) })
	want(t, "ScanAppended (s2, s3]", got, row(4, 400, "d"))
	got = rows(t, func(fn func(arrow.RecordBatch) error) error {
		return tbl.ScanWhere(ctx, lake.Or(lake.Equal("id", int32(1)), lake.And(lake.Equal("v", "c"), lake.Less("lsn", int64(1000)))), fn)
	})
	want(t, "ScanWhere id = 1 or (v = c and lsn < 1000)", got, row(1, 100, "a"), row(3, 300, "c"))

	n, maxLSN, ok, err := tbl.AppendedBounds(ctx, s1.ID, s3.ID, "lsn")
	if err != nil {
		t.Fatal(err)
	}
	if ok && (n != 3 || maxLSN != 400) {
		t.Fatalf("AppendedBounds(s1, s3, lsn) = %d rows, max %d: want 3 rows, max 400", n, maxLSN)
	}
	if b, err := tbl.AppendedRowBytes(ctx, s1.ID, s3.ID); err != nil || b < 0 {
		t.Fatalf("AppendedRowBytes = %v, %v", b, err)
	}
}

// testReopen: a second catalog over the same state sees the same tables,
// snapshots, props, schema and rows.
func testReopen(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	e.append(tbl, 7, []any{1, "a", 1, 0})
	if err := tbl.Evolve(ctx, lake.Evolution{Add: []arrow.Field{{Name: "extra", Type: arrow.BinaryTypes.String, Nullable: true}}}); err != nil {
		t.Fatal(err)
	}
	rec := batch(t, tbl.ArrowSchema(), []any{2, "b", 2, 0, "x"})
	defer rec.Release()
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{posKey: "8"}); err != nil {
		t.Fatal(err)
	}
	head, _ := tbl.CurrentSnapshot()

	again, err := e.reopen().Open(ctx, logIdent)
	if err != nil {
		t.Fatal(err)
	}
	h2, ok := again.CurrentSnapshot()
	if !ok || h2.ID != head.ID || !maps.Equal(h2.Props, head.Props) {
		t.Fatalf("reopened head %+v, want %+v", h2, head)
	}
	if !again.ArrowSchema().Equal(tbl.ArrowSchema()) {
		t.Fatalf("reopened schema\n%s\nwant\n%s", again.ArrowSchema(), tbl.ArrowSchema())
	}
	want(t, "rows after a reopen", rows(t, func(fn func(arrow.RecordBatch) error) error { return again.Scan(ctx, fn) }),
		"extra=null,id=1,lsn=1,ts=1970-01-01T00:00:00Z,v=a", "extra=x,id=2,lsn=2,ts=1970-01-01T00:00:00Z,v=b")
}

// testEvolve: columns added (with their comment, null in older rows, with
// props noted in the same commit) and widened; a narrowing is
// ErrIncompatibleType.
func testEvolve(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	s1 := e.append(tbl, 1, []any{1, "a", 1, 0})
	var noted int64 = -2
	doc := arrow.NewMetadata([]string{"doc"}, []string{"a new column"})
	err := tbl.Evolve(ctx, lake.Evolution{
		Widen: []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true}},
		Add:   []arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: doc}},
		Note: func(snap int64) map[string]string {
			noted = snap
			return map[string]string{"tidemark.noted": strconv.FormatInt(snap, 10)}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if noted != s1.ID || tbl.Properties()["tidemark.noted"] != strconv.FormatInt(s1.ID, 10) {
		t.Fatalf("Note called with %d (want the head %d); properties %v", noted, s1.ID, tbl.Properties())
	}
	sc := tbl.ArrowSchema()
	id, _ := sc.FieldsByName("id")
	n, ok := sc.FieldsByName("n")
	if len(id) != 1 || !lake.SameType(id[0].Type, arrow.PrimitiveTypes.Int64) || !ok || !n[0].Nullable {
		t.Fatalf("schema after evolve:\n%s\nwant id int64 and an optional n", sc)
	}
	if d, _ := n[0].Metadata.GetValue("doc"); d != "a new column" {
		t.Fatalf("the added column's doc is %q", d)
	}
	if names := fieldNames(sc); !slices.Equal(names, []string{"id", "v", "lsn", "ts", "n"}) {
		t.Fatalf("columns %q: an added column goes last", names)
	}
	if cur, _ := tbl.CurrentSnapshot(); cur.ID != s1.ID || tbl.Summary()[posKey] != "1" {
		t.Fatalf("evolving moved the cursor: head %+v", cur)
	}
	e.append(tbl, 2, []any{1 << 40, "b", 2, 0, 7})
	want(t, "rows after evolve", rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) }),
		"id=1,lsn=1,n=null,ts=1970-01-01T00:00:00Z,v=a", "id=1099511627776,lsn=2,n=7,ts=1970-01-01T00:00:00Z,v=b")

	err = tbl.Evolve(ctx, lake.Evolution{Widen: []arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}})
	if !errors.Is(err, lake.ErrIncompatibleType) {
		t.Fatalf("widen a string to long: %v, want ErrIncompatibleType", err)
	}
	err = tbl.Evolve(ctx, lake.Evolution{Add: []arrow.Field{{Name: "n", Type: arrow.BinaryTypes.String, Nullable: true}}})
	if !errors.Is(err, lake.ErrIncompatibleType) {
		t.Fatalf("add an existing column with another type: %v, want ErrIncompatibleType", err)
	}
	before := tbl.ArrowSchema()
	if err := tbl.Evolve(ctx, lake.Evolution{Add: []arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}}); err != nil {
		t.Fatalf("re-adding a column as it is (a retried evolution): %v", err)
	}
	if !tbl.ArrowSchema().Equal(before) {
		t.Fatal("re-adding a column as it is changed the schema")
	}
}

// testEvolveDelete: a deleted column is gone from the schema and the rows
// (props committed with it); deleting it again is a no-op; a column added
// later under its name is a new column, null in every older row. A format
// that cannot delete or rename columns refuses both with ErrUnsupported and
// changes nothing.
func testEvolveDelete(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createLog()
	if err := tbl.Evolve(ctx, lake.Evolution{Add: []arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}}); err != nil {
		t.Fatal(err)
	}
	e.append(tbl, 1, []any{1, "a", 1, 0, 7})
	del := lake.Evolution{Delete: []string{"n"}, DeleteProps: map[string]string{"tidemark.deleted": "n"}}
	if err := tbl.Evolve(ctx, del); errors.Is(err, lake.ErrUnsupported) {
		ren := lake.Evolution{Rename: []lake.Rename{{From: "n", To: "m"}}, RenameProps: map[string]string{"tidemark.renamed": "n"}}
		if err := tbl.Evolve(ctx, ren); !errors.Is(err, lake.ErrUnsupported) {
			t.Fatalf("the format cannot delete columns (%v) but renames one: %v", err, err)
		}
		again, err := e.reopen().Open(ctx, logIdent)
		if err != nil {
			t.Fatal(err)
		}
		if names := fieldNames(again.ArrowSchema()); !slices.Equal(names, []string{"id", "v", "lsn", "ts", "n"}) {
			t.Fatalf("columns %q after a refused delete and rename", names)
		}
		if p := again.Properties(); p["tidemark.deleted"] != "" || p["tidemark.renamed"] != "" {
			t.Fatalf("properties %v after a refused delete and rename: want neither's props", p)
		}
		want(t, "rows after a refused delete", rows(t, func(fn func(arrow.RecordBatch) error) error { return again.Scan(ctx, fn) }),
			"id=1,lsn=1,n=7,ts=1970-01-01T00:00:00Z,v=a")
		t.Skipf("the format does not delete or rename columns: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if names := fieldNames(tbl.ArrowSchema()); !slices.Equal(names, []string{"id", "v", "lsn", "ts"}) {
		t.Fatalf("columns %q after deleting n", names)
	}
	if tbl.Properties()["tidemark.deleted"] != "n" {
		t.Fatalf("properties %v: want the delete's props", tbl.Properties())
	}
	if err := tbl.Evolve(ctx, del); err != nil {
		t.Fatalf("deleting a deleted column again (a retried evolution): %v", err)
	}
	want(t, "rows after delete", rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) }),
		"id=1,lsn=1,ts=1970-01-01T00:00:00Z,v=a")
	if err := tbl.Evolve(ctx, lake.Evolution{Add: []arrow.Field{{Name: "n", Type: arrow.BinaryTypes.String, Nullable: true}}}); err != nil {
		t.Fatalf("add a column under a deleted one's name, with another type: %v", err)
	}
	e.append(tbl, 2, []any{2, "b", 2, 0, "x"})
	again, err := e.reopen().Open(ctx, logIdent)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows after a new column under the deleted name", rows(t, func(fn func(arrow.RecordBatch) error) error { return again.Scan(ctx, fn) }),
		"id=1,lsn=1,n=null,ts=1970-01-01T00:00:00Z,v=a", "id=2,lsn=2,n=x,ts=1970-01-01T00:00:00Z,v=b")
}

func fieldNames(sc *arrow.Schema) []string {
	var out []string
	for _, f := range sc.Fields() {
		out = append(out, f.Name)
	}
	return out
}

var keyedIdent = []string{"silver", "src", "public", "t"}

func (e *env) createKeyed(mode string) lake.KeyedTable {
	e.t.Helper()
	tbl, err := e.cat.Create(e.ctx, keyedIdent, lake.TableSpec{Schema: keyedSchema(), Key: []string{"id"}, Buckets: 4,
		DeleteMode: mode, Properties: map[string]string{"tidemark.key": `["id"]`}})
	if err != nil {
		e.t.Fatal(err)
	}
	if tbl.Properties()["tidemark.key"] != `["id"]` {
		e.t.Fatalf("created table's properties %v lack the spec's", tbl.Properties())
	}
	return tbl
}

// live scans tbl's live rows of keys (nil: all) and returns their ids by
// key.
func live(t *testing.T, ctx context.Context, tbl lake.KeyedTable, keys []int64) (lake.LiveRows, map[int64]lake.RowID) {
	t.Helper()
	found := map[int64]lake.RowID{}
	l, err := tbl.ScanLiveKeys(ctx, nil, []string{"id", "lsn"}, keys, func(rec arrow.RecordBatch, file int, pos lake.Positions) error {
		ids := rec.Column(0).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			if _, dup := found[ids.Value(i)]; dup {
				return fmt.Errorf("key %d reported twice", ids.Value(i))
			}
			found[ids.Value(i)] = lake.RowID{File: file, Pos: pos.At(i)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l, found
}

// testMerge: MergeRows deletes rows by position and appends their new
// versions in one commit with its props; Merge deletes by filter; both in
// merge-on-read, Merge in copy-on-write too.
func testMerge(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createKeyed(lake.MergeOnRead)
	if !tbl.MergeOnRead() {
		t.Fatal("a merge-on-read table says it is not")
	}
	e.append(tbl, 1, []any{1, "a", 1}, []any{2, "b", 1}, []any{3, "c", 1}, []any{4, "d", 1})
	l, ids := live(t, ctx, tbl, []int64{2, 3})
	if len(ids) != 2 {
		t.Fatalf("live keys 2, 3: found %v", ids)
	}
	up := batch(t, tbl.ArrowSchema(), []any{2, "B", 2}, []any{5, "e", 2})
	defer up.Release()
	// Upsert 2, insert 5, delete 3 (by position) and 4 (by filter).
	err := tbl.MergeRows(ctx, l, []lake.RowID{ids[2], ids[3]}, lake.Equal("id", int64(4)), []arrow.RecordBatch{up},
		map[string]string{posKey: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Summary()[posKey] != "2" {
		t.Fatalf("merge summary %v", tbl.Summary())
	}
	scan := func(tbl lake.Table) []string {
		return rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) })
	}
	want(t, "rows after MergeRows", scan(tbl), "id=1,lsn=1,v=a", "id=2,lsn=2,v=B", "id=5,lsn=2,v=e")

	// A reader that opens the table now sees the merge whole.
	again, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows after MergeRows, reopened", scan(again), "id=1,lsn=1,v=a", "id=2,lsn=2,v=B", "id=5,lsn=2,v=e")

	up2 := batch(t, tbl.ArrowSchema(), []any{1, "A", 3})
	defer up2.Release()
	if err := tbl.Merge(ctx, lake.In("id", []any{int64(1), int64(5)}), []arrow.RecordBatch{up2}, map[string]string{posKey: "3"}); err != nil {
		t.Fatal(err)
	}
	want(t, "rows after Merge", scan(tbl), "id=1,lsn=3,v=A", "id=2,lsn=2,v=B")
	if tbl.Summary()[posKey] != "3" {
		t.Fatalf("merge summary %v", tbl.Summary())
	}

	if err := e.cat.Drop(ctx, keyedIdent); err != nil {
		t.Fatal(err)
	}
	cow := e.createKeyed(lake.CopyOnWrite)
	if cow.MergeOnRead() {
		t.Fatal("a copy-on-write table says it is merge-on-read")
	}
	e.append(cow, 1, []any{1, "a", 1}, []any{2, "b", 1})
	up3 := batch(t, cow.ArrowSchema(), []any{2, "B", 2})
	defer up3.Release()
	if err := cow.Merge(ctx, lake.In("id", []any{int64(2)}), []arrow.RecordBatch{up3}, map[string]string{posKey: "2"}); err != nil {
		t.Fatal(err)
	}
	want(t, "copy-on-write rows after Merge", scan(cow), "id=1,lsn=1,v=a", "id=2,lsn=2,v=B")
}

// testLiveKeys: ScanLiveKeys reports exactly the live rows of the keys
// asked for, ReadLiveRows reads them whole by RowID, and Bucketer buckets
// keys as the table's files hold them.
func testLiveKeys(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createKeyed(lake.MergeOnRead)
	var rs [][]any
	for i := 1; i <= 100; i++ {
		rs = append(rs, []any{i, fmt.Sprint("v", i), 1})
	}
	e.append(tbl, 1, rs...)
	_, all := live(t, ctx, tbl, nil)
	if len(all) != 100 {
		t.Fatalf("live rows: %d, want 100", len(all))
	}
	l, ids := live(t, ctx, tbl, []int64{7, 42, 1000})
	if len(ids) != 2 {
		t.Fatalf("live keys 7, 42, 1000: found %v", ids)
	}
	var got []string
	err := tbl.ReadLiveRows(ctx, l, []lake.RowID{ids[42], ids[7]}, []string{"v", "id"}, func(rec arrow.RecordBatch, rids []lake.RowID) error {
		for i, rid := range rids {
			got = append(got, fmt.Sprintf("%s@%v", line(rec, i), rid == ids[42] || rid == ids[7]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want(t, "ReadLiveRows", got, "id=42,v=v42@true", "id=7,v=v7@true")
	if ub, ok := l.UpperBound(ids[7].File, "lsn"); ok && ub != 1 {
		t.Fatalf("UpperBound(lsn) = %d, want 1", ub)
	}

	// Delete 7, then the keys' scan no longer reports it.
	if err := tbl.MergeRows(ctx, l, []lake.RowID{ids[7]}, nil, nil, map[string]string{posKey: "2"}); err != nil {
		t.Fatal(err)
	}
	if _, after := live(t, ctx, tbl, []int64{7, 42}); len(after) != 1 {
		t.Fatalf("live keys 7, 42 after deleting 7: %v, want 42 alone", after)
	} else if _, ok := after[42]; !ok {
		t.Fatalf("live keys 7, 42 after deleting 7: %v, want 42 alone", after)
	}

	b, ok := tbl.Bucketer()
	if !ok {
		return // the format does not bucket
	}
	if b.Column() != "id" || b.Buckets() != 4 {
		t.Fatalf("Bucketer: column %s, %d buckets; want id, 4", b.Column(), b.Buckets())
	}
	fileBucket := map[int]int{}
	_, err = tbl.ScanLiveKeys(ctx, nil, []string{"id"}, nil, func(rec arrow.RecordBatch, file int, _ lake.Positions) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			bk, ok := b.Of(rec.Column(0), i)
			if !ok {
				return fmt.Errorf("no bucket for row %d", i)
			}
			if have, seen := fileBucket[file]; seen && have != bk {
				return fmt.Errorf("file %d holds buckets %d and %d", file, have, bk)
			}
			fileBucket[file] = bk
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testConflict: a merge computed on a stale read of the table (another
// writer committed meanwhile) fails with ErrCommitConflict and applies
// nothing.
func testConflict(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createKeyed(lake.MergeOnRead)
	e.append(tbl, 1, []any{1, "a", 1}, []any{2, "b", 1})
	l, ids := live(t, ctx, tbl, []int64{1})

	other, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	up := batch(t, other.ArrowSchema(), []any{3, "c", 2})
	defer up.Release()
	if err := other.Merge(ctx, nil, []arrow.RecordBatch{up}, map[string]string{posKey: "2"}); err != nil {
		t.Fatal(err)
	}

	stale := batch(t, tbl.ArrowSchema(), []any{1, "A", 3})
	defer stale.Release()
	err = tbl.MergeRows(ctx, l, []lake.RowID{ids[1]}, nil, []arrow.RecordBatch{stale}, map[string]string{posKey: "3"})
	if !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("a merge on a stale read: %v, want ErrCommitConflict", err)
	}
	check, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows after the conflict", rows(t, func(fn func(arrow.RecordBatch) error) error { return check.Scan(ctx, fn) }),
		"id=1,lsn=1,v=a", "id=2,lsn=1,v=b", "id=3,lsn=2,v=c")
	if check.Summary()[posKey] != "2" {
		t.Fatalf("summary after the conflict %v: want the other writer's", check.Summary())
	}

	// Reloaded and recomputed, the merge goes through.
	if err := tbl.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	l, ids = live(t, ctx, tbl, []int64{1})
	if err := tbl.MergeRows(ctx, l, []lake.RowID{ids[1]}, nil, []arrow.RecordBatch{stale}, map[string]string{posKey: "3"}); err != nil {
		t.Fatalf("the merge recomputed after a refresh: %v", err)
	}
	want(t, "rows after the retried merge", rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) }),
		"id=1,lsn=3,v=A", "id=2,lsn=1,v=b", "id=3,lsn=2,v=c")
}

// testScanSnapshot: ScanSnapshotWhere reads the rows live in an earlier
// snapshot (deleted rows back, later rows absent), filtered like
// ScanWhere, in both delete modes; an unknown snapshot is
// ErrSnapshotNotFound.
func testScanSnapshot(t *testing.T, e *env) {
	ctx := e.ctx
	for _, mode := range []string{lake.MergeOnRead, lake.CopyOnWrite} {
		tbl := e.createKeyed(mode)
		ss, ok := tbl.(lake.SnapshotScanner)
		if !ok {
			t.Fatalf("a %s table does not read earlier snapshots (lake.SnapshotScanner)", mode)
		}
		e.append(tbl, 1, []any{1, "a", 1}, []any{2, "b", 1}, []any{3, "c", 1})
		first, _ := tbl.CurrentSnapshot()
		up := batch(t, tbl.ArrowSchema(), []any{2, "B", 2}, []any{4, "d", 2})
		if err := tbl.Merge(ctx, lake.In("id", []any{int64(2), int64(3)}), []arrow.RecordBatch{up}, map[string]string{posKey: "2"}); err != nil {
			t.Fatal(err)
		}
		up.Release()
		at := func(id int64, f *lake.Filter) []string {
			return rows(t, func(fn func(arrow.RecordBatch) error) error { return ss.ScanSnapshotWhere(ctx, id, f, fn) })
		}
		want(t, mode+": rows as of the first snapshot", at(first.ID, nil), "id=1,lsn=1,v=a", "id=2,lsn=1,v=b", "id=3,lsn=1,v=c")
		want(t, mode+": rows of keys 2, 4 as of the first snapshot", at(first.ID, lake.In("id", []any{int64(2), int64(4)})), "id=2,lsn=1,v=b")
		now, _ := tbl.CurrentSnapshot()
		want(t, mode+": rows of keys 2, 4 as of the current snapshot", at(now.ID, lake.In("id", []any{int64(2), int64(4)})), "id=2,lsn=2,v=B", "id=4,lsn=2,v=d")
		err := ss.ScanSnapshotWhere(ctx, now.ID+1000, nil, func(arrow.RecordBatch) error { return nil })
		if !errors.Is(err, lake.ErrSnapshotNotFound) {
			t.Fatalf("%s: a scan as of an unknown snapshot: %v, want ErrSnapshotNotFound", mode, err)
		}
		if err := e.cat.Drop(ctx, keyedIdent); err != nil {
			t.Fatal(err)
		}
	}
}

// testStagedMerge: a merge written in parts (StageMerge) shows nothing of
// its parts until its commit, then all of them in one commit with its
// props, with the rows its filter matches deleted; an aborted stage leaves
// the table as it was.
func testStagedMerge(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createKeyed(lake.MergeOnRead)
	var rs [][]any
	for i := 1; i <= 20; i++ {
		rs = append(rs, []any{i, fmt.Sprint("v", i), 1})
	}
	e.append(tbl, 1, rs...)
	scan := func(tbl lake.Table) []string {
		return rows(t, func(fn func(arrow.RecordBatch) error) error { return tbl.Scan(ctx, fn) })
	}
	before := scan(tbl)

	// An aborted stage commits nothing.
	st, err := tbl.StageMerge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, ids := live(t, ctx, tbl, []int64{1})
	junk := batch(t, tbl.ArrowSchema(), []any{1, "junk", 9})
	defer junk.Release()
	if err := st.Add(ctx, l, []lake.RowID{ids[1]}, []arrow.RecordBatch{junk}); err != nil {
		t.Fatal(err)
	}
	st.Abort()
	want(t, "rows after an aborted stage", scan(tbl), before...)

	// Part 1: keys 1..10 (odd updated, even deleted); part 2: keys 11..20
	// (odd updated) and a new key 21; the filter deletes key 20.
	st, err = tbl.StageMerge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	var wantRows []string
	for part := 0; part < 2; part++ {
		var keys []int64
		for k := part*10 + 1; k <= part*10+10; k++ {
			keys = append(keys, int64(k))
		}
		l, ids := live(t, ctx, tbl, keys)
		var del []lake.RowID
		var up [][]any
		for _, k := range keys {
			switch {
			case k == 20:
				continue
			case k%2 == 1:
				up = append(up, []any{int(k), fmt.Sprint("V", k), 2})
				wantRows = append(wantRows, fmt.Sprintf("id=%d,lsn=2,v=V%d", k, k))
			case part == 0:
			default:
				wantRows = append(wantRows, fmt.Sprintf("id=%d,lsn=1,v=v%d", k, k))
				continue
			}
			del = append(del, ids[k])
		}
		if part == 1 {
			up = append(up, []any{21, "new", 2})
			wantRows = append(wantRows, "id=21,lsn=2,v=new")
		}
		rec := batch(t, tbl.ArrowSchema(), up...)
		err := st.Add(ctx, l, del, []arrow.RecordBatch{rec})
		rec.Release()
		if err != nil {
			t.Fatalf("part %d: %v", part+1, err)
		}
		// Nothing is visible before the commit, to this handle or another.
		want(t, fmt.Sprintf("rows after part %d, before the commit", part+1), scan(tbl), before...)
		again, err := e.reopen().Open(ctx, keyedIdent)
		if err != nil {
			t.Fatal(err)
		}
		want(t, fmt.Sprintf("rows after part %d, before the commit, reopened", part+1), scan(again), before...)
	}
	if err := st.Commit(ctx, lake.Equal("id", int64(20)), map[string]string{posKey: "2"}); err != nil {
		t.Fatal(err)
	}
	if tbl.Summary()[posKey] != "2" {
		t.Fatalf("staged merge summary %v", tbl.Summary())
	}
	slices.Sort(wantRows)
	want(t, "rows after the staged merge", scan(tbl), wantRows...)
	again, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows after the staged merge, reopened", scan(again), wantRows...)
	if err := st.Commit(ctx, nil, map[string]string{posKey: "3"}); err == nil {
		t.Fatal("a second commit of a stage succeeded")
	}

	// A copy-on-write table refuses a staged merge.
	if err := e.cat.Drop(ctx, keyedIdent); err != nil {
		t.Fatal(err)
	}
	cow := e.createKeyed(lake.CopyOnWrite)
	if _, err := cow.StageMerge(ctx); !errors.Is(err, lake.ErrUnsupported) {
		t.Fatalf("StageMerge on a copy-on-write table: %v, want ErrUnsupported", err)
	}
}

// testStagedConflict: a staged merge whose table another writer committed
// to meanwhile fails with ErrCommitConflict and applies nothing.
func testStagedConflict(t *testing.T, e *env) {
	ctx := e.ctx
	tbl := e.createKeyed(lake.MergeOnRead)
	e.append(tbl, 1, []any{1, "a", 1}, []any{2, "b", 1})
	st, err := tbl.StageMerge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Abort()
	l, ids := live(t, ctx, tbl, []int64{1})
	up := batch(t, tbl.ArrowSchema(), []any{1, "A", 3})
	defer up.Release()
	if err := st.Add(ctx, l, []lake.RowID{ids[1]}, []arrow.RecordBatch{up}); err != nil {
		t.Fatal(err)
	}
	other, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	ins := batch(t, other.ArrowSchema(), []any{3, "c", 2})
	defer ins.Release()
	if err := other.Merge(ctx, nil, []arrow.RecordBatch{ins}, map[string]string{posKey: "2"}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, nil, map[string]string{posKey: "3"}); !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("a staged merge on a stale read: %v, want ErrCommitConflict", err)
	}
	check, err := e.reopen().Open(ctx, keyedIdent)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "rows after the conflict", rows(t, func(fn func(arrow.RecordBatch) error) error { return check.Scan(ctx, fn) }),
		"id=1,lsn=1,v=a", "id=2,lsn=1,v=b", "id=3,lsn=2,v=c")
}
