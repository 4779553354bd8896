package silver_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

// BenchmarkMergeCost measures a merge of 10k changes into silver tables of
// growing size and prints the time against the smallest (the issue's
// target: the cost grows with the changes, not the table). Sizes:
// TIDEMARK_SILVER_BENCH_ROWS (comma-free list via repeated runs), default
// 100000 and 400000.
func BenchmarkMergeCost(b *testing.B) {
	sizes := []int{100_000, 400_000}
	if s := os.Getenv("TIDEMARK_SILVER_BENCH_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		sizes = []int{n / 10, n}
	}
	var base time.Duration
	for _, n := range sizes {
		d := mergeCost(b, n, 10_000)
		if base == 0 {
			base = d
		}
		b.Logf("table of %d rows: merge of 10000 changes took %s (%.2fx the smallest)", n, d.Round(time.Millisecond), float64(d)/float64(base))
	}
}

func mergeCost(b *testing.B, rows, changes int) time.Duration {
	e := newLakeEnv(b)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	const batch = 50_000
	for start := 1; start <= rows; start += batch {
		var cs []*change.Change
		e.lsn += 100
		for id := start; id < start+batch && id <= rows; id++ {
			cs = append(cs, &change.Change{Table: ordersID, Op: change.OpRead, Schema: s,
				Values: []any{int32(id), fmt.Sprint("v", id), "payload-payload-payload"},
				Pos:    change.Position{LSN: e.lsn, Seq: int64(id)}, CommitTime: time.Unix(int64(e.lsn), 0)})
		}
		props := snapRunning
		if start+batch > rows {
			props = snapDone
		}
		if err := e.w.WriteBatch(e.ctx, ordersID, cs, props); err != nil {
			b.Fatal(err)
		}
		e.flushAt(e.lsn)
	}
	e.merge(m, ordersID)
	// 10k updates of random-ish keys spread over the table.
	e.lsn += 100
	for i := 0; i < changes; i++ {
		id := int32((i*7919)%rows + 1)
		c := &change.Change{Table: ordersID, Op: change.OpUpdate, Schema: s, Values: []any{id, "updated", nil},
			Unchanged: []string{"big"}, Pos: change.Position{LSN: e.lsn, Seq: int64(i + 1)}, CommitTime: time.Unix(int64(e.lsn), 0)}
		if err := e.w.Write(e.ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	e.flushAt(e.lsn)
	start := time.Now()
	res := e.merge(m, ordersID)
	d := time.Since(start)
	if res.Upserts != int64(changes) {
		b.Fatalf("merge: %+v", res)
	}
	if res.Compactions > 0 {
		b.Logf("table of %d rows: the merge compacted the table after its step (footprint.go)", rows)
	}
	return d
}
