package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
)

func goldCmd(ctx context.Context) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gold",
		Short: "Gold tables: aggregates over silver declared in the config's gold: list (docs/gold.md)",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(goldRefreshCmd(ctx))
	return cmd
}

func goldRefreshCmd(ctx context.Context) *cobra.Command {
	var cfgPath string
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "refresh NAME --config tidemark.yaml",
		Short: "Recompute the gold table NAME from the silver tables as they are now, replacing it in one commit, then exit",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolveConfig(cmd, cfgPath)
			if err != nil {
				return err
			}
			return app.GoldRefresh(ctx, cfg, args[0], os.Stdout, app.NewLogger(cfg))
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file with the gold: list (flags override it)")
	holder.BindFlags(cmd.Flags())
	return cmd
}
