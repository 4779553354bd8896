package bronze_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// recorder is a bronze.Observer that keeps what it is told.
type recorder struct {
	asked   []change.TableID
	commits map[change.TableID][]bronze.Commit
	dead    map[change.TableID]int64
}

type tableRecorder struct {
	r  *recorder
	id change.TableID
}

func (r *recorder) Table(id change.TableID) bronze.TableObserver {
	r.asked = append(r.asked, id)
	return &tableRecorder{r, id}
}

func (t *tableRecorder) Committed(c bronze.Commit) { t.r.commits[t.id] = append(t.r.commits[t.id], c) }
func (t *tableRecorder) DeadLettered(n int64)      { t.r.dead[t.id] += n }

// TestObserverCountsWhatIsDurable: the observer hears of each commit after
// the flush is durable, with its rows by operation and the data files'
// size; a transaction whose rows straddle a flush is reported once, by the
// flush whose checkpoint covers its commit; snapshot rows are reads and no
// transaction; replayed rows are not counted again; dead letters are
// counted for the table they came from; each table's observer is asked
// for once.
func TestObserverCountsWhatIsDurable(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	id := change.TableID{Schema: "public", Name: "t"}
	other := change.TableID{Schema: "public", Name: "other"}
	rec := &recorder{commits: map[change.TableID][]bronze.Commit{}, dead: map[change.TableID]int64{}}
	cat, w := openWriter(t, wh)
	w.Observe(rec)
	if _, err := w.OpenTable(ctx, id, testSchema); err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Second)
	row := func(op change.Op, lsn uint64, seq, k int64, at time.Time) *change.Change {
		return &change.Change{Table: id, Op: op, Schema: testSchema, Pos: change.Position{LSN: lsn, Seq: seq},
			Values: []any{k, "v"}, CommitTime: at, TxID: int64(lsn)}
	}
	cs, props := chunk(id, 50, 1, 3)
	if err := w.WriteBatch(ctx, id, cs, props); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*change.Change{row(change.OpInsert, 100, 1, 10, t1), row(change.OpUpdate, 100, 2, 1, t1), row(change.OpDelete, 200, 1, 2, t2)} {
		if err := w.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.DeadLetter(ctx, change.DeadLetter{Table: other, Op: change.OpInsert, Pos: change.Position{LSN: 200, Seq: 2}, CommitTime: t2, Raw: "{}", Error: "bad"}); err != nil {
		t.Fatal(err)
	}
	// The flush lands inside transaction 200: only 100 is complete.
	if err := w.Flush(ctx, postgres.NewCheckpoint(150, 100, t1, 0, "slot")); err != nil {
		t.Fatal(err)
	}
	got := rec.commits[id]
	if len(got) != 1 {
		t.Fatalf("after the first flush: %d commits reported, want 1", len(got))
	}
	c := got[0]
	if c.Rows != 6 || c.Ops != [bronze.NumOps]int64{bronze.OpIndexRead: 3, bronze.OpIndexInsert: 1, bronze.OpIndexUpdate: 1, bronze.OpIndexDelete: 1} {
		t.Errorf("first commit: rows %d, ops %v; want 6: 3 reads, an insert, an update, a delete", c.Rows, c.Ops)
	}
	if c.Chunks != 1 {
		t.Errorf("first commit: %d snapshot chunks, want 1", c.Chunks)
	}
	if !slices.Equal(c.TxCommitMicros, []int64{t1.UnixMicro()}) {
		t.Errorf("first commit completed transactions at %v, want only %v (200 is not complete)", c.TxCommitMicros, t1.UnixMicro())
	}
	if c.FileBytes <= 0 {
		t.Errorf("first commit: file bytes %d", c.FileBytes)
	}
	if c.Props[pipeline.PropSnapshot] == "" {
		t.Errorf("first commit: no snapshot progress in %v", c.Props)
	}
	if rec.dead[other] != 1 {
		t.Errorf("dead letters of %s = %d, want 1", other, rec.dead[other])
	}
	// The rest of 200, then its commit.
	if err := w.Write(ctx, row(change.OpInsert, 200, 3, 11, t2)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, postgres.NewCheckpoint(250, 200, t2, 0, "slot")); err != nil {
		t.Fatal(err)
	}
	got = rec.commits[id]
	if len(got) != 2 || got[1].Rows != 1 || !slices.Equal(got[1].TxCommitMicros, []int64{t2.UnixMicro()}) {
		t.Fatalf("second flush: commits %+v, want one row and transaction 200", got)
	}
	w.Close()
	// A new session replays from the checkpoint: rows at or below the
	// cursor are dropped, and neither counted nor observed again.
	w2, err := bronze.NewWriter(ctx, cat, "src", "slot", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	defer w2.Close()
	w2.Observe(rec)
	if _, err := w2.OpenTable(ctx, id, testSchema); err != nil {
		t.Fatal(err)
	}
	if err := w2.Write(ctx, row(change.OpInsert, 200, 3, 11, t2)); err != nil {
		t.Fatal(err)
	}
	if err := w2.Flush(ctx, postgres.NewCheckpoint(250, 200, t2, 0, "slot")); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.commits[id]); n != 2 {
		t.Errorf("a replayed row was reported: %d commits, want 2", n)
	}
	if want := []change.TableID{id, other, id}; !slices.Equal(rec.asked, want) {
		t.Errorf("observers asked for %v, want %v (once per table per writer)", rec.asked, want)
	}
}
