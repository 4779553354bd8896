package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// RELIABILITY row 3: a lake commit succeeds but its answer is lost.
func TestCommitOutcomeUnknown(t *testing.T) {
	pg := testenv.Shared(t)

	// Every bronze append lands and then reports an error: the lake finds
	// its own snapshot (by id) instead of committing again.
	t.Run("every append's answer lost", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE t (id int primary key, v text);
			INSERT INTO t SELECT g, 'v' FROM generate_series(1, 300) g;`)
		if err := failpoint.Enable("lake-append-after-commit=error"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { failpoint.Enable("") })
		r := h.start(h.opts())
		for i := 0; i < 5; i++ {
			h.exec(fmt.Sprintf(`UPDATE t SET v = 'round %d' WHERE id %% 5 = %d; INSERT INTO t VALUES (%d, 'new')`, i, i, 1000+i))
			h.waitCaughtUp(r) // one commit per round at least
		}
		if err := r.stop(); err != nil {
			t.Fatalf("a lost commit answer ended the session: %v", err)
		}
		lost := failpoint.Hits("lake-append-after-commit")
		failpoint.Enable("")
		if lost < 5 {
			t.Fatalf("only %d commit answers were lost; the test did not test", lost)
		}
		t.Logf("%d commit answers lost", lost)
		h.checkExactlyOnce("t", `SELECT id::text, v FROM t`, "v")
	})

	// The flush committed every table and the checkpoint, then failed on
	// the way back (as if the catalog's reload failed too): the session
	// ends without acknowledging, and the next one must skip what the lake
	// already holds (bronze tidemark.cursor).
	t.Run("flush answer lost, next session dedupes", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE t (id int primary key, v text)`)
		var armed atomic.Bool
		wrap := func(w pipeline.Sink) pipeline.Sink { return &answerLost{Sink: w, armed: &armed} }
		r := h.startWith(h.opts(), wrap)
		h.waitCaughtUp(r)
		armed.Store(true)
		h.exec(`INSERT INTO t SELECT g, 'v' FROM generate_series(1, 100) g`)
		h.exec(`UPDATE t SET v = 'u' WHERE id <= 50`)
		var err error
		select {
		case err = <-r.done:
			r.done <- err
		case <-time.After(60 * time.Second):
			t.Fatal("the lost flush answer did not end the session")
		}
		if fault.ClassOf(err) != fault.Transient {
			t.Fatalf("session error %v: want a transient error (the pipeline retries)", err)
		}
		h.checkAckNotAheadOfLake()
		r2 := h.start(h.opts()) // the retry
		h.exec(`INSERT INTO t VALUES (500, 'after')`)
		h.waitCaughtUp(r2)
		if err := r2.stop(); err != nil {
			t.Fatal(err)
		}
		h.checkExactlyOnce("t", `SELECT id::text, v FROM t`, "v")
	})
}

// answerLost is a Writer whose first armed flush commits and then reports
// an error.
type answerLost struct {
	pipeline.Sink
	armed *atomic.Bool
}

func (w *answerLost) Flush(ctx context.Context, cp pipeline.Checkpoint) error {
	buffered := w.Buffered() > 0
	if err := w.Sink.Flush(ctx, cp); err != nil {
		return err
	}
	if buffered && w.armed.CompareAndSwap(true, false) {
		return fault.MarkTransient(errors.New("test: the flush committed, and its answer was lost"))
	}
	return nil
}

