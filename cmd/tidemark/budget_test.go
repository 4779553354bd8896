package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// runErr runs tidemark with args in this process under ctx and returns its
// exit code and what it printed to stderr.
func runErr(t *testing.T, ctx context.Context, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	code := run(ctx, args)
	os.Stderr = saved
	w.Close()
	return code, <-done
}

// budgetCommands are every command with the arguments it needs to get
// past its own checks, against an empty lake at wh and a source nothing
// listens on.
func budgetCommands(wh string) map[string][]string {
	src := "postgres://tidemark@127.0.0.1:1/db"
	return map[string][]string{
		"run":        {"run", "--source", src, "--warehouse", wh},
		"tail":       {"tail", "--source", src},
		"verify":     {"verify", "--source", src, "--warehouse", wh},
		"resnapshot": {"resnapshot", "--source", src, "--warehouse", wh, "--all"},
		"merge":      {"merge", "--warehouse", wh},
		"maintain":   {"maintain", "--warehouse", wh},
	}
}

func emptyLake(t *testing.T) string {
	t.Helper()
	wh := t.TempDir()
	if err := os.WriteFile(filepath.Join(wh, "catalog.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return wh
}

// TestMemoryBudgetEveryCommand checks that every command takes the memory
// budget (--memory-budget, as memory_budget), refuses one too small or not
// a size with a usage error naming it, and that each command but run (whose
// pipeline sets it: app's memory tests) sets Go's memory limit below the
// budget before it does any work.
func TestMemoryBudgetEveryCommand(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	wh := emptyLake(t)
	for name, args := range budgetCommands(wh) {
		for _, bad := range []string{"1MiB", "lots"} {
			code, stderr := runErr(t, context.Background(), append(args, "--memory-budget", bad)...)
			if code != 2 || !strings.Contains(stderr, "memory") || !strings.Contains(stderr, bad) {
				t.Errorf("%s --memory-budget %s: exit %d, want 2 and an error naming the budget and the value; stderr:\n%s", name, bad, code, stderr)
			}
			if bad == "1MiB" && !strings.Contains(stderr, "at least "+config.ByteSize(config.MinMemoryBudget).String()) {
				t.Errorf("%s --memory-budget 1MiB: the error does not say the smallest budget: %s", name, stderr)
			}
		}
	}

	// A cancelled context: each command stops at its first connection or
	// lake read, after its budget is set.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const budget = 100 << 20
	for name, args := range budgetCommands(wh) {
		if name == "run" {
			continue
		}
		var got config.ByteSize
		var limit int64
		memoryLimited = func(b config.ByteSize) { got, limit = b, debug.SetMemoryLimit(-1) }
		runErr(t, ctx, append(args, "--memory-budget", "100MiB")...)
		memoryLimited = func(config.ByteSize) {}
		if got != budget || limit > budget || limit < budget/2 {
			t.Errorf("%s --memory-budget 100MiB: memory limit set for a budget of %s to %d bytes, want a limit of at most 100MiB set", name, got, limit)
		}
	}
	// A --config file's memory_budget, for the commands with lake flags.
	cfg := filepath.Join(t.TempDir(), "tidemark.yaml")
	if err := os.WriteFile(cfg, []byte("name: shop\nwarehouse: "+wh+"\nmemory_budget: 100MiB\nsource: postgres://tidemark@127.0.0.1:1/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"merge", "maintain", "verify", "tail", "resnapshot"} {
		var got config.ByteSize
		memoryLimited = func(b config.ByteSize) { got = b }
		args := []string{name, "--config", cfg}
		if name == "resnapshot" {
			args = append(args, "--all")
		}
		runErr(t, ctx, args...)
		memoryLimited = func(config.ByteSize) {}
		if got != budget {
			t.Errorf("%s --config (memory_budget: 100MiB): budget %s set", name, got)
		}
	}
}
