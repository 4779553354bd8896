package app

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// TestMemoryLimitFollowsTheBudget checks that Go's memory limit is what
// memory_budget leaves the runtime (less than the budget, by the memory Go
// does not manage and a margin, but at least half of it), that the limit
// follows a live heap larger than the budget (so the collector does not
// run without pause) and comes back under the budget when the heap
// shrinks, and that the previous limit is restored.
func TestMemoryLimitFollowsTheBudget(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // an empty GOMEMLIMIT is as unset
	before := debug.SetMemoryLimit(-1)
	cfg := &config.Config{MemoryBudget: 64 * config.MiB, CommitBytes: 4 * config.MiB}
	restore := applyMemoryLimit(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := debug.SetMemoryLimit(-1); got > 56<<20 || got < 32<<20 {
		t.Errorf("memory limit = %d MiB, want at most memory_budget 64 MiB less an 8 MiB margin, at least half of it", got>>20)
	}

	waitLimit := func(what string, ok func(int64) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			runtime.GC()
			got := debug.SetMemoryLimit(-1)
			if ok(got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("memory limit %d MiB: %s", got>>20, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	live := make([]byte, 160<<20)
	for i := range live {
		live[i] = byte(i)
	}
	waitLimit("want it above the 160 MiB live heap", func(l int64) bool { return l > 160<<20 })
	runtime.KeepAlive(live)
	live = nil
	waitLimit("want it back under the 64 MiB budget once the heap shrank", func(l int64) bool { return l <= 56<<20 })

	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("memory limit after restore = %d, want the previous %d", got, before)
	}
}

// TestLimitForKeepsTheProcessInTheBudget: the limit leaves room for what
// Go does not manage and the margin, but never less than half the budget.
func TestLimitForKeepsTheProcessInTheBudget(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct{ budget, outside, want int64 }{
		{256 * mib, 0, 224 * mib},
		{256 * mib, 40 * mib, 184 * mib},
		{256 * mib, 200 * mib, 128 * mib},
		{64 * mib, 10 * mib, 46 * mib},
	} {
		if got := limitFor(tc.budget, tc.outside); got != tc.want {
			t.Errorf("limitFor(%d MiB budget, %d MiB outside Go) = %d MiB, want %d MiB", tc.budget/mib, tc.outside/mib, got/mib, tc.want/mib)
		}
	}
}
