package bronze_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

var testSchema = &change.Schema{Key: []string{"id"}, Fields: []change.Field{
	{Name: "id", Type: iceberg.PrimitiveTypes.Int64},
	{Name: "v", Type: iceberg.PrimitiveTypes.String},
}}

// chunk builds snapshot rows for keys from..to, placed at lsn, and the
// progress the capture records with them (pipeline.PropSnapshot).
func chunk(id change.TableID, lsn uint64, from, to int64) ([]*change.Change, map[string]string) {
	var cs []*change.Change
	for k := from; k <= to; k++ {
		cs = append(cs, &change.Change{Table: id, Op: change.OpRead, Schema: testSchema,
			Pos: change.Position{LSN: lsn, Seq: k - from + 1}, Values: []any{k, "row " + strconv.FormatInt(k, 10)}})
	}
	st, _ := json.Marshal(map[string]any{"status": "running", "last_key": []string{strconv.FormatInt(to, 10)}, "rows": to})
	return cs, map[string]string{pipeline.PropSnapshot: string(st)}
}

// openWriter opens the lake at wh and a bronze writer on it, as a session
// starting does.
func openWriter(t testing.TB, wh string) (*lake.Catalog, *bronze.Writer) {
	t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	w, err := bronze.NewWriter(ctx, cat, "src", "slot", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cat.Close()
		t.Fatal(err)
	}
	return cat, w
}

