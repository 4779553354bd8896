package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/maintain"
)

func maintainCmd(ctx context.Context) *cobra.Command {
	var (
		lf   lakeFlags
		name string
		opts maintain.Options
	)
	cmd := &cobra.Command{
		Use:   "maintain --warehouse DIR [--name SOURCE] [TABLE...] [--older-than 1h] [--retain-last N] [--dry-run]",
		Short: "Compact small and delete files, expire old snapshots, remove orphan files (bronze and silver), then exit",
		Long: "Maintain keeps each lake table of a pipeline close to its live data: it rewrites small data files\n" +
			"and the files position deletes apply to (dropping the delete files), expires snapshots older than\n" +
			"--older-than beyond the newest --retain-last (a bronze table keeps every snapshot silver has not\n" +
			"merged yet), and removes files no metadata references once older than --orphan-age.\n" +
			"Safe while `tidemark run` is running. TABLE is schema.table (its bronze and silver tables).",
		RunE: func(cmd *cobra.Command, args []string) error {
			lf.delta = true // a Delta lake too
			if err := lf.resolve(); err != nil {
				return err
			}
			if name == "" && lf.cfgPath != "" {
				cfg, err := config.Load(lf.cfgPath)
				if err != nil {
					return err
				}
				name = cfg.Name
			}
			if err := opts.Validate(); err != nil {
				return usageError{err}
			}
			// Compaction reads and writes in bounded batches
			// (lake.compactionBounds); the limit bounds the process.
			defer limitMemory(lf.mem.budget, slog.New(slog.DiscardHandler))()
			return runMaintain(ctx, lf, name, args, opts, os.Stdout)
		},
	}
	lf.bind(cmd, false)
	lf.bindBudget(cmd, "the process's memory budget, as tidemark run's memory_budget (a --config file's memory_budget unless given)")
	cmd.Flags().StringVar(&name, "name", "", "source name (default: from --config, or the only source in the warehouse)")
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", maintain.DefaultOlderThan, "expire snapshots older than this")
	cmd.Flags().IntVar(&opts.RetainLast, "retain-last", maintain.DefaultRetainLast, "keep at least the newest N snapshots of each table")
	cmd.Flags().DurationVar(&opts.OrphanAge, "orphan-age", maintain.DefaultOrphanAge, "remove unreferenced files only when older than this (at least 1h)")
	cmd.Flags().Int64Var(&opts.TargetFileSize, "target-file-size", maintain.DefaultTargetFileSize, "size of the files compaction writes, in bytes")
	cmd.Flags().BoolVar(&opts.NoCompact, "no-compact", false, "skip compaction")
	cmd.Flags().BoolVar(&opts.NoExpire, "no-expire", false, "skip snapshot expiry")
	cmd.Flags().BoolVar(&opts.NoOrphans, "no-orphans", false, "skip orphan-file removal")
	cmd.Flags().BoolVar(&opts.WithoutSilver, "without-silver", false, "the pipeline runs without silver: expire bronze regardless of silver cursors")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "report what would be done, change nothing")
	return cmd
}

func runMaintain(ctx context.Context, lf lakeFlags, source string, tables []string, opts maintain.Options, out io.Writer) error {
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
	ids, err := app.ParseTables(tables)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	results, err := maintain.New(cat, opts, log).Run(ctx, source, ids)
	if perr := printMaintain(out, lf.format, opts.DryRun, results); perr != nil && err == nil {
		err = perr
	}
	return err
}

func printMaintain(out io.Writer, format string, dry bool, results []maintain.Result) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if results == nil {
			results = []maintain.Result{}
		}
		return enc.Encode(results)
	}
	if dry {
		fmt.Fprintln(out, "dry run: nothing changed; AFTER shows the state now")
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tDATA_FILES\tDELETE_FILES\tSNAPSHOTS\tREWRITTEN\tFOLDED_DELETES\tEXPIRED\tORPHANS\tNOTE")
	for _, r := range results {
		note := r.ExpireNote
		if r.CompactError != "" {
			note = "compaction deferred: a merge committed meanwhile"
		}
		fmt.Fprintf(tw, "%s\t%d -> %d\t%d -> %d\t%d -> %d\t%d\t%d\t%d\t%d\t%s\n", r.Table,
			r.Before.DataFiles, r.After.DataFiles, r.Before.DeleteFiles, r.After.DeleteFiles,
			r.Before.Snapshots, r.After.Snapshots, r.Compact.RemovedDataFiles, r.Compact.RemovedDeleteFiles,
			r.Expired, r.Orphans, note)
	}
	return tw.Flush()
}
