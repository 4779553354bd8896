package silver_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	lakeapi "github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// lakeEnv writes bronze with the real bronze.Writer (synthetic changes, no
// database) and merges it with a real Merger, on a real Iceberg warehouse.
type lakeEnv struct {
	t      testing.TB
	ctx    context.Context
	wh     string
	cat    *lake.Catalog // nil in a Delta lake (newDeltaLakeEnv)
	lc     lakeapi.Catalog
	w      *bronze.Writer
	source string
	lsn    uint64
	log    *slog.Logger
}

func testLogger() *slog.Logger {
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

func newLakeEnv(t testing.TB) *lakeEnv {
	t.Helper()
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e := &lakeEnv{t: t, ctx: ctx, wh: wh, cat: cat, lc: cat, source: "src", lsn: 1000, log: testLogger()}
	if e.w, err = bronze.NewWriter(ctx, cat, e.source, "slot", e.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.w.Close() })
	return e
}

// newDeltaLakeEnv is newLakeEnv on a Delta Lake warehouse (only the
// helpers that take the neutral catalog, e.lc, work in it).
func newDeltaLakeEnv(t testing.TB) *lakeEnv {
	t.Helper()
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	e := &lakeEnv{t: t, ctx: ctx, wh: wh, lc: cat, source: "src", lsn: 1000, log: testLogger()}
	if e.w, err = bronze.NewWriter(ctx, cat, e.source, "slot", e.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.w.Close() })
	return e
}

var ordersID = change.TableID{Schema: "public", Name: "orders"}

func ordersSchema() *change.Schema {
	return &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int32, SourceType: "integer"},
		{Name: "v", Type: iceberg.PrimitiveTypes.String, SourceType: "text"},
		{Name: "big", Type: iceberg.PrimitiveTypes.String, SourceType: "text"},
	}}
}

func (e *lakeEnv) open(id change.TableID, s *change.Schema) {
	e.t.Helper()
	if _, err := e.w.OpenTable(e.ctx, id, s); err != nil {
		e.t.Fatal(err)
	}
}

// tx writes one source transaction's changes at the next LSN and flushes
// it as a bronze commit. A change is "op key v big" with "-" for NULL and
// "~" for a TOAST-unchanged value. With props (snapshot progress) the
// changes are written as a snapshot chunk.
func (e *lakeEnv) tx(id change.TableID, s *change.Schema, props map[string]string, changes ...string) {
	e.t.Helper()
	e.lsn += 100
	e.write(id, s, e.lsn, props, changes...)
	e.flushAt(e.lsn)
}

// write buffers changes at lsn (seq 1, 2, ...) without flushing.
func (e *lakeEnv) write(id change.TableID, s *change.Schema, lsn uint64, props map[string]string, changes ...string) {
	e.t.Helper()
	var cs []*change.Change
	for i, line := range changes {
		f := strings.Fields(line)
		c := &change.Change{Table: id, Op: change.Op(f[0][0]), Schema: s, Values: make([]any, len(s.Fields)),
			Pos: change.Position{LSN: lsn, Seq: int64(i + 1)}, TxID: int64(lsn), CommitTime: time.Unix(int64(lsn), 0).UTC()}
		for j, v := range f[1:] {
			switch {
			case v == "-":
			case v == "~":
				c.Unchanged = append(c.Unchanged, s.Fields[j].Name)
			default:
				c.Values[j] = typed(s.Fields[j].Type, v)
			}
		}
		cs = append(cs, c)
	}
	if props != nil {
		if err := e.w.WriteBatch(e.ctx, id, cs, props); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	for _, c := range cs {
		if err := e.w.Write(e.ctx, c); err != nil {
			e.t.Fatal(err)
		}
	}
}

func typed(t iceberg.Type, v string) any {
	switch t.(type) {
	case iceberg.Int32Type:
		var n int32
		fmt.Sscan(v, &n)
		return n
	case iceberg.Int64Type:
		var n int64
		fmt.Sscan(v, &n)
		return n
	}
	return v
}

// flushAt commits what is buffered, with every transaction up to
// commitLSN complete.
func (e *lakeEnv) flushAt(commitLSN uint64) {
	e.t.Helper()
	if err := e.w.Flush(e.ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(commitLSN+1, 10), Pos: commitLSN, Watermark: time.Unix(int64(commitLSN), 0)}); err != nil {
		e.t.Fatal(err)
	}
}

