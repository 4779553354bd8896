package silver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
)

func TestGatedUntilTheSnapshotIsDone(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})

	// Opened, nothing committed: gated.
	if res := e.merge(m, ordersID); !res.Gated {
		t.Errorf("before any commit: %+v, want gated", res)
	}
	e.tx(ordersID, s, snapRunning, "r 1 a A")
	e.tx(ordersID, s, nil, "u 1 b ~")
	res := e.merge(m, ordersID)
	if !res.Gated || !strings.Contains(res.Reason, "running") {
		t.Errorf("snapshot running: %+v, want gated with a reason", res)
	}
	e.noSilverTable()
	st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || !st.Gated || st.Published || !strings.Contains(st.Reason, "running") {
		t.Errorf("State = %+v, %v; want gated, not published, with the reason", st, err)
	}
	if err := m.MergeAll(e.ctx, e.source); err != nil {
		t.Fatal(err)
	}
	e.noSilverTable()

	e.tx(ordersID, s, snapDone, "r 2 c C")
	res = e.merge(m, ordersID)
	if res.Gated || !res.Published {
		t.Fatalf("snapshot done: %+v, want published", res)
	}
	equalLines(t, "published", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=b big=A", "id=2 v=c big=C"})
	st, err = silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || st.Gated || !st.Published || st.Behind != 0 || st.Position == "" {
		t.Errorf("State = %+v, %v; want published, caught up", st, err)
	}
}

// noSilverTable checks that no silver table of the source is visible.
func (e *lakeEnv) noSilverTable() {
	e.t.Helper()
	_, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if !errors.Is(err, lake.ErrNoSuchTable) {
		e.t.Errorf("silver table: %v, want none", err)
	}
	ids, err := e.cat.ListTables(e.ctx, silver.Namespace(e.source, "public"))
	if err == nil && len(ids) > 0 {
		e.t.Errorf("silver tables %v, want none", ids)
	}
}

// The capture writes a snapshot chunk's rows at its low watermark, after
// the stream changes committed while it was read: bronze's order is not
// the source's until the snapshot is done. The build folds it by position.
func TestBuildFoldsSnapshotChunksByPosition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   silver.Options
		passes bool
	}{
		{"defaults", silver.Options{}, false},
		{"max_changes=1", silver.Options{MaxChanges: 1}, true},
		{"max_changes=2", silver.Options{MaxChanges: 2}, true},
		// A budget of about two rows of Arrow memory builds in passes.
		{"max_bytes=2 rows", silver.Options{MaxBytes: 300}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLakeEnv(t)
			s := ordersSchema()
			e.open(ordersID, s)
			e.write(ordersID, s, 1200, nil, "u 1 new ~", "d 2 - -", "c 4 d D")
			e.flushAt(1200)
			e.write(ordersID, s, 1100, snapDone, "r 1 old BIG", "r 2 b B", "r 3 c C")
			e.flushAt(1200)
			m := e.merger(tc.opts)
			res := e.merge(m, ordersID)
			if !res.Published || res.DeadLetters != 0 {
				t.Errorf("build: %+v", res)
			}
			if tc.passes && res.Commits < 2 {
				t.Errorf("build with %+v made %d commits, want passes", tc.opts, res.Commits)
			}
			equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
				"id=1 v=new big=BIG", "id=3 v=c big=C", "id=4 v=d big=D"})
		})
	}
}

