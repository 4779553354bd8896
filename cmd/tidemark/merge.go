package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

func mergeCmd(ctx context.Context) *cobra.Command {
	var (
		lf   lakeFlags
		name string
		opts silver.Options
		soft bool
		mode string
		drop = config.DropColumnKeep
	)
	cmd := &cobra.Command{
		Use:   "merge --warehouse DIR [--name SOURCE] [TABLE...]",
		Short: "Merge what bronze holds into the silver tables (all, or schema.table ...), then exit",
		Long: "Merge brings each silver table up to date with its bronze table as it is now, and exits.\n" +
			"A table whose initial snapshot is not complete is reported as gated and not created.\n" +
			"The layout flags apply to silver tables this merge creates.",
		RunE: func(cmd *cobra.Command, args []string) error {
			lf.delta = true // a Delta lake too
			if err := lf.resolve(); err != nil {
				return err
			}
			if lf.cfgPath != "" {
				cfg, err := config.Load(lf.cfgPath)
				if err != nil {
					return err
				}
				if name == "" {
					name = cfg.Name
				}
				if !cmd.Flags().Changed("drop-column") && cfg.Silver.DropColumn != "" {
					drop = strings.ToLower(strings.TrimSpace(cfg.Silver.DropColumn))
				}
			}
			// The same share of the budget per merge step as tidemark run,
			// and the same bound on the process (a backlog is drained in
			// steps within it, not in one heap).
			opts.MaxBytes = app.SilverMaxBytes(lf.mem.budget)
			defer limitMemory(lf.mem.budget, slog.New(slog.DiscardHandler))()
			switch mode {
			case lake.MergeOnRead, lake.CopyOnWrite:
			default:
				return usageError{fmt.Errorf("--delete-mode: want %s or %s, got %q", lake.MergeOnRead, lake.CopyOnWrite, mode)}
			}
			opts.DeleteMode, opts.SoftDeletes = mode, soft
			switch drop {
			case config.DropColumnKeep, config.DropColumnDrop:
				opts.DropColumns = drop == config.DropColumnDrop
			default:
				return usageError{fmt.Errorf("--drop-column: want %s or %s, got %q", config.DropColumnKeep, config.DropColumnDrop, drop)}
			}
			// As tidemark run: without --buckets, a small table gets fewer.
			opts.AdaptBuckets = !cmd.Flags().Changed("buckets")
			opts.TargetFileSize = maintain.DefaultTargetFileSize
			return runMerge(ctx, lf, name, args, opts, os.Stdout)
		},
	}
	lf.bind(cmd, false)
	cmd.Flags().StringVar(&name, "name", "", "source name (default: from --config, or the only source in the warehouse)")
	cmd.Flags().IntVar(&opts.Buckets, "buckets", silver.DefaultBuckets, "new tables: partition by bucket(N, first key column), fewer for a small table unless given; negative: unpartitioned")
	cmd.Flags().StringVar(&mode, "delete-mode", lake.MergeOnRead, "new tables: merge-on-read (position deletes) or copy-on-write")
	cmd.Flags().BoolVar(&soft, "soft-deletes", false, "new tables: keep deleted rows with cdc_deleted = true")
	cmd.Flags().StringVar(&drop, "drop-column", config.DropColumnKeep, "a column dropped at the source: keep (stays in silver) or drop (deleted from silver), as tidemark run's silver.drop_column (a --config file's unless given)")
	cmd.Flags().Int64Var(&opts.MaxChanges, "max-changes", silver.DefaultMaxChanges, "most bronze rows merged per commit (memory bound)")
	lf.bindBudget(cmd, "the process's memory budget, as tidemark run's memory_budget (a --config file's memory_budget unless given): it bounds each merge step")
	return cmd
}

func runMerge(ctx context.Context, lf lakeFlags, source string, tables []string, opts silver.Options, out io.Writer) error {
	cat, err := app.OpenLakeAt(ctx, lf.warehouse, lf.catalog)
	if err != nil {
		return err
	}
	defer cat.Close()
	if source == "" {
		if source, err = onlySource(ctx, cat); err != nil {
			return err
		}
	}
	var results []silver.Result
	opts.Report = func(r silver.Result) { results = append(results, r) }
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m := silver.NewMerger(cat, opts, log)
	// A merge that loses a race (a running `tidemark run` merging or
	// maintaining the same table) is redone: each attempt starts from the
	// committed cursor, so retrying is safe.
	for attempt, wait := 1, 500*time.Millisecond; ; attempt, wait = attempt+1, wait*2 {
		results = nil
		if len(tables) == 0 {
			err = m.MergeAll(ctx, source)
		} else {
			ids, perr := app.ParseTables(tables)
			if perr != nil {
				return perr
			}
			// In turns, as tidemark run and a merge of every table do.
			err = m.MergeTables(ctx, source, ids)
		}
		if err == nil || fault.ClassOf(err) != fault.Transient || attempt == 6 || ctx.Err() != nil {
			break
		}
		log.Warn("merge lost a race or hit a transient error; merging again", "attempt", attempt, "error", err.Error())
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	if perr := printMerge(out, lf.format, results); perr != nil && err == nil {
		err = perr
	}
	return err
}

// onlySource returns the one source name the warehouse holds bronze for.
func onlySource(ctx context.Context, cat lake.Catalog) (string, error) {
	nss, err := cat.ListNamespaces(ctx)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	for _, ns := range nss {
		if len(ns) == 2 && ns[0] == "bronze" {
			seen[ns[1]] = true
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", usageError{fmt.Errorf("no bronze tables in warehouse %s: nothing to merge", cat.Warehouse())}
	}
	return "", usageError{fmt.Errorf("warehouse %s holds several sources (%s): pick one with --name", cat.Warehouse(), strings.Join(names, ", "))}
}

func printMerge(out io.Writer, format string, results []silver.Result) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if results == nil {
			results = []silver.Result{}
		}
		return enc.Encode(results)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSTATE\tCOMMITS\tCHANGES\tUPSERTS\tDELETES\tDEAD_LETTERS\tPOSITION")
	for _, r := range results {
		state := "merged"
		switch {
		case r.Gated:
			state = "gated: " + r.Reason
		case r.BronzeOnly:
			state = "bronze only: " + r.Reason
		case r.Published:
			state = "published"
		case r.Commits == 0:
			state = "up to date"
		}
		pos := "-"
		if lsn, err := strconv.ParseUint(r.Position, 10, 64); err == nil {
			pos = postgres.FormatLSN(lsn)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Table, state, r.Commits, r.Changes, r.Upserts, r.Deletes, r.DeadLetters, pos)
	}
	return tw.Flush()
}
