package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/export"
)

func exportCmd(ctx context.Context) *cobra.Command {
	var (
		lf     lakeFlags
		name   string
		tables []string
		follow bool
		every  time.Duration
		opts   export.Options
	)
	cmd := &cobra.Command{
		Use:   "export --warehouse DIR --window 5m --to OUT [--format jsonl|parquet|csv] [--tables s.t,...] [--follow]",
		Short: "Write bronze's changes as one file per fixed window of commit time per table, and which windows are final",
		Long: "Export writes each table's bronze rows (the change log) into files of fixed windows of source commit\n" +
			"time, <schema>.<table>/<start>_<end>.<ext> (UTC), in source order, written atomically; an empty window\n" +
			"gets an explicit <start>_<end>.empty marker. Each table's _watermark (and the export's) gives the time\n" +
			"through which every window is final: a reader that follows it never reads a partial or changing file.\n" +
			"Without --follow it writes every window that is final now and exits; with --follow it keeps going until\n" +
			"SIGTERM. A restart resumes after the last final window. `tidemark export status` answers for one window.\n" +
			"See docs/tail.md#export.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lf.delta = true // a Delta lake too
			if err := lf.resolve(); err != nil {
				return err
			}
			if every <= 0 {
				return usageError{fmt.Errorf("--every must be positive, got %s", every)}
			}
			if lf.cfgPath != "" && name == "" {
				cfg, err := config.Load(lf.cfgPath)
				if err != nil {
					return err
				}
				name = cfg.Name
			}
			ids, err := app.ParseTables(tables)
			if err != nil {
				return err
			}
			opts.Tables = ids
			opts.MaxBytes = int64(lf.mem.budget) / 4
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			defer limitMemory(lf.mem.budget, log)()
			cat, err := app.OpenLakeReadOnly(ctx, lf.warehouse, lf.catalog)
			if err != nil {
				return err
			}
			defer cat.Close()
			if name == "" {
				if name, err = onlySource(ctx, cat); err != nil {
					return err
				}
			}
			opts.Source = name
			ex, err := export.Open(cat, opts, log)
			if err != nil {
				return err
			}
			defer ex.Close()
			if follow {
				return ex.Follow(ctx, every)
			}
			if _, err := ex.Pass(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&lf.cfgPath, "config", "", "YAML configuration file (for warehouse, catalog and the source name)")
	cmd.Flags().StringVar(&lf.warehouse, "warehouse", "", "lake directory or s3://bucket/prefix (default "+config.DefaultWarehouse+")")
	cmd.Flags().Var(&lf.catalog, "catalog", "catalog URL: postgres:// or rest+http(s):// (default: SQLite at <warehouse>/catalog.db)")
	lf.format = "table"
	lf.bindBudget(cmd, "the process's memory budget: a quarter of it bounds the rows one step holds")
	cmd.Flags().StringVar(&name, "name", "", "source name (default: from --config, or the only source in the warehouse)")
	cmd.Flags().StringVar(&opts.Dir, "to", "", "the export directory (created if missing)")
	cmd.Flags().DurationVar(&opts.Window, "window", 5*time.Minute, "window length, whole seconds (fixed at the directory's first export)")
	cmd.Flags().StringVar(&opts.Format, "format", export.FormatJSONL, "file format: jsonl, parquet or csv (fixed at the directory's first export)")
	cmd.Flags().StringSliceVar(&tables, "tables", nil, "only these tables (schema.table, comma-separated); default: every table of the source")
	cmd.Flags().DurationVar(&opts.Lateness, "lateness", export.DefaultLateness, "a window is final once the source is captured this far past its end")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep exporting windows as they become final, until SIGTERM/SIGINT")
	cmd.Flags().DurationVar(&every, "every", 5*time.Second, "with --follow: how often to look for final windows")
	cmd.AddCommand(exportStatusCmd())
	return cmd
}

func exportStatusCmd() *cobra.Command {
	var (
		dir, table, at, format string
	)
	cmd := &cobra.Command{
		Use:   "status --to OUT [--table schema.table --at TIME] [--format table|json]",
		Short: "How far an export's windows are final; with --table and --at, whether that window is complete and its file",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "table" && format != "json" {
				return usageError{fmt.Errorf("--format: want table or json, got %q", format)}
			}
			if (table == "") != (at == "") {
				return usageError{fmt.Errorf("--table and --at go together")}
			}
			st, err := export.ReadStatus(dir)
			if err != nil {
				return usageError{err}
			}
			if table != "" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usageError{fmt.Errorf("--at %q: give an RFC 3339 time, e.g. 2026-12-07T18:05:00Z", at)}
				}
				ws, err := st.Window(table, t)
				if err != nil {
					return err
				}
				return printWindow(os.Stdout, format, ws)
			}
			return printExport(os.Stdout, format, st)
		},
	}
	cmd.Flags().StringVar(&dir, "to", "", "the export directory")
	cmd.Flags().StringVar(&table, "table", "", "a table (schema.table), with --at")
	cmd.Flags().StringVar(&at, "at", "", "a time (RFC 3339) in the window asked about")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	return cmd
}

func printWindow(out io.Writer, format string, ws export.WindowStatus) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(ws)
	}
	state := "not complete"
	if ws.Complete {
		state = "complete"
	}
	fmt.Fprintf(out, "%s [%s, %s): %s\n", ws.Table, ws.Start.Format(time.RFC3339), ws.End.Format(time.RFC3339), state)
	switch {
	case ws.File != "":
		fmt.Fprintf(out, "file: %s\n", ws.File)
	case ws.Complete && ws.Empty:
		fmt.Fprintln(out, "no changes in this window")
	}
	for _, l := range ws.Late {
		fmt.Fprintf(out, "late rows: %s\n", l)
	}
	if ws.Reason != "" {
		fmt.Fprintln(out, ws.Reason)
	}
	return nil
}

func printExport(out io.Writer, format string, st export.Status) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(out, "export of %s, window %s, format %s; complete through %s\n", st.Settings.Source, st.Settings.Window,
		st.Settings.Format, timeOrDash(st.Root.CompleteThrough))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFIRST_WINDOW\tCOMPLETE_THROUGH\tCOMMIT_LSN\tLATE_ROWS")
	for _, t := range st.Tables {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", t.Table, timeOrDash(t.FirstWindow), timeOrDash(t.CompleteThrough), t.CommitLSN, t.LateRows)
	}
	return tw.Flush()
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