// A key-changing UPDATE is a delete of the old key and an insert of the
// new one that takes the TOAST columns it did not send from the old key's
// row. A build in hash passes must fold both keys (and every key of a
// chain of such updates) in one pass, or the insert is dead-lettered.
func TestBuildInPassesKeepsKeyChangeChainsTogether(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  silver.Options
		crash bool // the process dies before the third pass commits; a new merger resumes
	}{
		{"max_changes=1", silver.Options{MaxChanges: 1}, false},
		{"max_bytes=1 row", silver.Options{MaxBytes: 1}, false},
		{"max_changes=3", silver.Options{MaxChanges: 3}, false},
		{"max_changes=2, resumed after a crash", silver.Options{MaxChanges: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLakeEnv(t)
			s := ordersSchema()
			e.open(ordersID, s)
			// Snapshot chunks, then (before the snapshot is done) chains of key
			// changes leaving big unchanged: 1 -> 11 -> 21 -> 31, 2 -> 12,
			// 3 -> 13 -> 23, and a key changed back: 4 -> 14 -> 4.
			e.tx(ordersID, s, snapRunning, "r 1 a A", "r 2 b B", "r 3 c C", "r 4 d D", "r 5 e E", "r 6 f F")
			e.tx(ordersID, s, nil, "d 1 - -", "c 11 a1 ~", "d 2 - -", "c 12 b1 ~", "d 4 - -", "c 14 d1 ~")
			e.tx(ordersID, s, nil, "d 11 - -", "c 21 a2 ~", "d 3 - -", "c 13 c1 ~", "u 5 e1 ~")
			e.tx(ordersID, s, nil, "d 21 - -", "c 31 a3 ~", "d 13 - -", "c 23 c2 ~", "d 14 - -", "c 4 d2 ~")
			e.tx(ordersID, s, snapDone, "r 7 g G")
			commits := 0
			if tc.crash {
				if err := failpoint.Enable("lake-merge-before-commit=3*panic"); err != nil {
					t.Fatal(err)
				}
				func() {
					defer func() {
						if recover() == nil {
							t.Fatal("the build did not reach its third commit")
						}
					}()
					e.merge(e.merger(tc.opts), ordersID)
				}()
				if err := failpoint.Enable(""); err != nil {
					t.Fatal(err)
				}
				commits = 2
			}
			res := e.merge(e.merger(tc.opts), ordersID)
			res.Commits += commits
			if !res.Published || res.DeadLetters != 0 {
				t.Errorf("build: %+v, want published with no dead letters", res)
			}
			if res.Commits < 2 {
				t.Errorf("build with %+v made %d commits, want passes", tc.opts, res.Commits)
			}
			equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
				"id=12 v=b1 big=B", "id=23 v=c2 big=C", "id=31 v=a3 big=A", "id=4 v=d2 big=D",
				"id=5 v=e1 big=E", "id=6 v=f big=F", "id=7 v=g big=G"})
		})
	}
}

func TestReplayingMergedBronzeChangesNothing(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C")
	e.merge(m, ordersID)
	old := e.summary(silverIdent(ordersID))[silver.PropBronzeSnapshot]
	e.tx(ordersID, s, nil, "u 1 a2 ~", "d 2 - -", "c 5 e E")
	e.tx(ordersID, s, nil, "t - - -", "c 6 f F", "u 6 f2 ~")
	e.tx(ordersID, s, nil, "c 2 b2 B2", "u 6 f3 ~", "c 7 g G")
	e.merge(m, ordersID)
	want := e.rows(silverIdent(ordersID))
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=2 v=b2 big=B2", "id=6 v=f3 big=F", "id=7 v=g big=G"})

	// Move the cursor back: the next merge re-reads every change since.
	e.resetCursor(old)
	res := e.merge(m, ordersID)
	if res.Commits != 1 || res.Changes != 9 {
		t.Errorf("replay: %+v", res)
	}
	equalLines(t, "after the replay (every column)", e.rows(silverIdent(ordersID)), want)
}

// resetCursor commits an empty snapshot whose cursor is an older bronze
// snapshot, as if the merges since had not recorded theirs.
func (e *lakeEnv) resetCursor(to string) {
	e.t.Helper()
	tbl, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := tbl.Merge(e.ctx, nil, nil, map[string]string{silver.PropBronzeSnapshot: to}); err != nil {
		e.t.Fatal(err)
	}
}

func TestTruncate(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
	e.merge(m, ordersID)
	e.tx(ordersID, s, nil, "t - - -", "c 5 e E")
	res := e.merge(m, ordersID)
	if res.Truncates != 1 {
		t.Errorf("result: %+v", res)
	}
	equalLines(t, "after truncate", e.rows(silverIdent(ordersID), "id", "v"), []string{"id=5 v=e"})
	// Changes before the truncate in the same range are void too.
	e.tx(ordersID, s, nil, "c 8 h H")
	e.tx(ordersID, s, nil, "u 5 e2 ~", "t - - -")
	e.tx(ordersID, s, nil, "c 9 i I")
	e.merge(m, ordersID)
	equalLines(t, "after a second truncate", e.rows(silverIdent(ordersID), "id", "v"), []string{"id=9 v=i"})
}

