// Package app is tidemark's composition root: it builds the parts from a
// configuration, starts and stops them in order, and retries transient
// failures. cmd/tidemark only parses flags and calls into here.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lakepkg "github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/lake/storage"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// OpenCatalog opens the lake catalog of cfg, creating it if needed.
func OpenCatalog(ctx context.Context, warehouse string, catalog config.Secret) (*lake.Catalog, error) {
	return openCatalog(ctx, lake.Config{Warehouse: warehouse, CatalogURI: catalog.Reveal()}, catalog)
}

// OpenCatalogReadOnly opens an existing lake catalog for reading only
// (status, show): a user who may only read the warehouse can run them.
func OpenCatalogReadOnly(ctx context.Context, warehouse string, catalog config.Secret) (*lake.Catalog, error) {
	return openCatalog(ctx, lake.Config{Warehouse: warehouse, CatalogURI: catalog.Reveal(), ReadOnly: true}, catalog)
}

func openCatalog(ctx context.Context, cfg lake.Config, catalog config.Secret) (*lake.Catalog, error) {
	warehouse := cfg.Warehouse
	if IsDeltaLake(warehouse) {
		return nil, fault.With(fault.ErrBadConfig, deltaLakeRefused(warehouse), nil)
	}
	cat, err := lake.Open(ctx, cfg)
	if err != nil {
		return nil, config.RedactError(fmt.Errorf("open the lake at %s: %w", warehouse, err), catalog)
	}
	return cat, nil
}

// OpenLake opens the lake of cfg in its table format (lake.format): an
// Iceberg catalog (SQLite in the warehouse, or cfg.Catalog), or the Delta
// warehouse directory, which is its own catalog.
func OpenLake(ctx context.Context, cfg *config.Config) (lakepkg.Catalog, error) {
	if cfg.Lake.Format != config.LakeDelta {
		return OpenCatalog(ctx, cfg.Warehouse, cfg.Catalog)
	}
	if _, err := os.Stat(filepath.Join(cfg.Warehouse, "catalog.db")); err == nil {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("the warehouse at %s holds an Iceberg catalog (catalog.db): a Delta lake needs a warehouse of its own (or set lake.format: iceberg)", cfg.Warehouse), nil)
	}
	cat, err := delta.OpenCatalog(cfg.Warehouse)
	if err != nil {
		return nil, fmt.Errorf("open the Delta lake at %s: %w", cfg.Warehouse, err)
	}
	return cat, nil
}

// CheckLake says why a command that reads a lake of format (lake.format;
// "" for the commands that read Iceberg lakes only) cannot use warehouse:
// an Iceberg command given a Delta lake, a Delta lake without its bronze
// namespace, an Iceberg lake without catalog.db (and no catalog URL). nil
// when the warehouse looks like a lake of that format.
func CheckLake(warehouse string, catalog config.Secret, format string) error {
	if storage.IsRemote(warehouse) {
		if _, err := storage.ParseS3(warehouse); err != nil {
			return err
		}
		if format == config.LakeDelta {
			return fmt.Errorf("no tidemark Delta lake at %s: Delta lakes are local directories only", warehouse)
		}
		if catalog.IsZero() {
			return fmt.Errorf("the warehouse %s is on S3: name its catalog with --catalog (rest+https://host:port or postgres://…)", warehouse)
		}
		return nil
	}
	if format == config.LakeDelta {
		if !IsDeltaLake(warehouse) {
			return fmt.Errorf("no tidemark Delta lake at %s (no bronze/%s): check --warehouse and --lake-format", warehouse, delta.NamespaceFile)
		}
		return nil
	}
	if IsDeltaLake(warehouse) {
		return errors.New(deltaLakeRefused(warehouse))
	}
	if catalog.IsZero() {
		if _, err := os.Stat(filepath.Join(warehouse, "catalog.db")); err != nil {
			return fmt.Errorf("no tidemark lake at %s (no catalog.db): check --warehouse", warehouse)
		}
	}
	return nil
}

func deltaLakeRefused(warehouse string) string {
	return fmt.Sprintf("the warehouse at %s holds Delta tables: `tidemark run` writes them with lake.format: delta; verify, merge, maintain, resnapshot, status, show and export find them (docs/delta.md)", warehouse)
}

