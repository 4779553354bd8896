package silver_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

// BenchmarkFirstBuild measures the first build of a silver table from a
// snapshot-only bronze table (every key one 'r' row, as scenario 2 of
// docs/benchmarks.md builds it) and logs rows/s. Rows:
// TIDEMARK_SILVER_BUILD_ROWS (default 200000); row payload bytes:
// TIDEMARK_SILVER_BUILD_PAYLOAD (default 84, pgbench_accounts' filler);
// Options.MaxBytes: TIDEMARK_SILVER_BUILD_MAX_BYTES (default 16 MiB, what
// `tidemark run` gives silver of the default memory_budget: a build of
// more than that runs in passes).
func BenchmarkFirstBuild(b *testing.B) {
	rows, payload := 200_000, 84
	maxBytes := int64(16 << 20)
	if s := os.Getenv("TIDEMARK_SILVER_BUILD_MAX_BYTES"); s != "" {
		maxBytes, _ = strconv.ParseInt(s, 10, 64)
	}
	if s := os.Getenv("TIDEMARK_SILVER_BUILD_ROWS"); s != "" {
		rows, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("TIDEMARK_SILVER_BUILD_PAYLOAD"); s != "" {
		payload, _ = strconv.Atoi(s)
	}
	for b.Loop() {
		b.StopTimer()
		e := newLakeEnv(b)
		s := ordersSchema()
		e.open(ordersID, s)
		pad := strings.Repeat("x", payload)
		const batch = 50_000
		for start := 1; start <= rows; start += batch {
			var cs []*change.Change
			e.lsn += 100
			for id := start; id < start+batch && id <= rows; id++ {
				cs = append(cs, &change.Change{Table: ordersID, Op: change.OpRead, Schema: s,
					Values: []any{int32(id), fmt.Sprint("v", id), pad},
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
		m := e.merger(silver.Options{MaxBytes: maxBytes})
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		var res silver.Result
		// Labelled (inherited by the goroutines it starts): a -cpuprofile
		// shows the build alone with -tagfocus=phase=build.
		pprof.Do(e.ctx, pprof.Labels("phase", "build"), func(context.Context) { res = e.merge(m, ordersID) })
		d, cpu := time.Since(start), cpuTime()-cpu0
		if !res.Published || res.Upserts != int64(rows) {
			b.Fatalf("build: %+v", res)
		}
		b.Logf("first build of %d rows (%d B payload): %s, %.0f rows/s, CPU %.2f µs/row, %d commits", rows, payload, d.Round(time.Millisecond),
			float64(rows)/d.Seconds(), float64(cpu.Microseconds())/float64(rows), res.Commits)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
