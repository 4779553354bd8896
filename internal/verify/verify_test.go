package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/coltype"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/pgverify"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// fixture is a source database and a lake whose silver tables the test
// builds itself, from the source's rows decoded by typemap, following the
// silver contract (docs/verify.md).
type fixture struct {
	t      *testing.T
	ctx    context.Context
	pg     *testenv.PG
	url    string
	cat    *lake.Catalog
	d      *postgres.Dialer
	source string
}

func newFixture(t *testing.T, setup string) *fixture {
	t.Helper()
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "verify")
	if setup != "" {
		pg.Exec(t, url, setup)
	}
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	d, err := postgres.NewDialer(url, func(string) string { return "redacted" })
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: ctx, pg: pg, url: url, cat: cat, d: d, source: "src"}
}

// srcRow is a source row in lake form, by column name.
type srcRow map[string]any

// srcTable is a source table read for building silver.
type srcTable struct {
	cols []string
	maps []typemap.Mapping
	rows []srcRow
}

// read reads a source table's rows, decoded as the capture decodes them.
func (f *fixture) read(table string) *srcTable {
	f.t.Helper()
	conn, err := f.d.Connect(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close(f.ctx)
	types := postgres.NewTypeCache(f.d)
	defer types.Close()
	st := &srcTable{}
	rows, err := conn.Query(f.ctx, `SELECT attname::text, atttypid, atttypmod FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
	if err != nil {
		f.t.Fatal(err)
	}
	for rows.Next() {
		var c typemap.Column
		if err := rows.Scan(&c.Name, &c.TypeOID, &c.TypeMod); err != nil {
			f.t.Fatal(err)
		}
		m, err := typemap.Map(c, types.Lookup)
		if err != nil {
			f.t.Fatal(err)
		}
		st.cols, st.maps = append(st.cols, c.Name), append(st.maps, m)
	}
	rows.Close()
	q := make([]string, len(st.cols))
	for i, c := range st.cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	rows, err = conn.Query(f.ctx, "SELECT "+strings.Join(q, ", ")+" FROM "+table, pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		r := srcRow{}
		for i, raw := range rows.RawValues() {
			v, err := st.maps[i].Decode(raw)
			if err != nil {
				f.t.Fatal(err)
			}
			r[st.cols[i]] = v
		}
		st.rows = append(st.rows, r)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return st
}

// silverOpts shape a hand-built silver table.
type silverOpts struct {
	soft     bool               // add cdc_deleted
	position uint64             // tidemark.position; 0: beyond any source position
	lsn      func(srcRow) int64 // cdc_source_lsn of a row; nil: 1
	deleted  func(srcRow) bool
}

// silverSchema is the contract's schema: the source columns, then
// cdc_source_lsn, cdc_seq, cdc_ts (and cdc_deleted).
func silverSchema(st *srcTable, soft bool) *iceberg.Schema {
	next := 1
	id := func() int { next++; return next - 1 }
	var retype func(t iceberg.Type) iceberg.Type
	retype = func(t iceberg.Type) iceberg.Type {
		if l, ok := t.(*iceberg.ListType); ok {
			return &iceberg.ListType{ElementID: id(), Element: retype(l.Element)}
		}
		return t
	}
	var fields []iceberg.NestedField
	for i, c := range st.cols {
		fid := id()
		fields = append(fields, iceberg.NestedField{ID: fid, Name: c, Type: retype(st.maps[i].IcebergType())})
	}
	fields = append(fields,
		iceberg.NestedField{ID: id(), Name: "cdc_source_lsn", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: id(), Name: "cdc_seq", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: id(), Name: "cdc_ts", Type: iceberg.PrimitiveTypes.TimestampTz})
	if soft {
		fields = append(fields, iceberg.NestedField{ID: id(), Name: "cdc_deleted", Type: iceberg.PrimitiveTypes.Bool})
	}
	return iceberg.NewSchema(0, fields...)
}

// buildSilver creates silver.<source>.public.<table> holding rows.
func (f *fixture) buildSilver(table string, key []string, st *srcTable, rows []srcRow, o silverOpts) *lake.Table {
	f.t.Helper()
	keyJSON, _ := json.Marshal(key)
	tbl, err := f.cat.CreateTable(f.ctx, []string{"silver", f.source, "public", table}, lake.TableSpec{
		Schema: silverSchema(st, o.soft), Properties: map[string]string{"tidemark.key": string(keyJSON)}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.appendSilver(tbl, st, rows, o)
	return tbl
}

func (f *fixture) appendSilver(tbl *lake.Table, st *srcTable, rows []srcRow, o silverOpts) {
	f.t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
	defer b.Release()
	n := len(st.cols)
	for i, r := range rows {
		for j, c := range st.cols {
			if err := coltype.AppendValue(b.Field(j), r[c]); err != nil {
				f.t.Fatal(err)
			}
		}
		lsn := int64(1)
		if o.lsn != nil {
			lsn = o.lsn(r)
		}
		b.Field(n).(*array.Int64Builder).Append(lsn)
		b.Field(n + 1).(*array.Int64Builder).Append(int64(i))
		b.Field(n + 2).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Now().UnixMicro()))
		if o.soft {
			del := o.deleted != nil && o.deleted(r)
			b.Field(n + 3).(*array.BooleanBuilder).Append(del)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	pos := o.position
	if pos == 0 {
		pos = math.MaxInt64
	}
	err := tbl.Append(f.ctx, []arrow.RecordBatch{rec}, map[string]string{
		"tidemark.position": strconv.FormatUint(pos, 10), "tidemark.bronze-snapshot": "1"})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) verify(o verify.Options) *verify.Report {
	f.t.Helper()
	o.Source = f.source
	if o.Wait == 0 {
		o.Wait = 10 * time.Second
	}
	if o.Poll == 0 {
		o.Poll = 20 * time.Millisecond
	}
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	rep, err := verify.Run(f.ctx, f.cat, pgverify.New(f.d), o, log)
	if err != nil {
		f.t.Fatal(err)
	}
	var b strings.Builder
	_ = rep.Write(&b, "table")
	f.t.Logf("verify report:\n%s", b.String())
	return rep
}

func tableReport(t *testing.T, rep *verify.Report, table string) verify.TableReport {
	t.Helper()
	for _, tr := range rep.Tables {
		if tr.Source == table {
			return tr
		}
	}
	t.Fatalf("no report for table %s", table)
	return verify.TableReport{}
}

// copyRows copies rows (values are not mutated by tests, only replaced).
func copyRows(rows []srcRow) []srcRow {
	out := make([]srcRow, len(rows))
	for i, r := range rows {
		c := srcRow{}
		for k, v := range r {
			c[k] = v
		}
		out[i] = c
	}
	return out
}

func rowWith(rows []srcRow, col string, v any) int {
	for i, r := range rows {
		if r[col] == v {
			return i
		}
	}
	return -1
}

const ordersDDL = `
CREATE TABLE orders (
	id int PRIMARY KEY,
	amount numeric(12,2),
	placed_at timestamptz,
	note text,
	payload bytea,
	doc jsonb,
	ratio numeric,
	tags text[],
	score double precision
);
INSERT INTO orders
SELECT i, (i * 1.25)::numeric(12,2), timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute 1.5 second',
	CASE WHEN i % 7 = 0 THEN NULL WHEN i % 5 = 0 THEN 'emoji 🌊🎉 ü ' || i ELSE 'note ' || i END,
	CASE WHEN i % 11 = 0 THEN NULL ELSE decode(lpad(to_hex(i), 8, '0'), 'hex') END,
	CASE WHEN i % 3 = 0 THEN NULL ELSE jsonb_build_object('i', i, 'big', 9007199254740993, 's', 'ü') END,
	CASE WHEN i % 13 = 0 THEN 'NaN'::numeric ELSE i / 7.0 END,
	CASE WHEN i % 4 = 0 THEN NULL ELSE ARRAY['a' || i, NULL, 'c,d'] END,
	CASE WHEN i % 17 = 0 THEN '-0'::float8 ELSE i * 0.1 END
FROM generate_series(1, 2000) i;
`

func TestEqualTablesPass(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	f.buildSilver("orders", []string{"id"}, st, st.rows, silverOpts{})
	for _, pushdown := range []bool{true, false} {
		t.Run(fmt.Sprintf("pushdown=%v", pushdown), func(t *testing.T) {
			rep := f.verify(verify.Options{NoPushdown: !pushdown})
			tr := tableReport(t, rep, "public.orders")
			if tr.Status != verify.StatusEqual || rep.ExitCode() != 0 {
				t.Fatalf("status %s (%s), exit %d; want equal, 0", tr.Status, tr.Reason, rep.ExitCode())
			}
			if tr.SourceRows != 2000 || tr.SilverRows != 2000 || tr.ChunksDiffering != 0 || tr.Pushdown != pushdown {
				t.Fatalf("report %+v", tr)
			}
		})
	}
}

func TestChangedValueIsReported(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	rows := copyRows(st.rows)
	i := rowWith(rows, "id", int32(42))
	orig := rows[i]["amount"]
	rows[i]["amount"] = mustDecode(t, st, "amount", "52.49")
	rows[rowWith(rows, "id", int32(50))]["note"] = "emoji 🌊🎉 ü 51" // was ... 50
	f.buildSilver("orders", []string{"id"}, st, rows, silverOpts{})

	for _, pushdown := range []bool{true, false} {
		rep := f.verify(verify.Options{NoPushdown: !pushdown})
		tr := tableReport(t, rep, "public.orders")
		if tr.Status != verify.StatusDifferent || rep.ExitCode() != verify.ExitDifferences || tr.DifferencesTotal != 2 {
			t.Fatalf("status %s, exit %d, %d differences; want different, %d, 2", tr.Status, rep.ExitCode(), tr.DifferencesTotal, verify.ExitDifferences)
		}
		d := tr.Differences[0]
		if d.Key != "id=42" || d.Kind != verify.KindValues || len(d.Columns) != 1 || d.Columns[0].Column != "amount" ||
			d.Columns[0].Source != "52.50" || d.Columns[0].Silver != "52.49" {
			t.Fatalf("difference %+v (source amount was %v)", d, orig)
		}
		d = tr.Differences[1]
		if d.Key != "id=50" || d.Columns[0].Column != "note" || d.Columns[0].Source != `"emoji 🌊🎉 ü 50"` {
			t.Fatalf("difference %+v", d)
		}
	}
}

func mustDecode(t *testing.T, st *srcTable, col, text string) any {
	t.Helper()
	for i, c := range st.cols {
		if c == col {
			v, err := st.maps[i].Decode([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no column %s", col)
	return nil
}

func TestMissingExtraAndDuplicateRows(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	rows := copyRows(st.rows)
	i := rowWith(rows, "id", int32(7))
	rows = append(rows[:i], rows[i+1:]...) // 7 missing from silver
	extra := copyRows(rows[:1])[0]
	extra["id"] = int32(5000) // not at the source
	dup := copyRows(rows[9:10])[0]
	rows = append(rows, extra, dup) // key of rows[9] twice
	f.buildSilver("orders", []string{"id"}, st, rows, silverOpts{})

	rep := f.verify(verify.Options{})
	tr := tableReport(t, rep, "public.orders")
	if tr.Status != verify.StatusDifferent || tr.DifferencesTotal != 3 {
		t.Fatalf("status %s, %d differences; want different, 3", tr.Status, tr.DifferencesTotal)
	}
	want := map[string]string{"id=11": verify.KindDuplicate, "id=5000": verify.KindExtra, "id=7": verify.KindMissing}
	for _, d := range tr.Differences {
		if want[d.Key] != d.Kind {
			t.Errorf("key %s: %s, want %q", d.Key, d.Kind, want[d.Key])
		}
	}
}

func TestCompositeKey(t *testing.T) {
	f := newFixture(t, `
CREATE TABLE items (tenant text, id bigint, qty int, at timestamptz, PRIMARY KEY (tenant, id));
INSERT INTO items SELECT t, i, i % 10, now() FROM unnest(ARRAY['acme', 'ünï', 'z z']) t, generate_series(1, 300) i;`)
	st := f.read("items")
	rows := copyRows(st.rows)
	for _, r := range rows {
		if r["tenant"] == "ünï" && r["id"] == int64(77) {
			r["qty"] = int32(-1)
		}
	}
	f.buildSilver("items", []string{"tenant", "id"}, st, rows, silverOpts{})
	rep := f.verify(verify.Options{})
	tr := tableReport(t, rep, "public.items")
	if tr.Status != verify.StatusDifferent || tr.DifferencesTotal != 1 {
		t.Fatalf("status %s, %d differences", tr.Status, tr.DifferencesTotal)
	}
	if d := tr.Differences[0]; d.Key != `tenant="ünï", id=77` || d.Columns[0].Column != "qty" || d.Columns[0].Silver != "-1" {
		t.Fatalf("difference %+v", d)
	}
}

func TestSoftDeletedRowsAreNotLive(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	rows := copyRows(st.rows)
	gone := copyRows(rows[:1])[0]
	gone["id"] = int32(9999)
	rows = append(rows, gone)
	f.buildSilver("orders", []string{"id"}, st, rows, silverOpts{soft: true,
		deleted: func(r srcRow) bool { return r["id"] == int32(9999) }})
	rep := f.verify(verify.Options{})
	if tr := tableReport(t, rep, "public.orders"); tr.Status != verify.StatusEqual {
		t.Fatalf("status %s, want equal (a soft-deleted row is not live)", tr.Status)
	}
}

func TestNotPublished(t *testing.T) {
	f := newFixture(t, ordersDDL)
	rep := f.verify(verify.Options{Tables: []verify.TableName{{Schema: "public", Table: "orders"}}})
	tr := tableReport(t, rep, "public.orders")
	if tr.Status != verify.StatusNotPublished || rep.ExitCode() != verify.ExitIncomplete {
		t.Fatalf("status %s, exit %d; want not_published, %d", tr.Status, rep.ExitCode(), verify.ExitIncomplete)
	}
}

// A key whose silver row is newer than the source snapshot (it changed
// while verify ran) is not reported as a difference.
func TestNewerSilverRowIsNotADifference(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	rows := copyRows(st.rows)
	rows[rowWith(rows, "id", int32(3))]["note"] = "changed after verify's snapshot"
	f.buildSilver("orders", []string{"id"}, st, rows, silverOpts{
		lsn: func(r srcRow) int64 {
			if r["id"] == int32(3) {
				return math.MaxInt64
			}
			return 1
		}})
	rep := f.verify(verify.Options{Rounds: 2})
	tr := tableReport(t, rep, "public.orders")
	if tr.Status != verify.StatusUnsettled || tr.DifferencesTotal != 0 || len(tr.Unsettled) != 1 || tr.Unsettled[0] != "id=3" {
		t.Fatalf("status %s, differences %d, unsettled %v; want unsettled id=3 and no difference", tr.Status, tr.DifferencesTotal, tr.Unsettled)
	}
	if rep.ExitCode() != verify.ExitIncomplete {
		t.Fatalf("exit %d", rep.ExitCode())
	}
}

func TestWaitsForSilverToReachTheSource(t *testing.T) {
	f := newFixture(t, ordersDDL)
	st := f.read("orders")
	tbl := f.buildSilver("orders", []string{"id"}, st, st.rows, silverOpts{position: 1})

	rep := f.verify(verify.Options{Wait: 300 * time.Millisecond})
	tr := tableReport(t, rep, "public.orders")
	if tr.Status != verify.StatusBehind || !strings.Contains(tr.Reason, "tidemark run") {
		t.Fatalf("status %s (%s); want behind, naming tidemark run", tr.Status, tr.Reason)
	}

	// Silver catches up while verify waits.
	go func() {
		time.Sleep(500 * time.Millisecond)
		f.appendSilver(tbl, st, nil, silverOpts{})
	}()
	rep = f.verify(verify.Options{Wait: 30 * time.Second})
	if tr := tableReport(t, rep, "public.orders"); tr.Status != verify.StatusEqual {
		t.Fatalf("status %s (%s), want equal", tr.Status, tr.Reason)
	}
}

// A value the lake cannot hold (here NaN in numeric(12,2), a dead letter)
// is a difference, whatever silver holds.
func TestUnstorableSourceValue(t *testing.T) {
	f := newFixture(t, `CREATE TABLE m (id int PRIMARY KEY, v numeric(12,2)); INSERT INTO m VALUES (1, 1.5), (2, 2.5);`)
	st := f.read("m")
	f.buildSilver("m", []string{"id"}, st, st.rows, silverOpts{})
	f.pg.Exec(t, f.url, `UPDATE m SET v = 'NaN' WHERE id = 2`)
	rep := f.verify(verify.Options{})
	tr := tableReport(t, rep, "public.m")
	if tr.Status != verify.StatusDifferent || tr.Differences[0].Key != "id=2" ||
		!strings.Contains(tr.Differences[0].Columns[0].Source, "cannot be stored") {
		t.Fatalf("report %+v", tr)
	}
}

// TestThroughput measures verify on a larger table and prints rows/s. It
// asserts nothing about speed (STYLE 12) and runs only when asked:
// TIDEMARK_VERIFY_ROWS=1000000 go test -run TestThroughput -v ./internal/verify/
func TestThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TIDEMARK_VERIFY_ROWS"))
	if n <= 0 {
		t.Skip("set TIDEMARK_VERIFY_ROWS to measure verify's throughput")
	}
	f := newFixture(t, fmt.Sprintf(`CREATE TABLE big (id bigint PRIMARY KEY, amount numeric(12,2), at timestamptz, note text, n int, doc jsonb);
INSERT INTO big SELECT i, i * 0.01, now() - i * interval '1 second', 'row number ' || i, i %% 1000, jsonb_build_object('i', i) FROM generate_series(1, %d) i;
ANALYZE big;`, n))
	start := time.Now()
	st := f.read("big")
	f.buildSilver("big", []string{"id"}, st, st.rows, silverOpts{})
	st.rows = nil
	t.Logf("built silver with %d rows in %s", n, time.Since(start).Round(time.Millisecond))
	for _, pushdown := range []bool{true, false} {
		start := time.Now()
		rep := f.verify(verify.Options{NoPushdown: !pushdown})
		el := time.Since(start)
		tr := tableReport(t, rep, "public.big")
		if tr.Status != verify.StatusEqual {
			t.Fatalf("status %s", tr.Status)
		}
		t.Logf("pushdown=%v: %d rows in %s: %.0f rows/s", pushdown, n, el.Round(time.Millisecond), float64(n)/el.Seconds())
	}
	// One changed row: the drill-down's cost on top.
	f.pg.Exec(t, f.url, `UPDATE big SET note = 'changed' WHERE id = 4242`)
	start = time.Now()
	rep := f.verify(verify.Options{})
	t.Logf("one difference: %s (%s)", time.Since(start).Round(time.Millisecond), tableReport(t, rep, "public.big").Status)
}