// OpenLakeAt opens the lake at warehouse for the commands that read both
// formats (merge, maintain): the Delta catalog when it holds a Delta lake,
// else the Iceberg catalog.
func OpenLakeAt(ctx context.Context, warehouse string, catalog config.Secret) (lakepkg.Catalog, error) {
	if IsDeltaLake(warehouse) {
		return delta.OpenCatalog(strings.TrimPrefix(warehouse, "file://"))
	}
	return OpenCatalog(ctx, warehouse, catalog)
}

// OpenLakeReadOnly is OpenLakeAt for the commands that only read (status,
// show, export): an Iceberg catalog opened read-only.
func OpenLakeReadOnly(ctx context.Context, warehouse string, catalog config.Secret) (lakepkg.Catalog, error) {
	if IsDeltaLake(warehouse) {
		return delta.OpenCatalog(strings.TrimPrefix(warehouse, "file://"))
	}
	return OpenCatalogReadOnly(ctx, warehouse, catalog)
}

// IsDeltaLake says whether warehouse holds a tidemark Delta lake (its
// bronze namespace directory).
func IsDeltaLake(warehouse string) bool {
	if storage.IsRemote(warehouse) {
		return false // Delta lakes are local (config refuses lake.format: delta on S3)
	}
	_, err := os.Stat(filepath.Join(strings.TrimPrefix(warehouse, "file://"), "bronze", delta.NamespaceFile))
	return err == nil
}

// ParseTables turns "schema.table" strings into table ids, by PostgreSQL's
// identifier rules as config.ParseTableName reads them (unquoted names
// fold to lower case; "Quoted"."Names" are kept as written), so that the
// tables: list, verify --tables and the TABLE arguments of merge and
// maintain all name a table the same way. The error is a configuration error.
func ParseTables(list []string) ([]change.TableID, error) {
	out := make([]change.TableID, 0, len(list))
	for _, s := range list {
		t, err := config.ParseTableName(s)
		if err != nil {
			return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("table %q", s), err)
		}
		out = append(out, change.TableID{Schema: t.Schema, Name: t.Table})
	}
	return out, nil
}

func captureOptions(cfg *config.Config) (postgres.Options, error) {
	tables, err := ParseTables(cfg.Tables)
	if err != nil {
		return postgres.Options{}, err
	}
	declared, err := cfg.MergeKeys.Parsed()
	if err != nil {
		return postgres.Options{}, err
	}
	var mergeKeys map[change.TableID][]string
	for t, cols := range declared {
		if mergeKeys == nil {
			mergeKeys = map[change.TableID][]string{}
		}
		mergeKeys[change.TableID{Schema: t.Schema, Name: t.Table}] = cols
	}
	spool := spoolDir(cfg)
	// commit_bytes and chunk_bytes were checked against (or derived from)
	// memory_budget by config.Validate.
	return postgres.Options{
		Slot:              cfg.Slot,
		Publication:       cfg.Publication,
		Tables:            tables,
		MergeKeys:         mergeKeys,
		SpoolDir:          spool,
		CommitInterval:    time.Duration(cfg.CommitInterval),
		CommitBytes:       int64(cfg.CommitBytes),
		MaxValueBytes:     int64(cfg.MaxValueBytes),
		Types:             typemap.Options{TimeAs: typemap.TimeAs(cfg.TimeAs)},
		HeartbeatInterval: time.Duration(cfg.HeartbeatInterval),
		PublicationPoll:   time.Duration(cfg.PublicationPoll),
		Snapshot: postgres.SnapshotOptions{
			Enabled:     cfg.Snapshot.IsEnabled(),
			Parallelism: cfg.Snapshot.Parallelism,
			ChunkRows:   cfg.Snapshot.ChunkRows,
			ChunkBytes:  int64(cfg.Snapshot.ChunkBytes),
			// A consumer of a Kafka topic applies events in topic order,
			// not by position as silver does: a chunk's rows must come at
			// its high watermark, the keys changed in its window dropped.
			DropChanged: cfg.SinkType() == config.SinkKafka,
		},
	}, nil
}

// spoolDir is where the capture spills large transactions (it empties it
// when it starts).
func spoolDir(cfg *config.Config) string {
	if cfg.SpoolDir != "" {
		return cfg.SpoolDir
	}
	return filepath.Join(cfg.Warehouse, "_tidemark", "spool")
}