// lastKey decodes the last_key of a snapshot progress property.
func lastKey(t *testing.T, prop string) int64 {
	t.Helper()
	var st struct {
		LastKey []string `json:"last_key"`
	}
	if err := json.Unmarshal([]byte(prop), &st); err != nil || len(st.LastKey) != 1 {
		t.Fatalf("snapshot progress %q: no single last_key (%v)", prop, err)
	}
	k, err := strconv.ParseInt(st.LastKey[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keys returns the sorted ids of a bronze table's rows.
func keys(rows []bronzetest.Row) []int64 {
	var out []int64
	for _, r := range rows {
		out = append(out, r["id"].(int64))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// TestBackgroundFlushRecordsOnlyItsOwnProgress: while a background flush
// commits, the stream goes on writing, including the next snapshot chunk of
// a table the flush has not committed yet. The flush must record the
// snapshot progress of the rows it holds, not that of the chunk that
// arrived meanwhile: a restart resumes the snapshot after the recorded
// last key, so progress ahead of the committed rows loses every row in
// between (the kill -9 loss of background commits in the crash e2e test).
func TestBackgroundFlushRecordsOnlyItsOwnProgress(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, w := openWriter(t, wh)
	defer cat.Close()
	defer w.Close()
	a := change.TableID{Schema: "public", Name: "a"}
	b := change.TableID{Schema: "public", Name: "b"}
	for _, id := range []change.TableID{a, b} {
		if _, err := w.OpenTable(ctx, id, testSchema); err != nil {
			t.Fatal(err)
		}
	}
	// Flush 1 holds a stream change of a and the first chunk of b.
	if err := w.Write(ctx, &change.Change{Table: a, Op: change.OpInsert, Schema: testSchema,
		Pos: change.Position{LSN: 100, Seq: 1}, Values: []any{int64(1), "a1"}}); err != nil {
		t.Fatal(err)
	}
	cs, props := chunk(b, 90, 1, 10)
	if err := w.WriteBatch(ctx, b, cs, props); err != nil {
		t.Fatal(err)
	}

	// Hold the flush at its first table commit (a's; b's comes next) until
	// the second chunk of b is written.
	var hits atomic.Int64
	reached, release := make(chan struct{}), make(chan struct{})
	defer failpoint.OnHit("lake-append-before-commit", func() {
		if hits.Add(1) == 1 {
			close(reached)
			<-release
		}
	})()
	cp1 := pipeline.Checkpoint{Resume: strconv.FormatUint(101, 10), Pos: 100, Watermark: time.Now()}
	if err := w.StartFlush(ctx, cp1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(2 * time.Minute):
		t.Fatal("the background flush never reached its first commit")
	}
	cs, props = chunk(b, 110, 11, 20)
	err := w.WriteBatch(ctx, b, cs, props)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.FinishFlush()
	if err != nil {
		t.Fatal(err)
	}
	if got.Resume != cp1.Resume {
		t.Fatalf("FinishFlush checkpoint resumes at %q, want %q", got.Resume, cp1.Resume)
	}

	// kill -9 now: a new session reads what the lake holds.
	cat2, w2 := openWriter(t, wh)
	st, err := w2.OpenTable(ctx, b, testSchema)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := bronzetest.ReadTable(ctx, mustLoad(t, cat2, bronze.Ident("src", b)))
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	cat2.Close()
	ks := keys(rows)
	resume := lastKey(t, st.Props[pipeline.PropSnapshot])
	if len(ks) == 0 || ks[len(ks)-1] != resume {
		t.Fatalf("after the first flush, bronze %s holds keys %v but records snapshot progress up to key %d: "+
			"a restart resumes after key %d and never reads the keys in between", b, ks, resume, resume)
	}

	// The chunk written during the flush is committed by the next one.
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(121, 10), Pos: 120, Watermark: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ks = keys(bronzetest.Read(t, wh, bronze.Ident("src", b)...))
	if len(ks) != 20 || ks[0] != 1 || ks[19] != 20 {
		t.Fatalf("after the second flush, bronze %s holds keys %v, want 1..20", b, ks)
	}
	tbl := mustLoad(t, cat, bronze.Ident("src", b))
	if k := lastKey(t, tbl.Summary()[pipeline.PropSnapshot]); k != 20 {
		t.Fatalf("after the second flush, snapshot progress is key %d, want 20", k)
	}
}

func mustLoad(t *testing.T, cat *lake.Catalog, ident []string) *lake.Table {
	t.Helper()
	tbl, err := cat.LoadTable(context.Background(), ident)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestPositionCatchesUpAfterAFlushInsideATransaction: a flush may come due
// in the middle of a transaction, so a table commits rows of a transaction
// its recorded tidemark.position does not cover yet. If the table then
// receives nothing more, the next flush past that transaction's commit must
// still record the position for it: silver merges a bronze range only once
// no row in it is above the position, so without it the table's last
// transaction would never reach silver (it waited forever in CI when a
// transaction's other rows went to the dead-letter table).
func TestPositionCatchesUpAfterAFlushInsideATransaction(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, w := openWriter(t, wh)
	defer cat.Close()
	defer w.Close()
	a := change.TableID{Schema: "public", Name: "a"}
	if _, err := w.OpenTable(ctx, a, testSchema); err != nil {
		t.Fatal(err)
	}
	// Row 2 of the transaction committing at LSN 200; the last complete
	// transaction is at 100 when the flush comes due.
	if err := w.Write(ctx, &change.Change{Table: a, Op: change.OpInsert, Schema: testSchema,
		Pos: change.Position{LSN: 200, Seq: 2}, Values: []any{int64(1), "a1"}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(101, 10), Pos: 100, Watermark: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The rest of the transaction touches other tables only; the next
	// flush is past its commit.
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(201, 10), Pos: 200, Watermark: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(ctx, bronze.Ident("src", a))
	if err != nil {
		t.Fatal(err)
	}
	pos, err := strconv.ParseUint(tbl.Summary()[bronze.PropPosition], 10, 64)
	if err != nil || pos < 200 {
		t.Fatalf("bronze table a records tidemark.position %q after a flush at 200, want >= 200 (it holds a row of the transaction at 200): %v",
			tbl.Summary()[bronze.PropPosition], err)
	}
	// A further flush with nothing new commits nothing more.
	n := tbl.SnapshotCount()
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(301, 10), Pos: 300, Watermark: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if tbl, err = cat.LoadTable(ctx, bronze.Ident("src", a)); err != nil {
		t.Fatal(err)
	}
	if tbl.SnapshotCount() != n {
		t.Errorf("a flush with nothing new for table a added %d snapshots to it", tbl.SnapshotCount()-n)
	}
}
