package app

import (
	"log/slog"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// overBudgetHeadroom: while the live heap alone exceeds what the budget
// leaves the Go heap, the memory limit is raised to
// live × (1 + 1/overBudgetHeadroom), so the collector runs after every
// 12.5% of growth instead of without pause.
const overBudgetHeadroom = 8

// budgetMargin: memory_budget / budgetMargin is kept free between the
// process's resident size and the budget: the runtime's memory limit is
// soft, and the heap overshoots it by what is allocated while a collection
// runs (measured: ~20 MiB when 16 MiB values were committed, so a margin
// of budget/16 left the process 5 MiB over a 256 MiB budget).
const budgetMargin = 8

// applyMemoryLimit makes memory_budget the bound of the process's resident
// memory (RSS): it sets Go's soft memory limit
// (runtime/debug.SetMemoryLimit) to the budget less the memory Go does not
// manage (the binary's pages, C allocations of the SQLite catalog: the most
// seen of RSS minus the runtime's mapped memory) and a margin of budget/8, so
// that the garbage collector works to keep the whole process within the
// budget rather than letting the heap grow to twice what is live (GOGC=100)
// before collecting. GOGC still applies below the limit, so a small heap is
// not collected more often than before. Measured: with the limit at the
// budget itself, a process whose heap held ~140 MiB live peaked at 314 MiB
// RSS for a 256 MiB budget (the heap grew to the limit, and the ~60 MiB Go
// does not count came on top).
//
// A limit below the live heap makes the collector run back to back (Go
// caps it at half the CPU): measured, a silver build whose live data
// exceeded the budget took twice as long for a third less memory. So
// while the live heap exceeds what the budget leaves it, the limit follows
// the live heap with 12.5% headroom, and a warning says the budget is
// exceeded; it returns when the live heap shrinks.
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
	m := newMemSampler()
	first := m.heapLimit(budget)
	prev := debug.SetMemoryLimit(first)
	log.Debug("memory limit", "memory_budget", cfg.MemoryBudget.String(), "go_limit_mib", first>>20,
		"commit_bytes", cfg.CommitBytes.String(), "snapshot_chunk_bytes", cfg.Snapshot.ChunkBytes.String())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		followLiveHeap(budget, first, m, stop, log)
	}()
	return func() {
		close(stop)
		<-done
		debug.SetMemoryLimit(prev)
	}
}

// memSampler reads what the runtime holds and the process's resident size.
type memSampler struct {
	samples []rtmetrics.Sample
	page    int64
	// outside is the most resident memory seen outside the runtime: the
	// binary's pages, once touched, mostly stay, and a peak is what the
	// budget bounds.
	outside int64
}

const (
	liveHeap     = "/gc/heap/live:bytes"
	goTotal      = "/memory/classes/total:bytes"
	heapReleased = "/memory/classes/heap/released:bytes"
)

func newMemSampler() *memSampler {
	return &memSampler{
		samples: []rtmetrics.Sample{{Name: liveHeap}, {Name: goTotal}, {Name: heapReleased}},
		page:    int64(os.Getpagesize()),
	}
}

// read returns the live heap, and the most resident memory seen that the
// runtime does not manage (0 where RSS cannot be read). ok is false when
// the runtime does not report a live heap.
func (m *memSampler) read() (live, outside int64, ok bool) {
	rtmetrics.Read(m.samples)
	for _, s := range m.samples {
		if s.Value.Kind() != rtmetrics.KindUint64 {
			return 0, 0, false
		}
	}
	live = int64(m.samples[0].Value.Uint64())
	mapped := int64(m.samples[1].Value.Uint64()) - int64(m.samples[2].Value.Uint64())
	if rss := m.rss(); rss > 0 {
		m.outside = max(m.outside, rss-mapped)
	}
	return live, m.outside, true
}

// rss is the process's resident size from /proc/self/statm (0: unknown).
func (m *memSampler) rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * m.page
}

// heapLimit is the Go memory limit that keeps the process within budget,
// given the memory outside the runtime now: never below half the budget
// (a runtime that cannot measure it, or a budget mostly taken outside Go,
// still leaves the heap room to work).
func (m *memSampler) heapLimit(budget int64) int64 {
	_, outside, _ := m.read()
	return limitFor(budget, outside)
}

func limitFor(budget, outside int64) int64 {
	return max(budget/2, budget-outside-budget/budgetMargin)
}

// followLiveHeap keeps the memory limit at max(what the budget leaves the
// Go runtime, live × 1.125) until stop closes.
func followLiveHeap(budget, limit int64, m *memSampler, stop <-chan struct{}, log *slog.Logger) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		live, outside, ok := m.read()
		if !ok {
			return // not supported by this runtime: the limit stays
		}
		base := limitFor(budget, outside)
		want := max(base, live+live/overBudgetHeadroom)
		// Move back to the base at once, otherwise only on a change of
		// more than 1/16.
		small := want-limit < limit/16 && limit-want < limit/16
		if want == limit || want != base && small || want == base && small && want > limit {
			continue
		}
		debug.SetMemoryLimit(want)
		if want > base && time.Since(warned) > time.Minute {
			warned = time.Now()
			log.Warn("the live heap exceeds what memory_budget leaves it: Go's memory limit follows it with 12.5% headroom until it shrinks",
				"live_mib", live>>20, "memory_budget_mib", budget>>20, "outside_go_mib", outside>>20, "limit_mib", want>>20)
		}
		limit = want
	}
}
