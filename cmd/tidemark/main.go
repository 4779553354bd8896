// Command tidemark captures every change of an operational database into
// Apache Iceberg tables. It only wires: flags → config → app.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/fault"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// usageError marks command-line mistakes (exit code 2).
type usageError struct{ error }

// stdout receives --help and --version (tests replace it).
var stdout io.Writer = os.Stdout

func run(ctx context.Context, args []string) int {
	app.RegisterClassifiers()
	root := &cobra.Command{
		Use:           "tidemark",
		Short:         "Change data capture from PostgreSQL into Apache Iceberg, in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	root.SetOut(stdout)
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().BoolP("version", "v", false, "print the version, the commit it was built from, and the Go version")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError{fmt.Errorf("unknown command %q (see tidemark --help)", args[0])}
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.AddCommand(runCmd(ctx), loadCmd(ctx), tailCmd(ctx), showCmd(ctx), statusCmd(ctx))
	root.AddCommand(verifyCmd(ctx))
	root.AddCommand(mergeCmd(ctx))
	root.AddCommand(maintainCmd(ctx))
	root.AddCommand(resnapshotCmd(ctx))
	root.AddCommand(exportCmd(ctx))
	root.AddCommand(goldCmd(ctx))
	root.AddCommand(serveCmd(ctx), applyCmd(ctx), getCmd(ctx), tokenCmd(ctx))
	root.AddCommand(versionCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return fault.ExitOK
	}
	var ue usageError
	var ce *config.Error
	msg := config.RedactURL(err.Error())
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Code != "" && fe.Code != "transient" {
		msg = "[" + fe.Code + "] " + msg
	}
	fmt.Fprintln(os.Stderr, "tidemark: "+msg)
	switch {
	case errors.As(err, &ue), errors.As(err, &ce):
		return fault.ExitConfig
	}
	code := fault.ExitCode(err)
	switch code {
	case fault.ExitFatal:
		fmt.Fprintln(os.Stderr, "tidemark: stopped to protect your data (exit 3); see docs/operations.md")
	case fault.ExitTransient:
		// The last line says what failed and what to check: it is the line
		// a supervisor's status shows.
		last := fault.LastError(err)
		fmt.Fprintf(os.Stderr, "tidemark: transient errors persisted past the retry budget (exit 4); last error: %s; check: %s\n",
			fault.OneLine(config.RedactURL(last.Error())), fault.Check(last))
	}
	return code
}

func runCmd(ctx context.Context) *cobra.Command {
	var cfgPath string
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "run --source postgres://user@host:5432/db --warehouse ./lake",
		Short: "Capture changes into bronze (and silver) tables, Iceberg or Delta (lake.format), until stopped (SIGTERM/SIGINT flush and confirm)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveConfig(cmd, cfgPath)
			if err != nil {
				return err
			}
			return app.Run(ctx, cfg, app.NewLogger(cfg))
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (flags override it)")
	holder.BindFlags(cmd.Flags())
	return cmd
}

func loadCmd(ctx context.Context) *cobra.Command {
	var cfgPath string
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "load --from kafka://broker:9092 --topic-prefix PREFIX [--group GROUP] --warehouse ./lake",
		Short: "Load the topics of a `run --sink kafka://` into bronze and silver until stopped (SIGTERM/SIGINT flush and commit)",
		Long: "Load reads the per-table topics a `tidemark run --sink kafka://` publishes and keeps bronze and silver\n" +
			"exactly as `run` would from the source. The offsets it loaded are committed in the lake with the\n" +
			"data, so a killed load resumes without a duplicate; a gap in a topic stops it (kafka_gap).",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.ResolveLoad(cmd.Flags(), cfgPath)
			if err != nil {
				return err
			}
			log := app.NewLogger(cfg)
			app.WarnDeprecations(cfg, log)
			return app.Load(ctx, cfg, log)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (flags override it)")
	holder.BindFlags(cmd.Flags())
	return cmd
}

func tailCmd(ctx context.Context) *cobra.Command {
	var (
		cfgPath string
		format  string
		posName string
		posDir  string
		opts    app.TailOptions
	)
	holder := &config.Config{}
	cmd := &cobra.Command{
		Use:   "tail --source URL [--tables s.t,...] [--format tidemark|debezium|beam] [--max-records N] [--max-duration D] [--poll-timeout D] [--position-name NAME]",
		Short: "Stream changes as JSON lines to stdout from the current position (PostgreSQL: a temporary slot; MySQL: a binlog dump), storing nothing",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			shape, err := event.ParseShape(format)
			if err != nil {
				return usageError{fmt.Errorf("--format: %w", err)}
			}
			if opts.DebeziumSchema && shape != event.Debezium {
				return usageError{fmt.Errorf("--debezium-schema needs --format debezium (got %s)", shape)}
			}
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"--max-duration", opts.MaxDuration}, {"--poll-timeout", opts.PollTimeout}} {
				if d.v < 0 {
					return usageError{fmt.Errorf("%s must not be negative, got %s", d.flag, d.v)}
				}
			}
			if posName != "" {
				if err := app.CheckPositionName(posName); err != nil {
					return usageError{fmt.Errorf("--position-name: %w", err)}
				}
				opts.Slot = app.PositionSlot(posName)
				opts.Store = &app.TailFileStore{Path: filepath.Join(posDir, posName+".json")}
			}
			opts.Format = shape
			opts.Version = strings.TrimPrefix(strings.SplitN(versionString(), "\n", 2)[0], "tidemark ")
			cfg, err := resolveConfig(cmd, cfgPath)
			if err != nil {
				return err
			}
			if cfg.Log.Level == config.DefaultLogLevel && !cmd.Flags().Changed("log-level") {
				cfg.Log.Level = "warn"
			}
			log := app.NewLogger(cfg)
			// Output is streamed (a buffered writer); the capture holds
			// at most commit_bytes, from the budget, between flushes.
			defer limitMemory(cfg.MemoryBudget, log)()
			return app.Tail(ctx, cfg, opts, os.Stdout, log)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "YAML configuration file (flags override it)")
	cmd.Flags().IntVar(&opts.MaxRecords, "max-records", 0, "stop after N records (0: no limit)")
	cmd.Flags().DurationVar(&opts.MaxDuration, "max-duration", 0, "stop after this long (0: no limit)")
	cmd.Flags().DurationVar(&opts.PollTimeout, "poll-timeout", 0, "stop once this long passes without a record, from the start or the last record (0: never)")
	cmd.Flags().StringVar(&format, "format", string(event.Tidemark), "event shape: tidemark (everything: position, tx id, commit time, unchanged columns), debezium (Debezium's envelope), beam (Beam's SourceRecordJsonMapper, as the Hop Debezium transform emits)")
	cmd.Flags().StringVar(&posName, "position-name", "", "resumable: keep a named position (PostgreSQL: slot tidemark_pos_NAME, checkpoint --position-dir/NAME.json) and continue after the last printed record (empty: from the current position, storing nothing)")
	cmd.Flags().StringVar(&posDir, "position-dir", "tidemark-positions", "directory of --position-name's checkpoint file")
	cmd.Flags().BoolVar(&opts.Snapshot, "snapshot", false, "PostgreSQL: first read the tables' existing rows (op r) through the chunked, watermark-reconciled snapshot, while streaming; each run snapshots from scratch")
	cmd.Flags().BoolVar(&opts.DebeziumSchema, "debezium-schema", false, "with --format debezium: the {\"schema\", \"payload\"} form (Kafka Connect's JSON converter with schemas)")
	own := ownFlags(cmd)
	holder.BindFlags(cmd.Flags())
	// tail reads the stream through a temporary slot (a binlog dump) of its own: of the
	// configuration's flags only these matter to it.
	onlyConfigFlags(cmd, own, "source", "source-file", "name", "publication", "tables", "memory-budget", "log-level", "log-format")
	quietByDefault(cmd)
	return cmd
}

