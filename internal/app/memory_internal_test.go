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

// TestMemoryLimitFollowsTheBudget checks that memory_budget becomes Go's
// memory limit, that the limit follows a live heap larger than the budget
// (so the collector does not run without pause) and comes back to the
// budget when the heap shrinks, and that the previous limit is restored.
func TestMemoryLimitFollowsTheBudget(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "") // an empty GOMEMLIMIT is as unset
	before := debug.SetMemoryLimit(-1)
	cfg := &config.Config{MemoryBudget: 64 * config.MiB, CommitBytes: 4 * config.MiB}
	restore := applyMemoryLimit(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := debug.SetMemoryLimit(-1); got != 64<<20 {
		t.Errorf("memory limit = %d, want memory_budget %d", got, 64<<20)
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
	waitLimit("want it back at the 64 MiB budget once the heap shrank", func(l int64) bool { return l == 64<<20 })

	restore()
	if got := debug.SetMemoryLimit(-1); got != before {
		t.Errorf("memory limit after restore = %d, want the previous %d", got, before)
	}
}
