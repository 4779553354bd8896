package postgres_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestLargeRowsWaitForTheFlushInFlight: a row of large values (at least
// commit_bytes/4), snapshotted or streamed, reaches the writer only once the
// commit in flight has finished, so that the two do not hold their copies
// of large values at the same time (memory_budget); the rows all arrive.
func TestLargeRowsWaitForTheFlushInFlight(t *testing.T) {
	pg := testenv.Shared(t)
	const valueMiB = 2
	value := "repeat(md5(g::text), " + strconv.Itoa(valueMiB<<20/32) + ")"
	h := newHarness(t, pg, `CREATE TABLE big (id int primary key, v text);
		ALTER TABLE big ALTER COLUMN v SET STORAGE EXTERNAL;
		INSERT INTO big SELECT g, `+value+` FROM generate_series(1, 6) g;`)
	opts := h.opts()
	opts.CommitBytes = 4 << 20 // two rows fill a commit; a row of 1 MiB or more is large
	var ww *watchWriter
	r := h.startWith(opts, func(w pipeline.Sink) pipeline.Sink {
		ww = &watchWriter{Writer: w.(*bronze.Writer)}
		return ww
	})
	h.exec(`INSERT INTO big SELECT g, ` + value + ` FROM generate_series(11, 16) g`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(replay(t, h.rows(bronzeIdent("big")...), "id")); n != 12 {
		t.Fatalf("bronze replays to %d rows, want 12", n)
	}
	if n := ww.flushes.Load(); n < 4 {
		t.Fatalf("only %d background flushes: the test did not test", n)
	}
	if n := ww.large.Load(); n < 12 {
		t.Fatalf("only %d large rows written: the test did not test", n)
	}
	if n := ww.overlapped.Load(); n > 0 {
		t.Errorf("%d large rows were written while a flush was in flight", n)
	}
}

// watchWriter counts the large rows written while a background flush runs.
type watchWriter struct {
	*bronze.Writer
	flushes, large, overlapped atomic.Int64
}

func (w *watchWriter) inFlight() bool {
	done := w.Writer.FlushDone()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (w *watchWriter) note(c *change.Change) {
	for _, v := range c.Values {
		if s, ok := v.(string); ok && len(s) >= 1<<20 {
			w.large.Add(1)
			if w.inFlight() {
				w.overlapped.Add(1)
			}
			return
		}
	}
}

func (w *watchWriter) Write(ctx context.Context, c *change.Change) error {
	w.note(c)
	return w.Writer.Write(ctx, c)
}

func (w *watchWriter) WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	for _, c := range cs {
		w.note(c)
	}
	return w.Writer.WriteBatch(ctx, id, cs, props)
}

// WriteChunk counts the large rows of a snapshot chunk decoded straight
// into Arrow (the stream's path for a bronze writer).
func (w *watchWriter) WriteChunk(ctx context.Context, c *change.Chunk, props map[string]string) error {
	for i := 0; i < c.Rows; i++ {
		for _, col := range c.Columns {
			if s, ok := col.(*array.String); ok && s.IsValid(i) && len(s.Value(i)) >= 1<<20 {
				w.large.Add(1)
				if w.inFlight() {
					w.overlapped.Add(1)
				}
				break
			}
		}
	}
	return w.Writer.WriteChunk(ctx, c, props)
}

func (w *watchWriter) StartFlush(ctx context.Context, cp pipeline.Checkpoint) error {
	w.flushes.Add(1)
	return w.Writer.StartFlush(ctx, cp)
}