// ownFlags lists the flags cmd has defined so far.
func ownFlags(cmd *cobra.Command) map[string]bool {
	own := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { own[f.Name] = true })
	return own
}

// onlyConfigFlags hides from --help the configuration flags (BindFlags)
// other than keep that the command does not use; they are still accepted,
// so that one set of run flags works for every command.
func onlyConfigFlags(cmd *cobra.Command, own map[string]bool, keep ...string) {
	kept := map[string]bool{}
	for _, k := range keep {
		kept[k] = true
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !own[f.Name] && !kept[f.Name] {
			_ = cmd.Flags().MarkHidden(f.Name)
		}
	})
}

// quietByDefault is for commands whose output is stdout: their log level
// is warn unless --log-level (or log.level other than info) says
// otherwise, and --help says so.
func quietByDefault(cmd *cobra.Command) {
	cmd.Flags().Lookup("log-level").DefValue = "warn"
}

// usageArgs marks an argument-count error as a usage error (exit 2).
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// lakeFlags are the flags of the commands that only read the lake.
type lakeFlags struct {
	cfgPath   string
	warehouse string
	catalog   config.Secret
	source    config.Secret
	srcFile   string
	format    string
	// withSource: the command takes a source (--source, --source-file,
	// the config file's, TIDEMARK_SOURCE).
	withSource bool
	// mem is --memory-budget, for the commands that bind it (bindBudget).
	mem budgetFlag
	// delta: the command reads a Delta lake too (merge, maintain, status,
	// show, export), found by what the warehouse holds.
	delta bool
}

// bindBudget gives the command --memory-budget (resolve checks it).
func (l *lakeFlags) bindBudget(cmd *cobra.Command, usage string) {
	l.mem.bind(cmd.Flags(), usage)
}

