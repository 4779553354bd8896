package postgres_test

import (
	"os"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestThroughputSmoke prints how fast a snapshot and a stream drain into
// bronze on this machine. It asserts nothing about speed (machines are
// shared and noisy); the benchmark command measures ratios against
// pg_recvlogical and COPY. Run with TIDEMARK_THROUGHPUT=1.
func TestThroughputSmoke(t *testing.T) {
	if os.Getenv("TIDEMARK_THROUGHPUT") != "1" {
		t.Skip("set TIDEMARK_THROUGHPUT=1 to print snapshot and stream throughput")
	}
	pg := testenv.Shared(t)
	const n = 200000
	h := newHarness(t, pg, `CREATE TABLE tp (id bigint primary key, a int, b text, c numeric(12,2), d timestamptz);
		INSERT INTO tp SELECT g, g % 1000, md5(g::text), g * 0.01, now() FROM generate_series(1, 200000) g;`)
	opts := h.opts()
	opts.Snapshot.ChunkRows = 20000
	opts.CommitInterval = time.Second
	opts.CommitBytes = 64 << 20
	start := time.Now()
	r := h.start(opts)
	h.waitCaughtUp(r)
	snap := time.Since(start)
	start = time.Now()
	h.exec(`INSERT INTO tp SELECT g, g % 1000, md5(g::text), g * 0.01, now() FROM generate_series(200001, 400000) g`)
	ins := time.Since(start)
	start = time.Now()
	h.waitCaughtUp(r)
	stream := time.Since(start)
	r.stop()
	t.Logf("snapshot: %d rows in %s = %.0f rows/s", n, snap.Round(time.Millisecond), float64(n)/snap.Seconds())
	t.Logf("stream: %d inserts (source took %s) drained in %s after commit = %.0f changes/s", n, ins.Round(time.Millisecond), stream.Round(time.Millisecond), float64(n)/(stream+ins).Seconds())
}
