package app

import (
	"log/slog"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// overBudgetHeadroom: while the live heap alone exceeds memory_budget, the
// memory limit is raised to live × (1 + 1/overBudgetHeadroom), so the
// collector runs after every 25% of growth instead of without pause.
const overBudgetHeadroom = 4

// applyMemoryLimit makes memory_budget Go's soft memory limit
// (runtime/debug.SetMemoryLimit), so that the garbage collector works to
// the budget rather than letting the heap grow to twice what is live
// (GOGC=100) before collecting: garbage from the big copies of a commit
// (Arrow builders, Parquet pages and statistics) is collected before the
// process grows past the budget. GOGC still applies below the limit, so a
// small heap is not collected more often than before.
//
// A limit below the live heap makes the collector run back to back (Go
// caps it at half the CPU): measured, a silver build whose live data
// exceeded the budget took twice as long for a third less memory. So
// while the live heap exceeds the budget, the limit follows it with 25%
// headroom, and a warning says the budget is exceeded; it returns to the
// budget when the live heap does.
//
// GOMEMLIMIT, when set in the environment, wins: it is the operator's
// explicit setting for this Go process (a container's memory limit, say),
// and the runtime has applied it already. It is logged beside
// memory_budget, which still sizes the buffers.
//
// The returned function restores the previous limit (for tests that run
// pipelines in their own process).
func applyMemoryLimit(cfg *config.Config, log *slog.Logger) (restore func()) {
	budget := int64(cfg.MemoryBudget)
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("GOMEMLIMIT is set: Go's memory limit comes from it, not from memory_budget (which still bounds the buffers)",
			"gomemlimit", env, "memory_budget", cfg.MemoryBudget.String())
		return func() {}
	}
	if budget <= 0 {
		return func() {}
	}
	prev := debug.SetMemoryLimit(budget)
	log.Debug("memory limit", "memory_budget", cfg.MemoryBudget.String(), "commit_bytes", cfg.CommitBytes.String(),
		"snapshot_chunk_bytes", cfg.Snapshot.ChunkBytes.String())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		followLiveHeap(budget, stop, log)
	}()
	return func() {
		close(stop)
		<-done
		debug.SetMemoryLimit(prev)
	}
}

// followLiveHeap keeps the memory limit at max(budget, live × 1.25) until
// stop closes.
func followLiveHeap(budget int64, stop <-chan struct{}, log *slog.Logger) {
	sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	limit := budget
	var warned time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		rtmetrics.Read(sample)
		if sample[0].Value.Kind() != rtmetrics.KindUint64 {
			return // not supported by this runtime: the budget stays the limit
		}
		live := int64(sample[0].Value.Uint64())
		want := max(budget, live+live/overBudgetHeadroom)
		// Move back to the budget at once, otherwise only on a change of
		// more than 1/16.
		small := want-limit < limit/16 && limit-want < limit/16
		if want == limit || want != budget && small {
			continue
		}
		debug.SetMemoryLimit(want)
		if want > budget && time.Since(warned) > time.Minute {
			warned = time.Now()
			log.Warn("the live heap exceeds memory_budget: Go's memory limit follows it with 25% headroom until it shrinks",
				"live_mib", live>>20, "memory_budget_mib", budget>>20, "limit_mib", want>>20)
		}
		limit = want
	}
}