func (l *lakeFlags) bind(cmd *cobra.Command, withSource bool) {
	l.withSource = withSource
	cmd.Flags().StringVar(&l.cfgPath, "config", "", "YAML configuration file (for warehouse, catalog and source)")
	cmd.Flags().StringVar(&l.warehouse, "warehouse", "", "lake directory or s3://bucket/prefix (default "+config.DefaultWarehouse+")")
	cmd.Flags().Var(&l.catalog, "catalog", "catalog URL: postgres:// or rest+http(s):// (default: SQLite at <warehouse>/catalog.db)")
	cmd.Flags().StringVar(&l.format, "format", "table", "output format: table or json")
	if withSource {
		cmd.Flags().Var(&l.source, "source", "source URL, to measure WAL lag live (optional; default $"+config.SourceEnv+")")
		cmd.Flags().StringVar(&l.srcFile, "source-file", "", "file holding the source URL, instead of --source")
	}
}

// lakeFormat is the format of the lake the command reads: Delta when it
// reads Delta lakes too and the warehouse holds one.
func (l *lakeFlags) lakeFormat() string {
	if l.delta && app.IsDeltaLake(l.warehouse) {
		return config.LakeDelta
	}
	return ""
}

func (l *lakeFlags) resolve() error {
	if !l.source.IsZero() && l.srcFile != "" {
		return usageError{errors.New("--source and --source-file are both given; pass one")}
	}
	if l.source.HasPassword() {
		fmt.Fprintln(os.Stderr, "tidemark: warning: "+config.PasswordWarning("--source", l.source.Reveal()))
	}
	var cfg *config.Config
	if l.cfgPath != "" {
		var err error
		if cfg, err = config.Load(l.cfgPath); err != nil {
			return err
		}
		if l.warehouse == "" {
			l.warehouse = cfg.Warehouse
		}
		if l.catalog.IsZero() {
			l.catalog = cfg.Catalog
		}
		if l.withSource && l.source.IsZero() && l.srcFile == "" {
			if !cfg.Source.IsZero() && cfg.SourceFile != "" {
				return &config.Error{Path: "source_file", File: l.cfgPath, Msg: "source and source_file are both set; keep one"}
			}
			l.source, l.srcFile = cfg.Source, cfg.SourceFile
		}
	}
	if l.srcFile != "" {
		s, err := config.ReadSourceFile(l.srcFile)
		if err != nil {
			return &config.Error{Path: "source_file", Msg: err.Error()}
		}
		l.source = s
	}
	if err := l.mem.resolve(cfg); err != nil {
		return err
	}
	if l.withSource && l.source.IsZero() {
		l.source = config.NewSecret(strings.TrimSpace(os.Getenv(config.SourceEnv)))
	}
	if l.warehouse == "" {
		l.warehouse = config.DefaultWarehouse
	}
	if err := app.CheckLake(l.warehouse, l.catalog, l.lakeFormat()); err != nil {
		return usageError{err}
	}
	if l.format != "table" && l.format != "json" {
		return usageError{fmt.Errorf("--format: want table or json, got %q", l.format)}
	}
	return nil
}

func showCmd(ctx context.Context) *cobra.Command {
	var (
		lf    lakeFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "show --warehouse DIR TABLE [--limit N]",
		Short: "Print the rows of a lake table, e.g. bronze.shop.public.orders",
		Long: "Show prints the rows of a lake table: bronze.<source>.<schema>.<table> (the change log, in\n" +
			"source order: the first --limit changes by (cdc_source_lsn, cdc_seq)), silver.<source>.<schema>.<table>\n" +
			"(the replica, by key), or bronze.<source>._messages / ._dead_letter. The table format prints\n" +
			"cdc_source_lsn as stored (an integer) and in PostgreSQL's X/Y notation, as status prints positions.",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			lf.delta = true // a Delta lake too
			if err := lf.resolve(); err != nil {
				return err
			}
			return app.Show(ctx, lf.warehouse, lf.catalog, args[0], limit, lf.format, os.Stdout)
		},
	}
	lf.bind(cmd, false)
	cmd.Flags().IntVar(&limit, "limit", 100, "print at most N rows (0: all)")
	return cmd
}

func statusCmd(ctx context.Context) *cobra.Command {
	var lf lakeFlags
	cmd := &cobra.Command{
		Use:   "status --warehouse DIR [--source URL]",
		Short: "Per table: snapshot progress, committed position, watermark and lag",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lf.delta = true // a Delta lake too
			if err := lf.resolve(); err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			return app.Status(sctx, lf.warehouse, lf.catalog, lf.source, lf.format, os.Stdout)
		},
	}
	lf.bind(cmd, true)
	return cmd
}

// resolveConfig builds a command's configuration (config.Resolve) and
// warns, once, when the source password is on the command line.
func resolveConfig(cmd *cobra.Command, cfgPath string) (*config.Config, error) {
	cfg, err := config.Resolve(cmd.Flags(), cfgPath)
	if err != nil {
		return nil, err
	}
	log := app.NewLogger(cfg)
	if cfg.PasswordOnCommandLine() {
		log.Warn(config.PasswordWarning("--source", cfg.Source.Reveal()))
	}
	app.WarnDeprecations(cfg, log)
	return cfg, nil
}
