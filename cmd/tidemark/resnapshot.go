package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
)

func resnapshotCmd(ctx context.Context) *cobra.Command {
	var (
		cfgPath string
		opts    app.ResnapshotOptions
	)
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "resnapshot --source URL --warehouse DIR (--all | [--replace] SCHEMA.TABLE...)",
		Short: "Ask the next run to read tables again (and, with --all, replace a lost or broken slot); the pipeline must be stopped",
		Long: "resnapshot records, for a stopped pipeline, that the named tables (or --all) are to be read again.\n" +
			"The next `tidemark run` re-reads them through the chunked snapshot while it streams; each silver\n" +
			"table keeps its current state until its re-snapshot is complete, then is replaced in one commit.\n" +
			"When the slot cannot resume (slot_lost, wal_lost, slot_moved, publication_missing), --all is\n" +
			"required: resnapshot then drops the old slot, creates a new one and resets the checkpoint to it.\n" +
			"--replace rebuilds the named tables under their current schema (after incompatible_schema): their\n" +
			"bronze and silver tables move to bronze_replaced.<name>.<schema>.<table>__<request> and\n" +
			"silver_replaced.…, and the next run creates them afresh from a snapshot (docs/operations.md).\n" +
			"Takes the same flags as run.",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolveConfig(cmd, cfgPath)
			if err != nil {
				return err
			}
			opts.Tables = args
			log := app.NewLogger(cfg)
			defer limitMemory(cfg.MemoryBudget, log)()
			return app.Resnapshot(ctx, cfg, opts, os.Stdout, log)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (flags override it)")
	cmd.Flags().BoolVar(&opts.All, "all", false, "re-snapshot every captured table")
	cmd.Flags().BoolVar(&opts.ResetSlot, "reset-slot", false, "with --all: replace the slot even if it looks healthy")
	cmd.Flags().BoolVar(&opts.Replace, "replace", false, "rebuild the named tables' bronze and silver under their current schema (old tables kept under *_replaced)")
	holder.BindFlags(cmd.Flags())
	return cmd
}
