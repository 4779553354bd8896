package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// failingFlush is a bronze writer whose Flush fails with err, without
// writing anything.
type failingFlush struct {
	*bronze.Writer
	err error
}

func (f *failingFlush) Flush(context.Context, pipeline.Checkpoint) error { return f.err }

// A first start whose first checkpoint cannot be recorded for good drops
// the slot and the publication it created (a slot nothing refers to only
// retains WAL); when the failure is transient (the outcome may be unknown)
// the slot is kept for the next session, which reuses it.
func TestFailedFirstStartDropsWhatItCreated(t *testing.T) {
	pg := testenv.Shared(t)
	for _, tc := range []struct {
		name     string
		err      error
		wantKept bool
	}{
		{"fatal", fault.With(fault.ErrCorruptState, "checkpoint cannot be written", nil), false},
		{"transient", fault.MarkTransient(errors.New("catalog busy")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, pg, `CREATE TABLE k (id int primary key)`)
			ctx := context.Background()
			cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			opts := h.opts()
			w, err := bronze.NewWriter(ctx, cat, h.source, opts.Slot, h.log)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			d, err := postgres.NewDialer(h.url, func(string) string { return "redacted" })
			if err != nil {
				t.Fatal(err)
			}
			c := postgres.New(d, &failingFlush{Writer: w, err: tc.err}, opts, h.log)
			defer c.Close()
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err = c.Run(rctx)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Run: %v, want %v", err, tc.err)
			}
			var slots, pubs int
			h.query(func(conn *pgx.Conn) error {
				return conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1),
					(SELECT count(*) FROM pg_publication WHERE pubname = $2)`, opts.Slot, opts.Publication).Scan(&slots, &pubs)
			})
			if got := fmt.Sprint(slots == 1, pubs == 1); got != fmt.Sprint(tc.wantKept, tc.wantKept) {
				t.Errorf("slot exists %v, publication exists %v; want both %v", slots == 1, pubs == 1, tc.wantKept)
			}
			if tc.wantKept {
				// The next session reuses them and runs.
				r := h.start(opts)
				h.waitCaughtUp(r)
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
