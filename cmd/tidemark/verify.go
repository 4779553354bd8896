package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/verify"
)

func verifyCmd(ctx context.Context) *cobra.Command {
	var (
		cfgPath string
		format  string
		opts    verify.Options
	)
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "verify --source URL --warehouse DIR [--tables s.t,...] [--wait 2m] [--format table|json]",
		Short: "Compare every silver table with its source table; exit 0 only if they are equal (5: differences, 6: could not verify all)",
		Long: `Compare every silver table of the source (or the --tables listed) with the source table, at a
consistent source position: verify reads the source's position (PostgreSQL: its WAL position;
MySQL/MariaDB: the binlog position of a consistent snapshot), waits (up to --wait) until
silver holds the source up to it, compares chunk hashes (computed at the source in SQL), drills into
differing chunks, and reads differing keys again after silver has moved on, so that rows changed
while verify runs are not reported. See docs/verify.md.

Exit codes: 0 every table equal; 5 differences found; 6 no difference found but not every table
could be verified (not published yet, silver behind, keys that kept changing); 2 usage.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveConfig(cmd, cfgPath)
			if err != nil {
				return err
			}
			if format != "table" && format != "json" {
				return usageError{fmt.Errorf("--format: want table or json, got %q", format)}
			}
			// Like status, show, merge and maintain, verify finds the
			// lake's format itself unless --lake-format names one.
			if !cmd.Flags().Changed("lake-format") && app.IsDeltaLake(cfg.Warehouse) {
				cfg.Lake.Format = config.LakeDelta
			}
			if err := app.CheckLake(cfg.Warehouse, cfg.Catalog, cfg.Lake.Format); err != nil {
				return usageError{err}
			}
			if cfg.Log.Level == config.DefaultLogLevel && !cmd.Flags().Changed("log-level") {
				cfg.Log.Level = "warn"
			}
			log := app.NewLogger(cfg)
			// Chunk hashes are streamed and drilling holds at most
			// verify.DefaultDrillRows rows at a time; the limit bounds
			// the process.
			defer limitMemory(cfg.MemoryBudget, log)()
			for _, s := range cfg.Tables {
				tn, err := config.ParseTableName(s)
				if err != nil {
					return usageError{fmt.Errorf("--tables: %w", err)}
				}
				opts.Tables = append(opts.Tables, verify.TableName{Schema: tn.Schema, Table: tn.Table})
			}
			declared, err := cfg.MergeKeys.Parsed()
			if err != nil {
				return usageError{err}
			}
			for tn, cols := range declared {
				if opts.MergeKeys == nil {
					opts.MergeKeys = map[verify.TableName][]string{}
				}
				opts.MergeKeys[verify.TableName{Schema: tn.Schema, Table: tn.Table}] = cols
			}
			opts.Source = cfg.Name
			cat, err := app.OpenLake(ctx, cfg)
			if err != nil {
				return err
			}
			src, err := app.VerifySource(cfg)
			if err != nil {
				cat.Close()
				return config.RedactError(err, cfg.Source, cfg.Catalog)
			}
			rep, err := verify.Run(ctx, cat, src, opts, log)
			if rep != nil {
				if werr := rep.Write(os.Stdout, format); werr != nil && err == nil {
					err = werr
				}
			}
			cat.Close()
			if err != nil {
				return config.RedactError(err, cfg.Source, cfg.Catalog)
			}
			if code := rep.ExitCode(); code != 0 {
				what := "differences found"
				if code == verify.ExitIncomplete {
					what = "not every table could be verified"
				}
				return &fault.ExitError{Code: code, Err: fmt.Errorf("verify: %s (exit %d)", what, code)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (flags override it)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table or json")
	cmd.Flags().DurationVar(&opts.Wait, "wait", verify.DefaultWait, "how long to wait for silver to reach the source position compared at")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", verify.DefaultRounds, "how many times differing keys are read again before they are reported")
	cmd.Flags().IntVar(&opts.MaxCandidates, "max-diffs", verify.DefaultMaxCandidates, "most differing keys followed per table")
	cmd.Flags().IntVar(&opts.MaxReport, "max-report", verify.DefaultMaxReport, "most differing keys listed per table")
	cmd.Flags().IntVar(&opts.ChunkRows, "chunk-rows", verify.DefaultChunkRows, "target rows per hashed chunk")
	cmd.Flags().BoolVar(&opts.NoPushdown, "no-pushdown", false, "hash chunks in tidemark instead of at the source (reads every row over the network)")
	own := ownFlags(cmd)
	holder.BindFlags(cmd.Flags())
	// Of the configuration's flags only the connection settings matter to
	// verify: keep --help short.
	onlyConfigFlags(cmd, own, "source", "source-file", "name", "warehouse", "catalog", "lake-format", "tables", "merge-keys", "memory-budget", "log-level", "log-format")
	quietByDefault(cmd)
	return cmd
}
