package silver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

// BenchmarkBacklogOfCommits merges a backlog of 500 bronze commits and, on
// a second table, the same changes in one bronze commit (one source
// transaction), and prints the time and peak heap of the first against the
// second (issue 22: a backlog is merged in time that follows its changes,
// not its commits; the target is a ratio of at most 1.5). The one
// transaction is larger than a merge step: it is merged in parts committed
// once (parts.go), and its peak heap is printed against the budget the
// merge is given (its MaxBytes is tidemark run's share of 256 MiB). The changes are updates that leave a TOAST
// column unchanged, of keys spread over a silver table of as many rows.
// The pair is measured TIDEMARK_SILVER_BENCH_REPS times (default 3), in
// alternating order, each case in a lake of its own; it prints the medians
// and the median of the per-repetition ratios. The heap is the peak heap in
// use while the merge runs, above what was in use when it started (the
// lake's and the bronze writer's state: the merge's own memory).
// TIDEMARK_SILVER_BENCH_BACKLOG sets the changes (default 100000; the
// issue's size is 1000000), TIDEMARK_SILVER_BENCH_COMMITS the commits;
// TIDEMARK_SILVER_BENCH_PROFILE=DIR writes a CPU profile of each merge there, and
// the allocation profiles before and after it.
//
//	go test -run '^$' -bench BacklogOfCommits -benchtime 1x ./internal/silver/
func BenchmarkBacklogOfCommits(b *testing.B) {
	changes, commits, reps := 100_000, 500, 3
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_SILVER_BENCH_BACKLOG")); err == nil && n > 0 {
		changes = n
	}
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_SILVER_BENCH_COMMITS")); err == nil && n > 0 {
		commits = n
	}
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_SILVER_BENCH_REPS")); err == nil && n > 0 {
		reps = n
	}
	// Printed, not logged: a benchmark with sub-benchmarks drops its own log.
	report := func(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }
	var manyT, oneT, timeR, manyH, oneH, heapR []float64
	for r := 0; r < reps; r++ {
		var many, one backlogRun
		order := []int{commits, 1}
		if r%2 == 1 {
			order = []int{1, commits}
		}
		for _, n := range order {
			b.Run(fmt.Sprintf("rep%d/commits=%d", r+1, n), func(b *testing.B) {
				run := backlogCost(b, changes, n, r)
				if n == 1 {
					one = run
				} else {
					many = run
				}
			})
		}
		report("rep %d: %d changes in %d bronze commits: %s (%d silver commits), heap +%d MiB (peak %d MiB); in 1 bronze commit: %s (%d step in parts), heap +%d MiB (peak %d MiB, budget 256 MiB)",
			r+1, changes, commits, many.took.Round(time.Millisecond), many.res.Commits, many.heap>>20, many.peak>>20,
			one.took.Round(time.Millisecond), one.res.InParts, one.heap>>20, one.peak>>20)
		manyT, oneT = append(manyT, many.took.Seconds()), append(oneT, one.took.Seconds())
		manyH, oneH = append(manyH, float64(many.heap>>20)), append(oneH, float64(one.heap>>20))
		timeR = append(timeR, many.took.Seconds()/one.took.Seconds())
		heapR = append(heapR, float64(many.heap)/float64(max(one.heap, 1)))
	}
	report("medians of %d reps: %d changes in %d bronze commits merged in %.2fs, heap +%.0f MiB; in 1 bronze commit %.2fs, heap +%.0f MiB",
		reps, changes, commits, median(manyT), median(manyH), median(oneT), median(oneH))
	report("ratio (median of the reps' ratios): time %.2f (per rep %s), heap %.2f (per rep %s); target: at most 1.5",
		median(timeR), fmtList(timeR), median(heapR), fmtList(heapR))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtList(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// backlogRun is one merge of backlogCost: its time, the peak heap in use
// while it ran and that peak above the heap in use when it started.
type backlogRun struct {
	took       time.Duration
	peak, heap uint64
	res        silver.Result
}

// backlogCost builds a silver table of changes rows, writes changes
// updates in commits bronze commits, and merges them with the defaults
// of tidemark run's share of a 256 MiB budget; it returns the merge's time
// and the peak heap in use seen while it ran.
func backlogCost(b *testing.B, changes, commits, rep int) backlogRun {
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
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
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
	if dir := os.Getenv("TIDEMARK_SILVER_BENCH_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-rep%d-commits%d.prof", rep+1, commits)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		writeAllocs(b, filepath.Join(dir, fmt.Sprintf("allocs-before-rep%d-commits%d.prof", rep+1, commits)))
	}
	start := time.Now()
	res := e.merge(m, ordersID)
	d := time.Since(start)
	if os.Getenv("TIDEMARK_SILVER_BENCH_PROFILE") != "" {
		pprof.StopCPUProfile()
		writeAllocs(b, filepath.Join(os.Getenv("TIDEMARK_SILVER_BENCH_PROFILE"), fmt.Sprintf("allocs-after-rep%d-commits%d.prof", rep+1, commits)))
	}
	close(stop)
	if res.Changes != int64(changes) {
		b.Fatalf("merge: %+v, want %d changes", res, changes)
	}
	p := <-peak
	return backlogRun{took: d, peak: p, heap: p - min(p, ms0.HeapInuse), res: res}
}

// writeAllocs writes the allocation profile so far (compare two with
// go tool pprof -diff_base).
func writeAllocs(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	runtime.GC() // the profile is as of the last GC
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}
