package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/control"
)

func serveCmd(ctx context.Context) *cobra.Command {
	var (
		o        control.ServeOptions
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "serve [--state ./tidemark-state | --state postgres://…] [--addr 127.0.0.1:7878]",
		Short: "Run the control plane: the pipelines `tidemark apply` declares, one supervised replica each, their triggers and the API",
		Long: "Serve keeps every pipeline declared with `tidemark apply` running as a supervised `tidemark run` child\n" +
			"(one replica per pipeline across every serve on the same state), restarts it when it exits or its\n" +
			"config changes, and calls each pipeline's triggers exactly once. The API (REST/JSON, bearer tokens\n" +
			"scoped to an organisation, project or environment) listens on --addr. The admin token is read from\n" +
			"--admin-token-file, or created there on first start. See docs/control-plane.md.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := &config.Config{}
			cfg.Log.Level = logLevel
			if err := cfg.Validate(); err != nil && logLevel != "" {
				// only the log keys matter here; a bad level is a usage error
				var lv config.Log
				lv.Level = logLevel
				_ = lv
			}
			log := app.NewLogger(&config.Config{Log: config.Log{Level: logLevel}})
			return control.Serve(ctx, o, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.State, "state", "./tidemark-state", "state store: a directory (embedded SQLite) or a postgres:// URL (give the password by PGPASSWORD or ~/.pgpass)")
	f.StringVar(&o.Addr, "addr", "127.0.0.1:7878", "API listen address")
	f.StringVar(&o.DataDir, "data", "./tidemark-data", "directory of the lakes (<data>/lake/<org>/<project>/<env>/<pipeline>) and of the pipelines' rendered configs and logs (<data>/run)")
	f.StringVar(&o.AdminTokenFile, "admin-token-file", "", "admin token file, created (0600) with a new token if missing (default <state>/admin-token; ./tidemark-admin-token with a PostgreSQL state)")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", 15*time.Second, "a pipeline's lease lasts this long unrenewed: the wait before another serve takes over a dead one's pipelines")
	f.DurationVar(&o.Poll, "poll", time.Second, "how often leases are renewed, children's status read and due triggers called")
	f.DurationVar(&o.RestartInitial, "restart-initial-backoff", time.Second, "first wait before a pipeline that exited is started again (doubling)")
	f.DurationVar(&o.RestartMax, "restart-max-backoff", time.Minute, "longest wait before a pipeline that exited is started again")
	f.DurationVar(&o.TriggerInitial, "trigger-initial-backoff", 30*time.Second, "first wait before a failed trigger call is retried (doubling)")
	f.DurationVar(&o.TriggerMax, "trigger-max-backoff", 30*time.Minute, "longest wait between two attempts of a trigger call")
	f.DurationVar(&o.TriggerClaimTTL, "trigger-claim-ttl", 2*time.Minute, "how long an attempt of a trigger call holds it (its HTTP timeout is half); after a crash the call is retried once this passed")
	f.DurationVar(&o.StopTimeout, "stop-timeout", time.Minute, "how long a pipeline has to stop after SIGTERM before it is killed")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

// clientFlags are the flags of the commands that call a serve.
type clientFlags struct {
	server    string
	tokenFile string
}

func (c *clientFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.server, "server", "", "the serve's API (default $TIDEMARK_SERVER, else http://127.0.0.1:7878)")
	cmd.Flags().StringVar(&c.tokenFile, "token-file", "", "file holding the API token (default $TIDEMARK_TOKEN, else ./tidemark-state/admin-token)")
}

func (c *clientFlags) client() (*control.Client, error) {
	base := c.server
	if base == "" {
		base = os.Getenv("TIDEMARK_SERVER")
	}
	if base == "" {
		base = "http://127.0.0.1:7878"
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	tok := ""
	switch {
	case c.tokenFile != "":
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--token-file: %w", err)}
		}
		tok = strings.TrimSpace(string(b))
	case os.Getenv("TIDEMARK_TOKEN") != "":
		tok = strings.TrimSpace(os.Getenv("TIDEMARK_TOKEN"))
	default:
		b, err := os.ReadFile("tidemark-state/admin-token")
		if err != nil {
			return nil, usageError{errors.New("no API token: give --token-file or TIDEMARK_TOKEN")}
		}
		tok = strings.TrimSpace(string(b))
	}
	return &control.Client{Base: base, Token: tok}, nil
}

// apiErr makes an answer of 4xx (a refused declaration, a token without
// the right) a usage error: exit 2, like a bad config file.
func apiErr(err error) error {
	var ae *control.APIError
	if errors.As(err, &ae) && ae.Status/100 == 4 {
		return usageError{err}
	}
	return err
}

func applyCmd(ctx context.Context) *cobra.Command {
	var (
		cf     clientFlags
		file   string
		output string
		prune  bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f pipelines.yaml",
		Short: "Declare organisations, projects, environments and their pipelines; idempotent (an unchanged pipeline is not touched)",
		Long: "Apply sends a pipelines.yaml to tidemark serve. Each environment the file declares then holds exactly\n" +
			"its pipelines: new ones start, changed ones (a new rendered config checksum) restart, unchanged ones are\n" +
			"left alone, and those no longer listed are stopped, leaving their slot, publication and lake tables\n" +
			"(apply names them; --prune drops them). Environments the file does not declare are not touched. See docs/control-plane.md.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("-f FILE is required")}
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return usageError{err}
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			changes, err := c.Apply(ctx, data, prune)
			if err != nil {
				return apiErr(err)
			}
			if output == "json" {
				return writeJSON(changes)
			}
			for _, ch := range changes {
				fmt.Fprintf(stdout, "%-9s %s (id %s)\n", ch.Action, ch.Path, ch.ID)
				if ch.Pruned {
					fmt.Fprintf(stdout, "          pruned: replication slot, publication and lake tables dropped\n")
				}
				if ch.PruneError != "" {
					fmt.Fprintf(stdout, "          prune failed: %s\n", ch.PruneError)
				}
				for _, l := range ch.LeftBehind {
					fmt.Fprintf(stdout, "          left behind: %s\n", l)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the pipelines.yaml")
	cmd.Flags().BoolVar(&prune, "prune", false, "for pipelines no longer declared: once stopped, drop their replication slot and publication and delete their lake (Kafka topics are kept)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cf.bind(cmd)
	return cmd
}

func getCmd(ctx context.Context) *cobra.Command {
	var (
		cf     clientFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "get pipelines|triggers [-o json]",
		Short: "List the pipelines (state, lag, snapshot, restarts, last error) or triggers the token may see",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			switch args[0] {
			case "pipelines", "pipeline":
				ps, err := c.Pipelines(ctx)
				if err != nil {
					return apiErr(err)
				}
				if output == "json" {
					return writeJSON(ps)
				}
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPIPELINE\tSTATE\tSNAPSHOT\tLAG_S\tLAG_BYTES\tRESTARTS\tLAST_ERROR\tCHECKSUM")
				for _, p := range ps {
					state, snap, lagS, lagB, restarts, lastErr := "pending", "-", "-", "-", "0", "-"
					if s := p.Status; s != nil {
						state = s.State
						snap = fmt.Sprintf("%d/%d", s.TablesDone, s.TablesTotal)
						lagS, lagB = fmt.Sprintf("%.1f", s.LagSeconds), fmt.Sprint(s.LagBytes)
						restarts = fmt.Sprint(s.Restarts)
						if s.LastErrorCode != "" {
							lastErr = s.LastErrorCode
						}
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Path(), state, snap, lagS, lagB, restarts, lastErr, p.Checksum[:12])
				}
				return tw.Flush()
			case "triggers", "trigger":
				ts, err := c.Triggers(ctx)
				if err != nil {
					return apiErr(err)
				}
				if output == "json" {
					return writeJSON(ts)
				}
				tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PIPELINE\tTRIGGER\tRUN_ID\tATTEMPTS\tLAST_STATUS\tCOMPLETED")
				for _, t := range ts {
					done := "-"
					if t.Completed != nil {
						done = t.Completed.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", t.Pipeline, t.Name, t.RunID, t.Attempts, t.LastStatus, done)
				}
				return tw.Flush()
			}
			return usageError{fmt.Errorf("get %s: want pipelines or triggers", args[0])}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cf.bind(cmd)
	return cmd
}

func tokenCmd(ctx context.Context) *cobra.Command {
	var (
		cf   clientFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "token create org[/project[/env]] [--name NAME]",
		Short: "Create an API token scoped to an organisation, a project or an environment (needs the admin token); printed once",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "create" {
				return usageError{fmt.Errorf("token %s: want create", args[0])}
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			tok, err := c.CreateToken(ctx, args[1], name)
			if err != nil {
				return apiErr(err)
			}
			fmt.Fprintln(stdout, tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a label for the token")
	cf.bind(cmd)
	return cmd
}

func writeJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