// SilverOptions are the merge options of cfg for tidemark run.
func SilverOptions(cfg *config.Config) silver.Options {
	buckets := cfg.Silver.Buckets
	if buckets == 0 {
		buckets = -1 // unpartitioned
	}
	return silver.Options{
		Buckets: buckets,
		// --silver-buckets not given: 16 at most, fewer for a small table.
		AdaptBuckets: !cfg.BucketsGiven(),
		// The merger's own compactions write what `tidemark maintain` does.
		TargetFileSize: maintain.DefaultTargetFileSize,
		DeleteMode:     cfg.Silver.DeleteMode,
		SoftDeletes:    cfg.Silver.SoftDeletesOn(),
		DropColumns:    cfg.Silver.DropColumns(),
		MaxChanges:     int64(cfg.Silver.MaxChanges),
		MaxBytes:       int64(cfg.MemoryBudget / config.SilverShare),
		IdleCommit:     time.Minute,
		// Beside the capture's spool, not in it (the capture empties it).
		SpillDir: spoolDir(cfg) + "-silver",
	}
}

// Run runs the pipeline until ctx is cancelled (clean stop: flush and
// confirm) or a non-transient error occurs. Transient errors are retried
// with exponential backoff; when no progress has been made for
// cfg.Retry.MaxElapsed the last error is returned, still marked transient.
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger) (err error) {
	// A panic (a bug) in this goroutine or one of ours becomes a redacted
	// error with exit code 1, never the runtime's raw print of its value.
	defer func() { err = config.RedactError(err, cfg.Secrets()...) }()
	defer fault.Recover("pipeline", &err)
	defer applyMemoryLimit(cfg, log)()
	if cfg.SinkType() == config.SinkKafka {
		return runToKafka(ctx, cfg, log)
	}
	return runLake(ctx, cfg, log, func(ctx context.Context, lr *lakeRun) error { return captureToLake(ctx, cfg, lr, log) })
}

// lakeRun is what a command that writes the lake (run, load) runs beside
// its writer: the catalog, silver merged beside it, maintenance, metrics.
type lakeRun struct {
	cat    lakepkg.Catalog
	merger *silver.Merger // nil: silver disabled
	met    *metrics
	reg    *prometheus.Registry
}

// runLake opens cfg's lake, starts silver and maintenance for pipeline
// cfg.Name beside write, runs write, then stops them: a silver error that
// needs an operator stops write too, and is what runLake returns.
func runLake(ctx context.Context, cfg *config.Config, log *slog.Logger, write func(ctx context.Context, lr *lakeRun) error) (err error) {
	cat, err := OpenLake(ctx, cfg)
	if err != nil {
		if stoppedBeforeStart(ctx, err) {
			return nil
		}
		return err
	}
	defer cat.Close()
	// Silver is merged beside the capture; a silver error that needs an
	// operator stops the capture too, and is what Run returns.
	ctx, stopSilver := context.WithCancelCause(ctx)
	silverDone := make(chan error, 1)
	reg := prometheus.NewRegistry()
	met := newMetrics(reg, cfg.Name, int64(cfg.MemoryBudget))
	// Silver's merges and maintenance take turns by table: each is bounded
	// by the budget, and both at once were not (a bronze compaction during
	// a catch-up after a crash storm took the run over memory_budget).
	var heavy sync.Mutex
	var merger *silver.Merger
	if cfg.Silver.IsEnabled() {
		sopts := SilverOptions(cfg)
		sopts.Observer = met
		sopts.Exclusive = &heavy
		merger = silver.NewMerger(cat, sopts, log)
	}
	go func() {
		if merger == nil {
			silverDone <- nil
			return
		}
		m := merger
		serr := fault.Guard("silver merge", func() error { return m.Run(ctx, cfg.Name, time.Duration(cfg.Silver.Every)) })()
		if serr != nil {
			stopSilver(serr)
		}
		silverDone <- serr
	}()
	defer func() {
		stopSilver(nil)
		if serr := <-silverDone; serr != nil && err == nil {
			err = serr
		}
	}()
	// Maintenance (compaction, snapshot expiry, orphan files) beside the
	// capture; it never stops the pipeline. Waited for before cat closes.
	maintDone := make(chan struct{})
	var maintPanic error // set before maintDone closes
	go func() {
		defer close(maintDone)
		// Maintenance errors are logged and retried by Loop; a panic is a
		// bug and stops the pipeline like a silver error.
		if perr := fault.Guard("maintenance", func() error {
			maintain.New(cat, maintain.Options{WithoutSilver: !cfg.Silver.IsEnabled(), OnRun: met.maintained, Exclusive: &heavy}, log).Loop(ctx, cfg.Name, maintain.DefaultEvery)
			return nil
		})(); perr != nil {
			maintPanic = perr
			stopSilver(perr)
		}
	}()
	defer func() {
		stopSilver(nil)
		<-maintDone
		if maintPanic != nil && err == nil {
			err = maintPanic
		}
	}()
	// Gold tables beside silver: checked against the lake first (a bad
	// query is a configuration error before anything runs), then kept
	// current; a failed refresh never stops the pipeline.
	goldDone, err := startGold(ctx, cat, cfg, &heavy, met, log)
	if err != nil {
		if stoppedBeforeStart(ctx, err) {
			return nil
		}
		return err
	}
	defer func() {
		stopSilver(nil)
		goldDone()
	}()
	if cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddr, reg, log); err != nil {
			return err
		}
	}
	return write(ctx, &lakeRun{cat: cat, merger: merger, met: met, reg: reg})
}