func TestSoftDeletes(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{SoftDeletes: true})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
	e.merge(m, ordersID)
	e.tx(ordersID, s, nil, "d 1 - -", "d 3 - -")
	e.merge(m, ordersID)
	cols := []string{"id", "v", "big", "cdc_deleted"}
	equalLines(t, "after deletes", e.rows(silverIdent(ordersID), cols...), []string{
		"id=1 v=a big=A cdc_deleted=true", "id=2 v=b big=B cdc_deleted=false", "id=3 v=- big=- cdc_deleted=true"})
	e.tx(ordersID, s, nil, "c 1 again AGAIN")
	e.merge(m, ordersID)
	equalLines(t, "after a reinsert", e.rows(silverIdent(ordersID), cols...), []string{
		"id=1 v=again big=AGAIN cdc_deleted=false", "id=2 v=b big=B cdc_deleted=false", "id=3 v=- big=- cdc_deleted=true"})
	// The option applies to new tables: this one stays soft with a plain merger.
	e.tx(ordersID, s, nil, "d 2 - -")
	e.merge(e.merger(silver.Options{}), ordersID)
	if got := e.rows(silverIdent(ordersID), cols...); !contains(got, "id=2 v=b big=B cdc_deleted=true") {
		t.Errorf("rows: %v", got)
	}
}

