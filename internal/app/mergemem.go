package app

import (
	"log/slog"

	"github.com/tidemark/tidemark/internal/config"
)

// LimitMemory makes budget the bound of this process's resident memory, as
// `tidemark run` does with memory_budget (applyMemoryLimit), for commands
// that merge silver without a pipeline (`tidemark merge`). The returned
// function restores the previous limit.
func LimitMemory(budget config.ByteSize, log *slog.Logger) (restore func()) {
	return applyMemoryLimit(&config.Config{MemoryBudget: budget}, log)
}

// SilverMaxBytes is the bronze rows' Arrow memory one silver merge step may
// read under budget: the share `tidemark run` gives silver (SilverOptions).
func SilverMaxBytes(budget config.ByteSize) int64 {
	return int64(budget / config.SilverShare)
}