// captureToLake is Run's writer: the source's capture sessions into bronze,
// retried as transient errors allow.
func captureToLake(ctx context.Context, cfg *config.Config, lr *lakeRun, log *slog.Logger) error {
	cat, merger, met := lr.cat, lr.merger, lr.met
	src, err := sourceFor(cfg.Source.Reveal())
	if err != nil {
		return err
	}
	newCapture, err := src.open(cfg, log)
	if err != nil {
		return err
	}
	retry := newRetrier(cfg, met, log)
	var lastLog time.Time
	var committedAtLog int64
	started := time.Now()
	live := watchLogEnd(ctx, src, cfg.Source.Reveal())
	log.Info("tidemark starting", "source", cfg.Name, "warehouse", cfg.Warehouse, "slot", cfg.Slot, "publication", cfg.Publication)
	for {
		w, err := bronze.NewWriter(ctx, cat, cfg.Name, cfg.Slot, log)
		if err != nil {
			if stoppedBeforeStart(ctx, err) {
				return nil
			}
			return err
		}
		w.Observe(met)
		onProgress := func(cp pipeline.Checkpoint) {
			if merger != nil {
				merger.Wake() // a gated silver table is checked now
			}
			lag := live.lag(src, cp)
			met.progress(cp, lag)
			retry.progress()
			if time.Since(lastLog) >= 10*time.Second {
				n := w.Committed()
				since := lastLog
				if since.IsZero() {
					since = started // the first line: the rate since the start
				}
				rate := float64(n-committedAtLog) / max(time.Since(since).Seconds(), 0.001)
				confirmed, _ := src.position(cp, 0)
				lagBytes := max(lag, 0)
				log.Info("capture progress", "confirmed_lsn", confirmed, "rows_committed", n,
					"rows_per_sec", int64(rate), "lag_bytes", lagBytes, "lag_seconds", lagSeconds(cp.Watermark))
				lastLog, committedAtLog = time.Now(), n
			}
		}
		capt := newCapture(w, onProgress)
		met.sessions.Inc()
		err = capt.Run(ctx)
		capt.Close()
		w.Close()
		committedAtLog -= w.Committed()
		if committedAtLog < 0 {
			committedAtLog = 0
		}
		if again, err := retry.after(ctx, err); !again {
			return err
		}
	}
}

// retrier decides, after a capture session ends, whether Run starts another:
// transient errors are retried with exponential backoff until no progress
// has been made for cfg.Retry.MaxElapsed.
type retrier struct {
	cfg          *config.Config
	met          *metrics
	log          *slog.Logger
	backoff      time.Duration
	failingSince time.Time // start of the current run of transient failures
}

func newRetrier(cfg *config.Config, met *metrics, log *slog.Logger) *retrier {
	return &retrier{cfg: cfg, met: met, log: log, backoff: time.Duration(cfg.Retry.InitialBackoff)}
}

// progress notes a durable flush: the failures so far are behind.
func (r *retrier) progress() {
	r.failingSince = time.Time{}
	r.backoff = time.Duration(r.cfg.Retry.InitialBackoff)
}