func TestSchemaEvolution(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
	e.merge(m, ordersID)

	// A column is added, then widened from int to bigint.
	s2 := &change.Schema{Key: s.Key, Fields: append(append([]change.Field{}, s.Fields...),
		change.Field{Name: "extra", Type: iceberg.PrimitiveTypes.Int32, SourceType: "integer"})}
	e.open(ordersID, s2)
	e.tx(ordersID, s2, nil, "u 1 a2 ~ 42")
	e.merge(m, ordersID)
	equalLines(t, "column added", e.rows(silverIdent(ordersID), "id", "v", "extra"), []string{"id=1 v=a2 extra=42", "id=2 v=b extra=-"})

	s3 := &change.Schema{Key: s.Key, Fields: append(append([]change.Field{}, s.Fields...),
		change.Field{Name: "extra", Type: iceberg.PrimitiveTypes.Int64, SourceType: "bigint"})}
	e.open(ordersID, s3)
	e.tx(ordersID, s3, nil, "u 2 b2 ~ 5000000000")
	e.merge(m, ordersID)
	equalLines(t, "column widened", e.rows(silverIdent(ordersID), "id", "v", "extra"), []string{"id=1 v=a2 extra=42", "id=2 v=b2 extra=5000000000"})
	tbl, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := tbl.Schema().FindFieldByName("extra"); !f.Type.Equals(iceberg.PrimitiveTypes.Int64) {
		t.Errorf("silver extra is %s, want long", f.Type)
	}

	// A column bronze stops filling (dropped at the source) stays, NULL in new rows.
	s4 := &change.Schema{Key: s.Key, Fields: s.Fields[:2]}
	e.open(ordersID, s4)
	e.tx(ordersID, s4, nil, "c 3 c")
	e.merge(m, ordersID)
	equalLines(t, "column dropped", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=a2 big=A", "id=2 v=b2 big=B", "id=3 v=c big=-"})
}

func TestIncompatibleSchemaIsANamedError(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A")
	// A silver table whose column v is an int: bronze's is a string.
	_, err := e.cat.CreateKeyedTable(e.ctx, silverIdent(ordersID), lake.KeyedTableSpec{
		Schema: iceberg.NewSchema(0,
			iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int32, Required: true},
			iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.Int32},
			iceberg.NestedField{ID: 3, Name: "cdc_source_lsn", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 4, Name: "cdc_seq", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 5, Name: "cdc_ts", Type: iceberg.PrimitiveTypes.TimestampTz}),
		Key: []string{"id"}, Properties: map[string]string{"tidemark.key": `["id"]`},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.merger(silver.Options{}).MergeTable(e.ctx, e.source, "public", "orders")
	if !errors.Is(err, fault.ErrIncompatibleSchema) || !strings.Contains(err.Error(), `"v"`) ||
		!strings.Contains(err.Error(), "silver.src.public.orders") {
		t.Errorf("err = %v, want incompatible_schema naming the table and column v", err)
	}
	// The loop of `tidemark run` stops on it instead of retrying.
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if err := e.merger(silver.Options{}).Run(ctx, e.source, 10*time.Millisecond); !errors.Is(err, fault.ErrIncompatibleSchema) {
		t.Errorf("Run = %v, want incompatible_schema", err)
	}
}

func TestUnfillableTOASTGoesToTheDeadLetterTable(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A")
	e.merge(m, ordersID)
	old := e.summary(silverIdent(ordersID))[silver.PropBronzeSnapshot]
	// Key 7 was never seen: its update cannot be completed.
	e.tx(ordersID, s, nil, "u 7 x ~", "u 1 b ~")
	res := e.merge(m, ordersID)
	if res.DeadLetters != 1 {
		t.Errorf("result: %+v, want one dead letter", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=b big=A"})
	dl := e.rows(silver.DeadLetterIdent(e.source), "source_table", "key", "op", "cdc_seq")
	equalLines(t, "dead letters", dl, []string{`source_table=public.orders key={"id":7} op=u cdc_seq=1`})
	if got := e.rows(silver.DeadLetterIdent(e.source), "error"); !strings.Contains(got[0], "big") {
		t.Errorf("dead letter error %q does not name the column", got[0])
	}
	// A replay does not write it twice.
	e.resetCursor(old)
	e.merge(m, ordersID)
	if n := len(e.rows(silver.DeadLetterIdent(e.source), "key")); n != 1 {
		t.Errorf("%d dead letters after a replay, want 1", n)
	}
}

func TestKeyChangeCarriesTOASTValues(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 999 k BIG")
	e.merge(m, ordersID)
	// UPDATE ... SET id = 3000 leaving big unchanged: a delete and an insert.
	e.tx(ordersID, s, nil, "d 999 - -", "c 3000 k ~")
	e.tx(ordersID, s, nil, "d 3000 - -", "c 4000 k2 ~")
	res := e.merge(m, ordersID)
	if res.DeadLetters != 0 {
		t.Errorf("result: %+v", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=4000 v=k2 big=BIG"})
}

func TestBacklogMergesInSeveralCommits(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A")
	m := e.merger(silver.Options{MaxChanges: 3})
	e.merge(m, ordersID)
	var want []string
	for i := 2; i <= 10; i++ {
		e.tx(ordersID, s, nil, fmt.Sprintf("c %d v%d B%d", i, i, i), fmt.Sprintf("u %d w%d ~", i, i))
		want = append(want, fmt.Sprintf("id=%d v=w%d big=B%d", i, i, i))
	}
	res := e.merge(m, ordersID)
	if res.Commits < 5 || res.Changes != 18 {
		t.Errorf("result: %+v, want several commits", res)
	}
	want = append(want, "id=1 v=a big=A")
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), sorted(want))
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// Bronze may commit a large transaction in several flushes: silver waits
// for the whole transaction.
func TestPartOfATransactionWaits(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A")
	e.merge(m, ordersID)
	e.write(ordersID, s, 2000, nil, "c 10 x X")
	e.flushAt(1500) // the transaction at 2000 is not complete
	if res := e.merge(m, ordersID); res.Commits != 0 {
		t.Errorf("merge of half a transaction: %+v", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id"), []string{"id=1"})
	e.write(ordersID, s, 2000, nil, "c 10 x X", "c 11 y Y")
	e.flushAt(2000)
	e.merge(m, ordersID)
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id"), []string{"id=1", "id=10", "id=11"})
}

var linesID = change.TableID{Schema: "sales", Name: "lines"}

func TestCompositeKey(t *testing.T) {
	e := newLakeEnv(t)
	s := &change.Schema{Key: []string{"order_id", "line"}, Fields: []change.Field{
		{Name: "order_id", Type: iceberg.PrimitiveTypes.Int64}, {Name: "line", Type: iceberg.PrimitiveTypes.Int32},
		{Name: "item", Type: iceberg.PrimitiveTypes.String}}}
	e.open(linesID, s)
	m := e.merger(silver.Options{})
	e.tx(linesID, s, snapDone, "r 1 1 a", "r 1 2 b", "r 2 1 c", "r 2 2 d")
	e.merge(m, linesID)
	e.tx(linesID, s, nil, "u 1 2 b2", "d 2 1 -", "c 3 2 e")
	e.merge(m, linesID)
	equalLines(t, "silver", e.rows(silverIdent(linesID), "order_id", "line", "item"), []string{
		"order_id=1 line=1 item=a", "order_id=1 line=2 item=b2", "order_id=2 line=2 item=d", "order_id=3 line=2 item=e"})
}

func TestCopyOnWrite(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{DeleteMode: lake.CopyOnWrite})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C")
	e.merge(m, ordersID)
	e.tx(ordersID, s, nil, "u 1 a2 ~", "d 2 - -")
	e.merge(m, ordersID)
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=a2 big=A", "id=3 v=c big=C"})
	if sum := e.summary(silverIdent(ordersID)); sum["total-delete-files"] != "0" {
		t.Errorf("copy-on-write table has delete files: %v", sum)
	}
}

// Mergers racing on one table never apply a change twice: a commit that
// lost the race fails (retryable) instead of being replayed on rows it did
// not read.
func TestConcurrentMergersDoNotDuplicate(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A")
	e.merge(e.merger(silver.Options{}), ordersID)
	want := []string{"id=1 v=a"}
	errs := make(chan error, 64)
	for round := 0; round < 4; round++ {
		id := 10 + round
		e.tx(ordersID, s, nil, fmt.Sprintf("c %d x X", id), "u 1 a ~")
		want = append(want, fmt.Sprintf("id=%d v=x", id))
		done := make(chan struct{})
		for g := 0; g < 3; g++ {
			go func() {
				defer func() { done <- struct{}{} }()
				m := e.merger(silver.Options{})
				for try := 0; try < 20; try++ {
					_, err := m.MergeTable(e.ctx, e.source, "public", "orders")
					if err == nil {
						return
					}
					if fault.ClassOf(err) != fault.Transient {
						errs <- err
						return
					}
				}
				errs <- errors.New("merge kept conflicting")
			}()
		}
		for g := 0; g < 3; g++ {
			<-done
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v"), sorted(want))
}

// Two writers build the same silver table (`tidemark merge` beside a running
// pipeline): the one that loses the race to publish gets a named, transient
// commit_conflict, and its retry merges into the published table.
func TestLostPublishRaceIsACommitConflict(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.write(ordersID, s, 1100, snapDone, "r 1 a A", "r 2 b B")
	e.flushAt(1100)
	first, second := e.merger(silver.Options{}), e.merger(silver.Options{})
	raced := false
	defer failpoint.OnHit("silver-before-publish", func() {
		if raced {
			return
		}
		raced = true
		if res := e.merge(second, ordersID); !res.Published {
			t.Errorf("the second writer did not publish: %+v", res)
		}
	})()
	_, err := first.MergeTable(e.ctx, e.source, ordersID.Schema, ordersID.Name)
	if !raced {
		t.Fatal("the publish failpoint was not reached")
	}
	if !errors.Is(err, fault.ErrCommitConflict) || fault.ClassOf(err) != fault.Transient {
		t.Fatalf("losing the publish race: err = %v, want a transient commit_conflict", err)
	}
	e.write(ordersID, s, 1200, nil, "u 2 b2 ~")
	e.flushAt(1200)
	if res := e.merge(first, ordersID); res.Changes != 1 {
		t.Errorf("retry: %+v, want the one new change merged", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=a big=A", "id=2 v=b2 big=B"})
}

// TestKeyWidened: ALTER TABLE … ALTER COLUMN id TYPE bigint widens silver's
// key column; merges after it must still find the rows that older data
// files hold (their key bounds are 4-byte ints).
func TestKeyWidened(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C")
	e.merge(m, ordersID)

	wide := &change.Schema{Key: s.Key, Fields: append([]change.Field{{Name: "id", Type: iceberg.PrimitiveTypes.Int64, SourceType: "bigint"}}, s.Fields[1:]...)}
	e.open(ordersID, wide)
	e.tx(ordersID, wide, nil, "u 1 a2 A2", "d 2", "c 5000000000 big B5")
	e.merge(m, ordersID)
	equalLines(t, "after the key was widened", e.rows(silverIdent(ordersID), "id", "v", "big"),
		[]string{"id=1 v=a2 big=A2", "id=3 v=c big=C", "id=5000000000 v=big big=B5"})
	e.tx(ordersID, wide, nil, "u 3 c2 C2", "d 5000000000")
	e.merge(m, ordersID)
	equalLines(t, "a second merge", e.rows(silverIdent(ordersID), "id", "v", "big"),
		[]string{"id=1 v=a2 big=A2", "id=3 v=c2 big=C2"})
}

// A build in passes reads bronze once into a local spill (one set of files
// per pass) that is scratch: removed when the build is done, and a spill
// left by a build that died (its lock is free) is removed by the next.
func TestBuildSpillIsScratch(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapRunning, "r 1 a A", "r 2 b B", "r 3 c C", "r 4 d D", "r 5 e E", "r 6 f F")
	e.tx(ordersID, s, nil, "u 2 b1 ~", "d 3 - -", "t - - -") // a truncate is in every pass
	e.tx(ordersID, s, nil, "c 7 g G", "u 7 g1 ~")
	e.tx(ordersID, s, snapDone, "r 8 h H", "r 9 i I")
	dir := t.TempDir()
	stale := filepath.Join(dir, "tidemark-silver-build-123")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"lock", "pass-0-0.arrows"} {
		if err := os.WriteFile(filepath.Join(stale, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := e.merge(e.merger(silver.Options{MaxChanges: 2, SpillDir: dir}), ordersID)
	if !res.Published || res.Commits < 2 {
		t.Errorf("build: %+v, want published in passes", res)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{
		"id=7 v=g1 big=G", "id=8 v=h big=H", "id=9 v=i big=I"})
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range left {
		t.Errorf("spill directory %s still holds %s after the build", dir, f.Name())
	}
}

// A build in passes writes whole buckets of the silver table per pass (its
// partitioning is bucket(16, id)): the table ends with one data file per
// bucket when there are no more passes than buckets, and passes/16 per
// bucket beyond, instead of one file per bucket per pass. The rows are
// those of a build in one commit, key changes across buckets included.
func TestBuildInPassesWritesFewFilesPerBucket(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxChanges int64
		perBucket  int // most data files a bucket may hold
		crashAt    int // the process dies before this commit; a new merger resumes (0: no crash)
	}{
		{"fewer passes than buckets", 120, 1, 0},
		{"more passes than buckets", 15, 3, 0},
		{"more passes than buckets, resumed after a crash", 15, 3, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLakeEnv(t)
			s := ordersSchema()
			e.open(ordersID, s)
			const keys = 600
			for c := 0; c < keys/100; c++ {
				var rows []string
				for k := c*100 + 1; k <= c*100+100; k++ {
					rows = append(rows, fmt.Sprintf("r %d v%d B%d", k, k, k))
				}
				e.tx(ordersID, s, snapRunning, rows...)
			}
			// Updates, deletes and key changes leaving big unchanged (TOAST),
			// whose keys fall in other buckets: 1 -> 1001 -> 1002, 7 -> 1007.
			e.tx(ordersID, s, nil, "u 2 w2 ~", "d 3 - -", "d 1 - -", "c 1001 x ~", "u 5 w5 ~", "u 5 w5b ~")
			e.tx(ordersID, s, nil, "d 1001 - -", "c 1002 y ~", "d 7 - -", "c 1007 z ~")
			e.tx(ordersID, s, snapDone, "r 601 v601 B601")
			commits := 0
			if tc.crashAt > 0 {
				if err := failpoint.Enable(fmt.Sprintf("lake-merge-before-commit=%d*panic", tc.crashAt)); err != nil {
					t.Fatal(err)
				}
				func() {
					defer func() {
						if recover() == nil {
							t.Fatalf("the build did not reach commit %d", tc.crashAt)
						}
					}()
					e.merge(e.merger(silver.Options{MaxChanges: tc.maxChanges}), ordersID)
				}()
				if err := failpoint.Enable(""); err != nil {
					t.Fatal(err)
				}
				commits = tc.crashAt - 1
				// `tidemark status` shows how far the build got.
				st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
				if err != nil || !st.Building || st.BuildPass != commits || st.BuildPasses != 48 {
					t.Errorf("State after the crash = %+v, %v; want building, pass %d of 48", st, err, commits)
				}
			}
			res := e.merge(e.merger(silver.Options{MaxChanges: tc.maxChanges}), ordersID)
			res.Commits += commits
			if !res.Published || res.DeadLetters != 0 || res.Commits < 2 {
				t.Fatalf("build: %+v, want published in passes with no dead letters", res)
			}
			got := e.rows(silverIdent(ordersID), "id", "v", "big")
			if len(got) != keys {
				t.Errorf("silver holds %d rows, want %d", len(got), keys)
			}
			for _, w := range []string{"id=1002 v=y big=B1", "id=1007 v=z big=B7", "id=2 v=w2 big=B2", "id=5 v=w5b big=B5", "id=601 v=v601 big=B601"} {
				if !containsLine(got, w) {
					t.Errorf("silver lacks %q", w)
				}
			}
			for _, k := range []string{"id=1 ", "id=3 ", "id=7 ", "id=1001 "} {
				for _, g := range got {
					if strings.HasPrefix(g, k) {
						t.Errorf("silver holds %q, a key deleted or changed", g)
					}
				}
			}

			// Data files per bucket, as a reader sees them.
			tbl, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
			if err != nil {
				t.Fatal(err)
			}
			bucket := iceberg.BucketTransform{NumBuckets: silver.DefaultBuckets}
			fileBuckets := map[int]map[int32]bool{}
			if _, err := tbl.ScanLive(e.ctx, nil, []string{"id"}, func(rec arrow.RecordBatch, file int, _ lake.Positions) error {
				ids := rec.Column(0).(*array.Int32)
				for i := 0; i < ids.Len(); i++ {
					b := bucket.Apply(iceberg.Optional[iceberg.Literal]{Valid: true, Val: iceberg.Int32Literal(ids.Value(i))})
					if fileBuckets[file] == nil {
						fileBuckets[file] = map[int32]bool{}
					}
					fileBuckets[file][int32(b.Val.(iceberg.Int32Literal))] = true
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			perBucket := map[int32]int{}
			for f, bs := range fileBuckets {
				if len(bs) != 1 {
					t.Errorf("data file %d holds rows of %d buckets", f, len(bs))
				}
				for b := range bs {
					perBucket[b]++
				}
			}
			// The keys of a chain of key changes are folded in one pass: the
			// pass of the chain's first key writes the others' rows into their
			// own buckets, one more file each for the two chains here.
			const chains = 2
			for b, n := range perBucket {
				if n > tc.perBucket+chains {
					t.Errorf("bucket %d has %d data files after a build of %d commits, want at most %d", b, n, res.Commits, tc.perBucket+chains)
				}
			}
			if n, most := len(fileBuckets), silver.DefaultBuckets*tc.perBucket+chains; n > most {
				t.Errorf("silver has %d data files after a build of %d commits, want at most %d", n, res.Commits, most)
			}
			t.Logf("%d commits, %d data files", res.Commits, len(fileBuckets))
			pyReadKeys(t, e.wh, silverIdent(ordersID), len(got), map[int]string{1002: "y", 1007: "z", 2: "w2", 5: "w5b", 601: "v601", 3: ""})
		})
	}
}

// pyReadKeys reads a silver table of ordersSchema with PyIceberg: all its
// rows (want of them), and each key of keys by a filter on id, which
// PyIceberg prunes by the files' bucket partition (a file whose partition
// value were wrong would be skipped); keys maps an id to its v ("": none).
func pyReadKeys(t *testing.T, wh string, ident []string, want int, keys map[int]string) {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		t.Log("TIDEMARK_PYTHON not set: skipping the PyIceberg check")
		return
	}
	const script = `
import json, os, sys
from pyiceberg.catalog.sql import SqlCatalog
wh = os.path.abspath(sys.argv[1])
cat = SqlCatalog("tidemark", uri="sqlite:///" + os.path.join(wh, "catalog.db"), warehouse="file://" + wh)
t = cat.load_table(tuple(json.loads(sys.argv[2])))
out = {"total": t.scan().to_arrow().num_rows, "keys": {}}
for k in json.loads(sys.argv[3]):
    out["keys"][str(k)] = [r["v"] for r in t.scan(row_filter="id == %d" % k).to_arrow().to_pylist()]
print(json.dumps(out))
`
	identJSON, _ := json.Marshal(ident)
	var ids []int
	for k := range keys {
		ids = append(ids, k)
	}
	idsJSON, _ := json.Marshal(ids)
	cmd := exec.Command(py, "-c", script, wh, string(identJSON), string(idsJSON))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyIceberg: %v\n%s", err, stderr.String())
	}
	var res struct {
		Total int                 `json:"total"`
		Keys  map[string][]string `json:"keys"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("PyIceberg: %v: %s", err, out)
	}
	if res.Total != want {
		t.Errorf("PyIceberg reads %d rows, want %d", res.Total, want)
	}
	for k, v := range keys {
		got := res.Keys[fmt.Sprint(k)]
		switch {
		case v == "" && len(got) != 0:
			t.Errorf("PyIceberg, id = %d: %v, want no row", k, got)
		case v != "" && (len(got) != 1 || got[0] != v):
			t.Errorf("PyIceberg, id = %d: %v, want [%s]", k, got, v)
		}
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}
