package silver_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

// BenchmarkBacklogOfCommits merges a backlog of 500 bronze commits and, on
// a second table, the same changes in one bronze commit, and prints the
// time and peak heap of the first against the second (issue 22: a backlog
// is merged in time that follows its changes, not its commits; the target
// is a ratio of at most 1.5). The changes are updates that leave a TOAST
// column unchanged, of keys spread over a silver table of as many rows.
// TIDEMARK_SILVER_BENCH_BACKLOG sets the changes (default 100000; the
// issue's size is 1000000), TIDEMARK_SILVER_BENCH_COMMITS the commits.
//
//	go test -run '^$' -bench BacklogOfCommits -benchtime 1x ./internal/silver/
func BenchmarkBacklogOfCommits(b *testing.B) {
	changes, commits := 100_000, 500
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_SILVER_BENCH_BACKLOG")); err == nil && n > 0 {
		changes = n
	}
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_SILVER_BENCH_COMMITS")); err == nil && n > 0 {
		commits = n
	}
	many, manyHeap, manyRes := backlogCost(b, changes, commits)
	one, oneHeap, oneRes := backlogCost(b, changes, 1)
	b.Logf("%d changes in %d bronze commits: merged in %s, %d silver commits, peak heap %d MiB", changes, commits,
		many.Round(time.Millisecond), manyRes.Commits, manyHeap>>20)
	b.Logf("%d changes in 1 bronze commit: merged in %s, %d silver commits, peak heap %d MiB", changes,
		one.Round(time.Millisecond), oneRes.Commits, oneHeap>>20)
	b.Logf("ratio: time %.2f, peak heap %.2f (target: at most 1.5)", float64(many)/float64(one), float64(manyHeap)/float64(max(oneHeap, 1)))
}

// backlogCost builds a silver table of changes rows, writes changes
// updates in commits bronze commits, and merges them with the defaults
// of tidemark run's share of a 256 MiB budget; it returns the merge's time
// and the peak heap in use seen while it ran.
func backlogCost(b *testing.B, changes, commits int) (time.Duration, uint64, silver.Result) {
	e := newLakeEnv(b)
	s := ordersSchema()
	e.open(ordersID, s)
	rows := changes
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
	m := e.merger(silver.Options{MaxBytes: (256 << 20) / 16})
	e.merge(m, ordersID)
	per := (changes + commits - 1) / commits
	for i := 0; i < changes; {
		e.lsn += 100
		for j := 0; j < per && i < changes; j, i = j+1, i+1 {
			id := int32((i*7919)%rows + 1)
			c := &change.Change{Table: ordersID, Op: change.OpUpdate, Schema: s, Values: []any{id, "updated", nil},
				Unchanged: []string{"big"}, Pos: change.Position{LSN: e.lsn, Seq: int64(j + 1)}, CommitTime: time.Unix(int64(e.lsn), 0)}
			if err := e.w.Write(e.ctx, c); err != nil {
				b.Fatal(err)
			}
		}
		e.flushAt(e.lsn)
	}
	runtime.GC()
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var ms runtime.MemStats
		var p uint64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			p = max(p, ms.HeapInuse)
			select {
			case <-stop:
				peak <- p
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	res := e.merge(m, ordersID)
	d := time.Since(start)
	close(stop)
	if res.Changes != int64(changes) {
		b.Fatalf("merge: %+v, want %d changes", res, changes)
	}
	return d, <-peak, res
}
