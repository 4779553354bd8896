// Command tidemark-bench runs tidemark against the physical limits of a
// throwaway PostgreSQL (pg_recvlogical, COPY TO STDOUT) and prints a
// markdown table of figures and ratios. See docs/benchmarks.md. It only
// wires: flags → bench.Options → bench.Run.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/bench"
)

func main() {
	// The hidden pipeline mode: `tidemark run` with --cpuprofile, which the
	// bench re-executes itself into when --cpuprofile is given.
	if len(os.Args) > 1 && os.Args[1] == "pipeline" {
		os.Exit(bench.PipelineMain(os.Args[2:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := rootCmd(ctx).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "tidemark-bench: "+err.Error())
		os.Exit(1)
	}
}

func rootCmd(ctx context.Context) *cobra.Command {
	opts := bench.DefaultOptions()
	var (
		tidemark   string
		profileDir string
		scenarios  string
		out        string
		pipeArgs   string
	)
	cmd := &cobra.Command{
		Use:           "tidemark-bench [--scenarios 1,2,3,5,6] [--reps 3] [sizes...]",
		Short:         "Benchmark tidemark against pg_recvlogical and COPY on a throwaway PostgreSQL (or, with --source mysql, a bare binlog reader and SELECT * on a throwaway MariaDB); prints a markdown table",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Launcher = bench.Launcher{Path: tidemark, Args: []string{"run"}}
			if profileDir != "" {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				if profileDir, err = filepath.Abs(profileDir); err != nil {
					return err
				}
				if err := os.MkdirAll(profileDir, 0o755); err != nil {
					return err
				}
				opts.Launcher = bench.Launcher{Path: self, Args: []string{"pipeline"}, ProfileDir: profileDir}
			} else if _, err := os.Stat(tidemark); err != nil {
				return fmt.Errorf("--tidemark %s: %w (build it with `make build`)", tidemark, err)
			}
			opts.PipelineArgs = strings.Fields(pipeArgs)
			if scenarios != "" {
				opts.Scenarios = strings.Split(scenarios, ",")
			}
			opts.Log = os.Stderr
			rep, err := bench.Run(ctx, opts)
			if rep != nil {
				if werr := write(rep, out); werr != nil && err == nil {
					err = werr
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&tidemark, "tidemark", "bin/tidemark", "the tidemark binary to measure")
	f.StringVar(&profileDir, "cpuprofile", "", "write a CPU profile of every pipeline into this directory (runs the pipeline inside this binary instead of --tidemark)")
	f.StringVar(&opts.Source, "source", "postgres", "database to measure: postgres, or mysql (a throwaway MariaDB; scenarios 1 and 2: catch-up against a bare go-mysql binlog reader, snapshot against SELECT *)")
	f.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios to run, of 1,2,3,4,5,6,7,8,9 (default: all)")
	f.StringVar(&pipeArgs, "pipeline-args", "", "more `tidemark run` flags for every pipeline, space-separated (e.g. \"--snapshot-chunk-rows 50000\"); the defaults are measured without")
	f.StringVar(&out, "out", "", "also write the markdown report to this file")
	f.StringVar(&opts.WorkDir, "workdir", "", "directory for lakes and logs (default: a temporary directory)")
	f.BoolVar(&opts.Keep, "keep", false, "keep the work directory (lakes, pipeline logs)")
	f.IntVar(&opts.Reps, "reps", opts.Reps, "repetitions of each measurement (medians are reported)")
	f.IntVar(&opts.CDCChanges, "cdc-changes", opts.CDCChanges, "scenario 1: changes of the pgbench TPC-B workload")
	f.IntVar(&opts.CDCWideChanges, "cdc-wide-changes", opts.CDCWideChanges, "scenario 1: changes of the wide-row workload")
	f.IntVar(&opts.CDCClients, "cdc-clients", opts.CDCClients, "scenario 1: pgbench clients generating the workloads")
	f.IntVar(&opts.SnapshotScale, "snapshot-scale", opts.SnapshotScale, "scenario 2: pgbench scale (100,000 pgbench_accounts rows each; 100 = 10M rows)")
	f.IntVar(&opts.SnapshotWide, "snapshot-wide-rows", opts.SnapshotWide, "scenario 2: rows of the wide table")
	f.IntVar(&opts.LatencyRate, "latency-rate", opts.LatencyRate, "scenario 3: steady insert rate, rows/s")
	f.IntVar(&opts.LatencyBatch, "latency-batch", opts.LatencyBatch, "scenario 3: rows per transaction")
	f.DurationVar(&opts.LatencyDuration, "latency-duration", opts.LatencyDuration, "scenario 3: how long the steady load runs")
	f.IntVar(&opts.MergeRows, "merge-rows", opts.MergeRows, "scenario 4: rows of the small table (the large one has --merge-factor times more)")
	f.IntVar(&opts.MergeFactor, "merge-factor", opts.MergeFactor, "scenario 4: size of the large table ÷ the small one")
	f.IntVar(&opts.MergeKeys, "merge-keys", opts.MergeKeys, "scenario 4: keys changed in each table before the timed merge")
	f.IntVar(&opts.BigRows, "big-rows", opts.BigRows, "scenario 5: rows of the big-value transaction")
	f.IntVar(&opts.BigValueBytes, "big-value-bytes", opts.BigValueBytes, "scenario 5: bytes per big value")
	f.IntVar(&opts.HugeValueBytes, "huge-value-bytes", opts.HugeValueBytes, "scenario 7: bytes of the one huge value (PostgreSQL allows up to 1 GiB)")
	f.IntVar(&opts.BacklogChanges, "backlog-changes", opts.BacklogChanges, "scenarios 8 and 9: changes in the silver backlog (and rows of its table)")
	f.IntVar(&opts.BacklogCommits, "backlog-commits", opts.BacklogCommits, "scenarios 8 and 9: bronze commits the backlog is written in (8: against 1)")
	f.BoolVar(&opts.Debezium, "debezium", false, "scenario 1 (PostgreSQL): also run Debezium "+bench.DebeziumVersion+"'s embedded engine (counting consumer) on the same WAL and tables, one after the other with tidemark; needs java, javac (17+) and mvn, else its row says why it was not measured")
	f.StringVar(&opts.CacheDir, "bench-cache", ".bench-cache", "directory kept between runs for what a peer needs (Debezium's jars, resolved by Maven, and its compiled main)")
	return cmd
}

func write(rep *bench.Report, path string) error {
	if err := rep.Markdown(os.Stdout); err != nil {
		return err
	}
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.Markdown(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