// RELIABILITY row 4: a second writer on the same table.
func TestSecondWriter(t *testing.T) {
	pg := testenv.Shared(t)
	ctx := context.Background()

	// `tidemark merge` racing the pipeline's merge of one silver table: the
	// merge that loses the race applies nothing and fails with the named,
	// transient commit_conflict; its retry converges, nothing twice.
	t.Run("silver merge loses a race", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE t (id int primary key, v text);
			INSERT INTO t SELECT g, 'v' FROM generate_series(1, 200) g;`)
		// Capture and merges take turns: the SQLite catalog answers
		// concurrent writers with SQLITE_BUSY, a transient error the run
		// loop retries but this harness does not.
		h.captureOnce()
		catA, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
		if err != nil {
			t.Fatal(err)
		}
		defer catA.Close()
		catB, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
		if err != nil {
			t.Fatal(err)
		}
		defer catB.Close()
		a := silver.NewMerger(catA, silver.Options{}, h.log)
		b := silver.NewMerger(catB, silver.Options{}, h.log)
		if _, err := a.MergeTable(ctx, "src", "public", "t"); err != nil {
			t.Fatal(err)
		}

		h.exec(`UPDATE t SET v = 'raced' WHERE id <= 100; DELETE FROM t WHERE id > 190`)
		h.captureOnce()
		var inHook atomic.Bool
		var raced atomic.Int32
		remove := failpoint.OnHit("lake-merge-before-commit", func() {
			if !inHook.CompareAndSwap(false, true) {
				return // the second writer's own commit
			}
			defer inHook.Store(false)
			if raced.Add(1) > 1 {
				return
			}
			if _, err := b.MergeTable(ctx, "src", "public", "t"); err != nil {
				t.Errorf("second writer: %v", err)
			}
		})
		_, err = a.MergeTable(ctx, "src", "public", "t")
		remove()
		t.Logf("merge that lost the race: %v", err)
		if !errors.Is(err, fault.ErrCommitConflict) || fault.ClassOf(err) != fault.Transient || fault.ExitCode(err) != fault.ExitTransient {
			t.Fatalf("err = %v (class %s), want commit_conflict (transient)", err, fault.ClassOf(err))
		}
		if !strings.Contains(err.Error(), "silver.src.public.t") {
			t.Errorf("the conflict does not name the table: %v", err)
		}
		// The retry finds the other writer's work and converges.
		if _, err := a.MergeTable(ctx, "src", "public", "t"); err != nil {
			t.Fatalf("retry after the conflict: %v", err)
		}
		h.checkSilver("t", `SELECT id::text, v FROM t`, "v")
	})

	// Another process appends to a bronze table between tidemark's write
	// and its commit: the append is redone on the new state (bounded
	// retries), both commits land, and tidemark's rows are there once.
	t.Run("second appender on a bronze table", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE t (id int primary key, v text)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		other, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		tbl, err := other.LoadTable(ctx, bronzeIdent("t"))
		if err != nil {
			t.Fatal(err)
		}
		var inHook atomic.Bool
		var mu sync.Mutex
		foreign := 0
		remove := failpoint.OnHit("lake-append-before-commit", func() {
			if !inHook.CompareAndSwap(false, true) {
				return
			}
			defer inHook.Store(false)
			mu.Lock()
			defer mu.Unlock()
			if foreign >= 3 {
				return
			}
			// An empty commit that keeps tidemark's summary keys, as a
			// careful foreign writer would.
			if err := tbl.Refresh(ctx); err != nil {
				t.Errorf("second writer: %v", err)
				return
			}
			props := map[string]string{}
			for k, v := range tbl.Summary() {
				if strings.HasPrefix(k, "tidemark.") {
					props[k] = v
				}
			}
			if err := tbl.Append(ctx, nil, props); err != nil {
				t.Errorf("second writer: %v", err)
				return
			}
			foreign++
		})
		for i := 0; i < 3; i++ {
			h.exec(fmt.Sprintf(`INSERT INTO t SELECT g, 'v' FROM generate_series(%d, %d) g`, i*100+1, i*100+100))
			h.waitCaughtUp(r)
		}
		remove()
		if err := r.stop(); err != nil {
			t.Fatalf("a racing appender stopped the pipeline: %v", err)
		}
		mu.Lock()
		n := foreign
		mu.Unlock()
		if n == 0 {
			t.Fatal("the second writer never committed; the test did not test")
		}
		h.checkExactlyOnce("t", `SELECT id::text, v FROM t`, "v")
	})
}

// captureOnce runs a capture session until it has caught up, and stops it.
func (h *harness) captureOnce() {
	h.t.Helper()
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		h.t.Fatal(err)
	}
}

// checkExactlyOnce checks that no bronze position appears twice and that
// the replay of the bronze table equals the source.
func (h *harness) checkExactlyOnce(table, sql, col string) {
	h.t.Helper()
	seen := map[string]int{}
	for _, r := range h.rows(bronzeIdent(table)...) {
		if r["cdc_op"] == "r" {
			continue // snapshot rows may be re-read by design (a chunk read again)
		}
		seen[fmt.Sprintf("%v:%v", r["cdc_source_lsn"], r["cdc_seq"])]++
	}
	for pos, n := range seen {
		if n > 1 {
			h.t.Errorf("%s: position %s appears %d times in bronze", table, pos, n)
		}
	}
	h.checkBronze(table, sql, col)
}

// checkSilver compares a silver table with the source.
func (h *harness) checkSilver(table, sql, col string) {
	h.t.Helper()
	got := map[string]string{}
	rows := h.rows(silver.Ident(h.source, "public", table)...)
	for _, r := range rows {
		k := fmt.Sprint(r["id"])
		if _, dup := got[k]; dup {
			h.t.Errorf("silver %s: key %s twice", table, k)
		}
		got[k] = fmt.Sprint(r[col])
	}
	want := h.sourceRows(sql)
	for k, w := range want {
		if got[k] != w {
			h.t.Errorf("silver %s key %s: source %q, silver %q", table, k, w, got[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			h.t.Errorf("silver %s key %s: not in the source", table, k)
		}
	}
}

// startWith is start with the bronze writer wrapped.
func (h *harness) startWith(opts postgres.Options, wrap func(pipeline.Sink) pipeline.Sink) *running {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	r := &running{cancel: cancel, done: make(chan error, 1), cat: cat}
	w, err := bronze.NewWriter(ctx, cat, h.source, opts.Slot, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	opts.OnProgress = func(cp pipeline.Checkpoint) {
		r.mu.Lock()
		r.acked = postgres.AckedLSN(cp)
		r.mu.Unlock()
	}
	d, err := postgres.NewDialer(h.url, func(string) string { return "redacted" })
	if err != nil {
		h.t.Fatal(err)
	}
	c := postgres.New(d, wrap(w), opts, h.log)
	go func() {
		err := c.Run(ctx)
		c.Close()
		w.Close()
		r.done <- err
	}()
	h.t.Cleanup(func() { r.stop() })
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		a := r.acked
		r.mu.Unlock()
		if a != 0 {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatal("capture did not start streaming within 30s")
	return r
}
