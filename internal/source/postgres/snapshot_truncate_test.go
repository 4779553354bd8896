package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/testenv"
)

// rereadCounter is a slog.Handler that counts the snapshot's "reading the
// chunk again" records (a truncate inside a chunk's window) and passes
// every record on.
type rereadCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (c rereadCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c rereadCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "table truncated while a snapshot chunk was read: reading the chunk again" {
		c.n.Add(1)
	}
	if !c.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return c.Handler.Handle(ctx, r)
}

func (c rereadCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return rereadCounter{c.Handler.WithAttrs(as), c.n}
}

func (c rereadCounter) WithGroup(g string) slog.Handler {
	return rereadCounter{c.Handler.WithGroup(g), c.n}
}

// RELIABILITY row 15 during the snapshot: TRUNCATE (and a refill) lands
// inside the windows of snapshot chunks, which are read one ahead of the
// stream's reconciliation, over and over: the chunks whose window saw a
// truncate are read again (dropping the chunk read after them), the
// snapshot finishes, and the bronze change log replays to exactly the
// source table. (After a truncate every row of the table reaches bronze
// through the stream, so this checks the protocol runs through the
// re-reads, not which chunk rows survive them.)
func TestTruncatesDuringTheSnapshot(t *testing.T) {
	pg := testenv.Shared(t)
	const rows = 1000 // 100 chunks: the truncates run at the 5th and 10th boundaries
	h := newHarness(t, pg, fmt.Sprintf(`CREATE TABLE d (id int primary key, v text);
		INSERT INTO d SELECT g, 'v' || g FROM generate_series(1, %d) g;`, rows))
	var rereads atomic.Int64
	h.log = slog.New(rereadCounter{h.log.Handler(), &rereads})
	opts := h.opts()
	opts.Snapshot.ChunkRows = 10
	// Between chunks (failpoint snapshot-between-chunks: a chunk written,
	// the next one read, its window open), every 5th boundary truncates
	// and refills the table (with new values), with a few updates, until
	// two chunks were read again: each truncate lands inside a window.
	ctx := context.Background()
	var hits, truncates atomic.Int64
	errs := make(chan error, 1)
	defer failpoint.OnHit("snapshot-between-chunks", func() {
		n := hits.Add(1)
		if n%5 != 0 || rereads.Load() >= 2 || truncates.Load() >= 20 {
			return
		}
		i := truncates.Add(1)
		sql := fmt.Sprintf(`BEGIN; TRUNCATE d; INSERT INTO d SELECT g, 'r%d-' || g FROM generate_series(1, %d) g; COMMIT;
			UPDATE d SET v = v || '+' WHERE id %% 97 = %d`, i, rows, i%97)
		c, err := pgx.Connect(ctx, h.url)
		if err == nil {
			_, err = c.Exec(ctx, sql)
			c.Close(context.Background())
		}
		if err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	})()
	r := h.start(opts)
	h.waitCaughtUp(r)
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d truncates, %d chunks read again", truncates.Load(), rereads.Load())
	if rereads.Load() < 2 {
		t.Fatalf("%d truncates inside chunk windows, %d chunks read again, want 2", truncates.Load(), rereads.Load())
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := replay(t, h.rows(bronzeIdent("d")...), "id")
	want := h.sourceRows(`SELECT id::text, v FROM d`)
	bad := 0
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			bad++
			if bad < 10 {
				t.Errorf("key %s: in the source, missing from bronze", k)
			}
		case fmt.Sprint(g["v"]) != w:
			bad++
			if bad < 10 {
				t.Errorf("key %s: source %q, bronze replay %q", k, w, g["v"])
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad++
			if bad < 10 {
				t.Errorf("key %s: in bronze, not in the source", k)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d keys differ of %d", bad, len(want))
	}
}