// after takes the error a session ended with (nil: a clean stop) and says
// whether to start another (after waiting out the backoff), or what Run
// returns.
func (r *retrier) after(ctx context.Context, err error) (again bool, ret error) {
	cfg := r.cfg
	if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return false, nil
	}
	err = config.RedactError(err, cfg.Secrets()...)
	if ctx.Err() != nil {
		// Stopping, but the final flush failed: nothing was confirmed
		// past the lake, and the exit code must say it was not clean.
		return false, err
	}
	if fault.ClassOf(err) != fault.Transient && !diskFull(err) {
		r.met.sessionError(err, false)
		return false, err
	}
	if r.failingSince.IsZero() {
		r.failingSince = time.Now()
	}
	if time.Since(r.failingSince) > time.Duration(cfg.Retry.MaxElapsed) {
		r.met.sessionError(err, false)
		return false, &fault.GaveUpError{After: time.Duration(cfg.Retry.MaxElapsed), Err: err}
	}
	r.met.sessionError(err, true)
	r.met.restarts.Inc()
	attrs := []any{"error", err.Error(), "retry_in", r.backoff.String()}
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Code != "" && fe.Code != "transient" {
		attrs = append(attrs, "code", fe.Code)
	}
	r.log.Warn("transient error, retrying", attrs...)
	select {
	case <-ctx.Done():
		return false, nil
	case <-time.After(r.backoff):
	}
	r.backoff = min(r.backoff*2, time.Duration(cfg.Retry.MaxBackoff))
	return true, nil
}

// stoppedBeforeStart reports whether err is only the cancellation of a
// stop (SIGTERM, SIGINT) that arrived while the pipeline was still starting:
// nothing was read or acknowledged yet, so it is a clean stop (exit 0), as
// a stop at any later moment is.
func stoppedBeforeStart(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// WarnDeprecations logs each deprecated key the config file gave: where,
// and its new spelling (never its value). Every command that reads the
// config calls it once, at start.
func WarnDeprecations(cfg *config.Config, log *slog.Logger) {
	for _, d := range cfg.Deprecations {
		attrs := []any{"key", d.Key, "use", d.Use, "file", d.File}
		if d.Line > 0 {
			attrs = append(attrs, "line", d.Line)
		}
		log.Warn("deprecated config key", attrs...)
	}
}

// diskFull reports a full disk (the spool, the warehouse): nothing past the
// lake was acknowledged, and freeing space ends it, so it is retried.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func lagSeconds(wm time.Time) float64 {
	if wm.IsZero() {
		return -1
	}
	d := time.Since(wm).Seconds()
	if d < 0 {
		return 0
	}
	return float64(int64(d*10)) / 10
}

// NewLogger builds the process logger: text or JSON on stderr, with every
// string passed through the redactor so no secret reaches a log line.
func NewLogger(cfg *config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Log.SlogLevel()}
	var h slog.Handler
	if cfg.Log.Format == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	} else {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(&redactHandler{h: h, secrets: cfg.Secrets()})
}

// logEndWatch holds the source's log end as last measured (logEnd), for
// the lag of the progress line and of tidemark_capture_lag_bytes: the end
// a checkpoint records is what the server last told the stream, which
// while it catches up is about the stream's own position (PostgreSQL's
// walsender reports the WAL it has sent, not the WAL's end).
type logEndWatch struct{ end atomic.Uint64 }

// logEndEvery is how often watchLogEnd measures the source's log end.
const logEndEvery = 10 * time.Second

// watchLogEnd measures the log end of the source at conn at once (in the
// background, so an unreachable source does not hold up the start; the
// first progress line, after the first flush, then has it), then every
// logEndEvery until ctx is done. A failed measurement keeps the last one
// (the capture reports its own errors); a source without logEnd leaves it 0.
func watchLogEnd(ctx context.Context, src *source, conn string) *logEndWatch {
	w := &logEndWatch{}
	if src.logEnd == nil {
		return w
	}
	measure := func() {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if end, err := src.logEnd(mctx, conn); err == nil && end > 0 {
			w.end.Store(end)
		}
	}
	go func() {
		measure()
		t := time.NewTicker(logEndEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				measure()
			}
		}
	}()
	return w
}

// lag is how many bytes of the source's log lie past what cp confirms:
// up to the larger of the end measured (watchLogEnd) and the end recorded
// with cp (-1: unknown).
func (w *logEndWatch) lag(src *source, cp pipeline.Checkpoint) int64 {
	_, lag := src.position(cp, 0)
	if end := w.end.Load(); end > 0 {
		if _, l := src.position(cp, end); l > lag {
			lag = l
		}
	}
	return lag
}
