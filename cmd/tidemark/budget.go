package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
)

// memoryLimited is told each command's budget once Go's memory limit is set
// for it (tests replace it to see that every command sets one).
var memoryLimited = func(config.ByteSize) {}

// limitMemory makes budget (memory_budget, --memory-budget) the bound of
// this command's process, as `tidemark run` does for its pipeline
// (app.Run): Go's memory limit below the budget (app.LimitMemory), so
// that the collector works to keep the resident size within it. Every
// command but run calls it once its configuration is resolved; the
// returned function restores the previous limit.
func limitMemory(budget config.ByteSize, log *slog.Logger) (restore func()) {
	restore = app.LimitMemory(budget, log)
	memoryLimited(budget)
	return restore
}

// budgetFlag is --memory-budget of the commands that take lakeFlags
// (merge, maintain): a --config file's memory_budget unless given,
// checked as memory_budget is (config.MinMemoryBudget).
type budgetFlag struct {
	budget config.ByteSize
	flags  *pflag.FlagSet
}

func (b *budgetFlag) bind(flags *pflag.FlagSet, usage string) {
	b.budget, b.flags = config.DefaultMemoryBudget, flags
	flags.Var(&b.budget, "memory-budget", usage)
}

// resolve takes cfg's memory_budget (cfg may be nil) unless the flag is
// given, and checks the result.
func (b *budgetFlag) resolve(cfg *config.Config) error {
	if b.flags == nil {
		return nil
	}
	if !b.flags.Changed("memory-budget") && cfg != nil && cfg.MemoryBudget > 0 {
		b.budget = cfg.MemoryBudget
	}
	if b.budget < config.MinMemoryBudget {
		return usageError{fmt.Errorf("--memory-budget: must be at least %s, got %s", config.ByteSize(config.MinMemoryBudget), b.budget)}
	}
	return nil
}
