package app

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/tidemark/tidemark/internal/config"
)

// applyMemoryLimit makes memory_budget Go's soft memory limit
// (runtime/debug.SetMemoryLimit), so that the garbage collector works to
// the budget rather than letting the heap grow to twice what is live
// (GOGC=100) before collecting: garbage from the big copies of a commit
// (Arrow builders, Parquet pages) is collected before the process grows
// past the budget. GOGC still applies below the limit, so a small heap is
// not collected more often than before.
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
	return func() { debug.SetMemoryLimit(prev) }
}
