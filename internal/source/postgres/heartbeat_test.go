package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// RELIABILITY row 10: the published table is idle while an unpublished one
// is busy. PostgreSQL 15 sends nothing for transactions that touch no
// published table, so without heartbeats the slot would never be confirmed
// past the last published change and would retain all WAL written since.
// With heartbeats (transactional logical messages, which pass through the
// slot) restart_lsn and confirmed_flush_lsn keep advancing and the retained
// WAL stays bounded. The control run without heartbeats shows the
// heartbeats are what moves the slot.
func TestHeartbeatsAdvanceTheSlotOnUnpublishedWrites(t *testing.T) {
	pg := testenv.Shared(t)
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
	}{
		{"heartbeats", 100 * time.Millisecond},
		{"control without heartbeats", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, pg, `CREATE TABLE published (id int primary key);
				CREATE TABLE busy (id bigserial primary key, pad text);`)
			opts := h.opts()
			opts.Tables = []change.TableID{{Schema: "public", Name: "published"}}
			opts.HeartbeatInterval = tc.heartbeat
			r := h.start(opts)
			deadline := time.Now().Add(60 * time.Second)
			for !h.snapshotsDone() {
				if time.Now().After(deadline) {
					t.Fatal("snapshot of the published table not done within 60s")
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Second) // the last watermark's flush
			_, confirmed0 := h.slotLSNs()
			begin := h.walLSN()

			// ~8 MB of WAL on the unpublished table, with checkpoints so
			// that PostgreSQL logs the running-transactions records that
			// let restart_lsn move.
			for i := 0; i < 16; i++ {
				h.exec(`INSERT INTO busy (pad) SELECT repeat('x', 400) FROM generate_series(1, 1000)`)
				h.exec(`CHECKPOINT`)
			}
			end := h.walLSN()
			written := end - begin

			if tc.heartbeat == 0 {
				time.Sleep(3 * time.Second)
				restart, confirmed := h.slotLSNs()
				if confirmed > begin {
					t.Errorf("without heartbeats the slot was confirmed to %s, past %s where the unpublished writes began: the control does not control",
						postgres.FormatLSN(confirmed), postgres.FormatLSN(begin))
				}
				t.Logf("control: confirmed_flush_lsn stayed at %s (was %s), restart_lsn %s; %d bytes of WAL retained",
					postgres.FormatLSN(confirmed), postgres.FormatLSN(confirmed0), postgres.FormatLSN(restart), end-restart)
				r.stop()
				return
			}

			deadline = time.Now().Add(90 * time.Second)
			for {
				restart, confirmed := h.slotLSNs()
				retained := h.walLSN() - restart
				if confirmed >= end && restart > begin && retained < written/2 {
					t.Logf("confirmed_flush_lsn %s -> %s, restart_lsn now %s; %d bytes written, %d retained",
						postgres.FormatLSN(confirmed0), postgres.FormatLSN(confirmed), postgres.FormatLSN(restart), written, retained)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("slot did not advance over unpublished writes: confirmed_flush_lsn %s (writes ended at %s), restart_lsn %s (writes began at %s), %d of %d bytes retained",
						postgres.FormatLSN(confirmed), postgres.FormatLSN(end), postgres.FormatLSN(restart), postgres.FormatLSN(begin), retained, written)
				}
				h.exec(`CHECKPOINT`)
				time.Sleep(500 * time.Millisecond)
			}
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			// Heartbeats never reach a table.
			if n := len(h.rows("bronze", "src", "_messages")); n != 0 {
				t.Errorf("_messages holds %d rows; heartbeats must not be recorded", n)
			}
		})
	}
}

// slotLSNs returns the test slot's restart_lsn and confirmed_flush_lsn.
func (h *harness) slotLSNs() (restart, confirmed uint64) {
	h.t.Helper()
	var rs, cs string
	h.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), `SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'tidemark_test'`).Scan(&rs, &cs)
	})
	var err error
	if restart, err = postgres.ParseLSN(rs); err != nil {
		h.t.Fatal(err)
	}
	if confirmed, err = postgres.ParseLSN(cs); err != nil {
		h.t.Fatal(err)
	}
	return restart, confirmed
}
