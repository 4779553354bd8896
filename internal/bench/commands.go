package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// BudgetSlack is what a command's peak RSS may exceed memory_budget by
// (docs/operations.md, Known limitations): Go's memory limit is soft, and
// the heap overshoots it by what is allocated while a collection runs.
const BudgetSlack = 32 << 20

// commands is scenario 9 (issue 14): the peak RSS (VmHWM, from the
// child's rusage) of the lake commands run as processes with the default
// memory_budget, against budget + BudgetSlack: `tidemark merge` of a
// backlog of BacklogChanges changes in BacklogCommits bronze commits over
// a silver table of as many rows, then `tidemark maintain` compacting the
// many small bronze files those commits wrote. The lake is scenario 8's
// (backlogLake), written in this process before the commands run.
func (b *bench) commands(ctx context.Context) error {
	const budget = int64(config.DefaultMemoryBudget)
	target := fmt.Sprintf("≤ %s + %s", mib(budget), mib(BudgetSlack))
	if len(b.opts.Launcher.Args) == 0 || b.opts.Launcher.Args[0] != "run" {
		b.report.Rows = append(b.report.Rows, Row{Scenario: "9 Peak RSS of merge and maintain",
			Tidemark: "not measured (needs the tidemark binary, not --profile-dir)", Baseline: "—", Ratio: "—", Target: target, Met: "—"})
		return nil
	}
	changes, commits := b.opts.BacklogChanges, b.opts.BacklogCommits
	l := &backlogLake{name: "budget", commits: commits}
	wh := filepath.Join(b.opts.WorkDir, "lake", l.name)
	b.logf("commands: a silver table of %d rows and a backlog of %d changes in %d bronze commits", changes, changes, commits)
	if err := l.setup(ctx, wh, changes); err != nil {
		return fmt.Errorf("commands: %w", err)
	}
	if err := l.writeBacklog(ctx, changes, 1); err != nil {
		return fmt.Errorf("commands: %w", err)
	}
	for _, c := range []struct{ what, cmd string }{
		{fmt.Sprintf("merge of %s changes in %s bronze commits", count(int64(changes)), count(int64(commits))), "merge"},
		{fmt.Sprintf("maintain compacting the %s small bronze files (and silver)", count(int64(commits))), "maintain"},
	} {
		peak, err := b.commandPeak(ctx, c.cmd, "--warehouse", wh, "--name", l.name, "--memory-budget", config.ByteSize(budget).String())
		if err != nil {
			return fmt.Errorf("commands: %w", err)
		}
		b.logf("commands: tidemark %s peaked at %s", c.cmd, mib(peak))
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: "9 Peak RSS of tidemark " + c.what + ", memory_budget " + mib(budget),
			Tidemark: mib(peak), Baseline: mib(budget), Ratio: ratio(float64(peak) / float64(budget)),
			Target: target, Met: yesNo(peak <= budget+BudgetSlack),
		})
	}
	return nil
}

// commandPeak runs `tidemark cmd args...` to its end and returns its peak
// RSS: its VmHWM, read every 20 ms while it runs (the last read is within
// 20 ms of its exit; VmHWM only grows).
func (b *bench) commandPeak(ctx context.Context, cmd string, args ...string) (int64, error) {
	logPath := filepath.Join(b.opts.WorkDir, "logs", "command_"+cmd+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return 0, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	c := exec.CommandContext(ctx, b.opts.Launcher.Path, append([]string{cmd}, args...)...)
	c.Env = append(os.Environ(), b.opts.Launcher.Env...)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		return 0, fmt.Errorf("start tidemark %s: %w", cmd, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	var peak int64
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-exited:
			if err != nil {
				return 0, fmt.Errorf("tidemark %s: %w (log: %s)", cmd, err, logPath)
			}
			if peak == 0 {
				return 0, fmt.Errorf("tidemark %s exited before its peak RSS was read", cmd)
			}
			return peak, nil
		case <-t.C:
			// A read can fail as the process exits: the reads before stand.
			if v, err := peakRSSOf(c.Process.Pid); err == nil {
				peak = max(peak, v)
			}
		}
	}
}