var (
	snapDone    = map[string]string{pipeline.PropSnapshot: `{"status":"done","rows":0,"estimate":0}`}
	snapRunning = map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":1,"estimate":10}`}
)

func (e *lakeEnv) merger(opts silver.Options) *silver.Merger {
	return silver.NewMerger(e.lc, opts, e.log)
}

func (e *lakeEnv) merge(m *silver.Merger, id change.TableID) silver.Result {
	e.t.Helper()
	res, err := m.MergeTable(e.ctx, e.source, id.Schema, id.Name)
	if err != nil {
		e.t.Fatalf("merge %s: %v", id, err)
	}
	return res
}

// rows renders a lake table as sorted lines "col=val ..." of the given
// columns (all columns when none are given).
func (e *lakeEnv) rows(ident []string, cols ...string) []string {
	e.t.Helper()
	tbl, err := e.lc.Open(e.ctx, ident)
	if err != nil {
		e.t.Fatalf("load %s: %v", strings.Join(ident, "."), err)
	}
	rs, err := bronzetest.ReadTable(e.ctx, tbl)
	if err != nil {
		e.t.Fatal(err)
	}
	return renderRows(rs, cols)
}

func renderRows(rs []bronzetest.Row, cols []string) []string {
	var out []string
	for _, r := range rs {
		names := cols
		if len(names) == 0 {
			for k := range r {
				names = append(names, k)
			}
			sort.Strings(names)
		}
		var parts []string
		for _, c := range names {
			v := r[c]
			s := fmt.Sprint(v)
			if v == nil {
				s = "-"
			}
			if t, ok := v.(time.Time); ok {
				s = fmt.Sprint(t.Unix())
			}
			parts = append(parts, c+"="+s)
		}
		out = append(out, strings.Join(parts, " "))
	}
	sort.Strings(out)
	return out
}

func silverIdent(id change.TableID) []string { return silver.Ident("src", id.Schema, id.Name) }

func equalLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestMergeUpsertsDeletesAndTOAST(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C", "r 999 k K")
	m := e.merger(silver.Options{})
	res := e.merge(m, ordersID)
	if !res.Published || res.Commits != 1 || res.Upserts != 4 {
		t.Fatalf("first merge: %+v", res)
	}
	equalLines(t, "after the snapshot", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=1 v=a big=A", "id=2 v=b big=B", "id=3 v=c big=C", "id=999 v=k big=K"})

	e.tx(ordersID, s, nil, "u 1 a2 ~", "d 2 - -", "c 4 d D")
	e.tx(ordersID, s, nil, "u 1 a3 ~", "c 2 again AGAIN", "d 999 - -", "c 3000 k K") // key change 999 -> 3000
	res = e.merge(m, ordersID)
	if res.Commits != 1 || res.Changes != 7 {
		t.Errorf("second merge: %+v", res)
	}
	equalLines(t, "after updates", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=1 v=a3 big=A", "id=2 v=again big=AGAIN", "id=3 v=c big=C", "id=3000 v=k big=K", "id=4 v=d big=D"})
	// TOAST filled from the silver row (not in this merge's range).
	e.tx(ordersID, s, nil, "u 4 d2 ~")
	e.merge(m, ordersID)
	equalLines(t, "after a TOAST update", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=1 v=a3 big=A", "id=2 v=again big=AGAIN", "id=3 v=c big=C", "id=3000 v=k big=K", "id=4 v=d2 big=D"})
	// The row carries the position of its last change.
	got := e.rows(silverIdent(ordersID), "id", "cdc_source_lsn", "cdc_seq")
	if !contains(got, fmt.Sprintf("id=4 cdc_source_lsn=%d cdc_seq=1", e.lsn)) {
		t.Errorf("positions: %v", got)
	}
	sum := e.summary(silverIdent(ordersID))
	if sum[silver.PropBronzeSnapshot] == "" || sum[silver.PropPosition] != fmt.Sprint(e.lsn) {
		t.Errorf("summary = %v, want the bronze snapshot and position %d", sum, e.lsn)
	}
	// Nothing new: no commit.
	if res := e.merge(m, ordersID); res.Commits != 0 {
		t.Errorf("idle merge: %+v", res)
	}
}

func (e *lakeEnv) summary(ident []string) map[string]string {
	e.t.Helper()
	tbl, err := e.lc.Open(e.ctx, ident)
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl.Summary()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
