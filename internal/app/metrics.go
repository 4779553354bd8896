package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// The pipeline's Prometheus metrics, documented in docs/metrics.md (a test
// checks that the two lists agree). Names are tidemark_<subsystem>_<name>_<unit>;
// labels come from bounded sets only: source (the pipeline's name), table
// (schema.table of a captured table), op, layer, code, class. Never a key,
// a value or a position.

// Label values of layer: where an error happened or a retry was made.
const (
	layerCapture  = "capture"
	layerSilver   = "silver"
	layerMaintain = "maintain"
	layerGold     = "gold"
)

// latencyBuckets are the end-to-end latency buckets, in seconds: from a
// fraction of the default commit interval to an hour behind.
var latencyBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600}

// durationBuckets are the silver merge step durations, in seconds.
var durationBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// opLabels are the op label values, by bronze.OpIndex.
var opLabels = [bronze.NumOps]string{bronze.OpIndexRead: "read", bronze.OpIndexInsert: "insert",
	bronze.OpIndexUpdate: "update", bronze.OpIndexDelete: "delete", bronze.OpIndexTruncate: "truncate"}

// metrics are the pipeline's metrics. It is the bronze.Observer and the
// silver.Observer the composition root passes to the writer and the merger.
type metrics struct {
	source string

	// Capture, per source.
	rows      *prometheus.CounterVec // by table
	flushes   prometheus.Counter
	confirmed prometheus.Gauge
	lagBytes  prometheus.Gauge
	watermark atomic.Int64 // unix nanoseconds of the last flush's watermark (0: none)
	classes   *prometheus.CounterVec
	sessions  prometheus.Counter
	restarts  prometheus.Counter

	// Bronze and snapshot, per table.
	changes     *prometheus.CounterVec // by table, op
	fileBytes   *prometheus.CounterVec
	commits     *prometheus.CounterVec
	lastCommit  *prometheus.GaugeVec
	deadLetters *prometheus.CounterVec
	bronzeLat   *prometheus.HistogramVec
	snapRows    *prometheus.GaugeVec
	snapEst     *prometheus.GaugeVec
	snapDone    *prometheus.GaugeVec
	snapChunks  *prometheus.CounterVec

	// Silver, per table.
	merges      *prometheus.CounterVec
	mergeTook   *prometheus.HistogramVec
	merged      *prometheus.CounterVec
	upserted    *prometheus.CounterVec
	deleted     *prometheus.CounterVec
	silverDead  *prometheus.CounterVec
	published   *prometheus.GaugeVec
	silverLat   *prometheus.HistogramVec
	behindCount *prometheus.GaugeVec // commits
	behindRows  *prometheus.GaugeVec // changes
	loadLag     *prometheus.GaugeVec // tidemark load: records of the table's topic not loaded yet
	behind      *behindCollector     // seconds, at scrape time

	// Maintenance, per source.
	maintRuns *prometheus.CounterVec // by result
	maintLast prometheus.Gauge

	// Gold, per gold table (label gold: its name, from the config).
	goldRuns *prometheus.CounterVec // by gold, result
	goldTook *prometheus.HistogramVec
	goldLast *prometheus.GaugeVec
	goldRows *prometheus.GaugeVec

	// Errors and retries, by layer (and code).
	errs    *prometheus.CounterVec
	retries *prometheus.CounterVec

	// collectors is every collector registered, for the docs test.
	collectors []prometheus.Collector

	mu     sync.Mutex
	tables map[change.TableID]*tableMetrics
}

// tableMetrics are one table's metric children, resolved once per table:
// what a commit or a merge counts needs no lookup by label values.
type tableMetrics struct {
	m           *metrics
	id          change.TableID
	rows        prometheus.Counter
	ops         [bronze.NumOps]prometheus.Counter
	fileBytes   prometheus.Counter
	commits     prometheus.Counter
	lastCommit  prometheus.Gauge
	deadLetters prometheus.Counter
	bronzeLat   prometheus.Observer
	snapRows    prometheus.Gauge
	snapEst     prometheus.Gauge
	snapDone    prometheus.Gauge
	snapChunks  prometheus.Counter

	merges    prometheus.Counter
	mergeTook prometheus.Observer
	merged    prometheus.Counter
	upserted  prometheus.Counter
	deleted   prometheus.Counter
	sDead     prometheus.Counter
	published prometheus.Gauge
	silverLat prometheus.Observer
	behindN   prometheus.Gauge
	behindCh  prometheus.Gauge
}

var (
	_ bronze.Observer      = (*metrics)(nil)
	_ bronze.TableObserver = (*tableMetrics)(nil)
	_ silver.Observer      = (*metrics)(nil)
)

func newMetrics(reg prometheus.Registerer, source string, memoryBudget int64) *metrics {
	cl := prometheus.Labels{"source": source}
	tl := []string{"table"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: cl, Buckets: buckets}, tl)
	}
	m := &metrics{
		source: source,
		rows:   counter("tidemark_bronze_rows_committed_total", "Rows committed to the table's bronze table (changes and snapshot rows).", tl...),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_flushes_total",
			Help: "Durable flushes (lake commits followed by a checkpoint).", ConstLabels: cl}),
		confirmed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_confirmed_lsn",
			Help: "LSN confirmed to PostgreSQL (all changes up to it are durable in the lake).", ConstLabels: cl}),
		lagBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_lag_bytes",
			Help: "Server WAL end minus the confirmed LSN at the last flush.", ConstLabels: cl}),
		classes: counter("tidemark_capture_errors_total", "Errors that ended a capture session, by class.", "class"),
		sessions: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_sessions_total",
			Help: "Capture sessions started (1 + restarts).", ConstLabels: cl}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_restarts_total",
			Help: "Capture sessions started again after a session failed with a retryable error.", ConstLabels: cl}),

		changes:     counter("tidemark_bronze_changes_committed_total", "Rows committed to the table's bronze table, by operation.", "table", "op"),
		fileBytes:   counter("tidemark_bronze_committed_bytes_total", "Bytes of the data files committed to the table's bronze table.", tl...),
		commits:     counter("tidemark_bronze_commits_total", "Commits of the table's bronze table.", tl...),
		lastCommit:  gauge("tidemark_bronze_last_commit_timestamp_seconds", "When the table's bronze table last committed (Unix time).", tl...),
		deadLetters: counter("tidemark_bronze_dead_letters_total", "Rows of the table the capture could not decode, committed to bronze's _dead_letter table.", tl...),
		bronzeLat: histogram("tidemark_bronze_latency_seconds",
			"End-to-end latency: source commit of a transaction to its changes of the table durable in bronze (checkpoint recorded); one observation per transaction and table.", latencyBuckets),
		snapRows:   gauge("tidemark_snapshot_read_rows", "Rows the table's current (or last) snapshot has read and committed.", tl...),
		snapEst:    gauge("tidemark_snapshot_estimated_rows", "Rows the source estimated the table to hold when its snapshot started.", tl...),
		snapDone:   gauge("tidemark_snapshot_done", "1 when the table's snapshot is complete, else 0.", tl...),
		snapChunks: counter("tidemark_snapshot_chunks_committed_total", "Snapshot chunks of the table committed to bronze.", tl...),

		merges:    counter("tidemark_silver_merges_total", "Silver commits of the table (merge steps) since the process started.", tl...),
		mergeTook: histogram("tidemark_silver_merge_duration_seconds", "Duration of a silver merge step, from reading bronze to its commit.", durationBuckets),
		merged:    counter("tidemark_silver_changes_merged_total", "Bronze changes (rows) merged into the table's silver table.", tl...),
		upserted:  counter("tidemark_silver_rows_upserted_total", "Silver rows written (inserted or replaced) by merges.", tl...),
		deleted:   counter("tidemark_silver_rows_deleted_total", "Silver rows removed (or soft-deleted) by merges.", tl...),
		silverDead: counter("tidemark_silver_dead_letters_total",
			"Changes silver could not merge, committed to silver's _dead_letter table.", tl...),
		published: gauge("tidemark_silver_published", "1 when the table's silver table is published (readers see it), else 0.", tl...),
		silverLat: histogram("tidemark_silver_latency_seconds",
			"End-to-end latency: source commit of a transaction to its changes of the table visible in silver; one observation per transaction and table.", latencyBuckets),
		behindCount: gauge("tidemark_silver_behind_commits", "Bronze commits of the table silver has not merged, as of its last merge.", tl...),
		behindRows:  gauge("tidemark_silver_behind_changes", "Changes (bronze rows) in those commits.", tl...),
		loadLag: gauge("tidemark_load_lag_records",
			"tidemark load: records of the table's topic (all partitions) not loaded yet, measured at each capture checkpoint the loader reads up to.", tl...),

		maintRuns: counter("tidemark_maintain_runs_total", "Runs of the maintenance beside the capture (compaction, snapshot expiry, orphan files), by result: ok or failed.", "result"),
		maintLast: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_maintain_last_success_timestamp_seconds",
			Help: "When a maintenance run last succeeded (Unix time; 0: not yet).", ConstLabels: cl}),
		goldRuns: counter("tidemark_gold_refreshes_total", "Refreshes of the gold table that computed it (a refresh skipped because no silver table it reads moved is not counted), by result: ok or failed.", "gold", "result"),
		goldTook: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tidemark_gold_refresh_duration_seconds",
			Help: "Duration of a gold refresh that computed the table: reading silver, running the SQL, the commit.", ConstLabels: cl, Buckets: durationBuckets}, []string{"gold"}),
		goldLast: gauge("tidemark_gold_last_success_timestamp_seconds", "When the gold table was last refreshed successfully by this process (Unix time).", "gold"),
		goldRows: gauge("tidemark_gold_rows", "Rows of the gold table as of its last successful refresh.", "gold"),
		errs: counter("tidemark_errors_total",
			"Errors by layer and named code (internal/fault; 'transient' for a retryable error without one, 'unclassified' for an error tidemark did not classify).", "layer", "code"),
		retries: counter("tidemark_retries_total", "Failures that are retried: a capture session restarted, a silver merge or a maintenance run tried again at the next run.", "layer"),
		tables:  map[change.TableID]*tableMetrics{},
	}
	m.behind = &behindCollector{desc: prometheus.NewDesc("tidemark_silver_behind_seconds",
		"How far silver is behind bronze: the age of the oldest bronze commit of the table silver has not merged, as of its last merge (0: none).",
		tl, cl), at: map[change.TableID]silver.Backlog{}}
	lagSec := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tidemark_capture_lag_seconds",
		Help: "Now minus the commit time of the last transaction durable in bronze (the watermark; heartbeats move it on an idle source).", ConstLabels: cl},
		func() float64 {
			ns := m.watermark.Load()
			if ns == 0 {
				return 0
			}
			return max(0, time.Since(time.Unix(0, ns)).Seconds())
		})
	heap := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tidemark_memory_heap_live_bytes",
		Help: "Go heap held by live objects after the last garbage collection.", ConstLabels: cl}, liveHeapBytes)
	budget := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_memory_budget_bytes",
		Help: "memory_budget: the resident memory the process keeps within.", ConstLabels: cl})
	budget.Set(float64(memoryBudget))
	lakeRetries := &lakeRetryCollector{desc: prometheus.NewDesc("tidemark_lake_retries_total",
		"Retries the lake made inside one operation, which callers never saw fail, by reason: commit_conflict (another writer committed first: the commit was made again on the new head), catalog_busy (the SQLite catalog was locked), file_vanished (a file went away while a table directory was listed). Process-wide.",
		[]string{"reason"}, cl)}
	m.collectors = []prometheus.Collector{lakeRetries, m.rows, m.flushes, m.confirmed, m.lagBytes, lagSec, m.classes, m.sessions, m.restarts,
		m.changes, m.fileBytes, m.commits, m.lastCommit, m.deadLetters, m.bronzeLat, m.snapRows, m.snapEst, m.snapDone, m.snapChunks,
		m.merges, m.mergeTook, m.merged, m.upserted, m.deleted, m.silverDead, m.published, m.silverLat, m.behindCount, m.behindRows, m.behind, m.loadLag,
		m.maintRuns, m.maintLast, m.goldRuns, m.goldTook, m.goldLast, m.goldRows, m.errs, m.retries, heap, budget}
	reg.MustRegister(m.collectors...)
	return m
}

// loadLagged records a table's load lag (tidemark load).
func (m *metrics) loadLagged(id change.TableID, records int64) {
	m.loadLag.WithLabelValues(id.String()).Set(float64(records))
}

// liveHeapBytes reads the live heap from the runtime.
func liveHeapBytes() float64 {
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return math.NaN()
	}
	return float64(s[0].Value.Uint64())
}

// table returns id's metric children, resolving them the first time.
func (m *metrics) table(id change.TableID) *tableMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.tables[id]; ok {
		return t
	}
	name := id.Schema + "." + id.Name
	t := &tableMetrics{m: m, id: id,
		rows: m.rows.WithLabelValues(name), fileBytes: m.fileBytes.WithLabelValues(name),
		commits: m.commits.WithLabelValues(name), lastCommit: m.lastCommit.WithLabelValues(name),
		deadLetters: m.deadLetters.WithLabelValues(name), bronzeLat: m.bronzeLat.WithLabelValues(name),
		snapRows: m.snapRows.WithLabelValues(name), snapEst: m.snapEst.WithLabelValues(name), snapDone: m.snapDone.WithLabelValues(name),
		snapChunks: m.snapChunks.WithLabelValues(name),
		merges:     m.merges.WithLabelValues(name), mergeTook: m.mergeTook.WithLabelValues(name), merged: m.merged.WithLabelValues(name),
		upserted: m.upserted.WithLabelValues(name), deleted: m.deleted.WithLabelValues(name), sDead: m.silverDead.WithLabelValues(name),
		published: m.published.WithLabelValues(name), silverLat: m.silverLat.WithLabelValues(name),
		behindN: m.behindCount.WithLabelValues(name), behindCh: m.behindRows.WithLabelValues(name),
	}
	for i, op := range opLabels {
		t.ops[i] = m.changes.WithLabelValues(name, op)
	}
	m.tables[id] = t
	return t
}

// Table implements bronze.Observer.
func (m *metrics) Table(id change.TableID) bronze.TableObserver { return m.table(id) }

// Committed implements bronze.TableObserver.
func (t *tableMetrics) Committed(c bronze.Commit) {
	t.commits.Inc()
	t.lastCommit.Set(float64(c.At.UnixNano()) / 1e9)
	t.rows.Add(float64(c.Rows))
	for i, n := range c.Ops {
		if n > 0 {
			t.ops[i].Add(float64(n))
		}
	}
	t.fileBytes.Add(float64(c.FileBytes))
	t.snapChunks.Add(float64(c.Chunks))
	now := c.At.UnixMicro()
	for _, at := range c.TxCommitMicros {
		t.bronzeLat.Observe(max(0, float64(now-at)/1e6))
	}
	t.snapshot(c.Props)
}

// Opened implements bronze.OpenObserver: a table opened again (a restart)
// shows the snapshot progress its latest commit recorded, not 0 until its
// next commit.
func (t *tableMetrics) Opened(props map[string]string) { t.snapshot(props) }

// snapshot sets the snapshot gauges from a commit's tidemark.snapshot.
func (t *tableMetrics) snapshot(props map[string]string) {
	if s, ok := props[pipeline.PropSnapshot]; ok {
		if sp, err := pipeline.ParseSnapshotState(s); err == nil {
			t.snapRows.Set(float64(sp.Rows))
			t.snapEst.Set(float64(sp.Estimate))
			// "done", or "skipped" (snapshot disabled): nothing left to read.
			done := 0.0
			if sp.Status == pipeline.SnapshotDone || sp.Status == pipeline.SnapshotSkipped {
				done = 1
			}
			t.snapDone.Set(done)
		}
	}
}

var _ bronze.OpenObserver = (*tableMetrics)(nil)

// DeadLettered implements bronze.TableObserver.
func (t *tableMetrics) DeadLettered(n int64) { t.deadLetters.Add(float64(n)) }

// Merged implements silver.Observer.
func (m *metrics) Merged(id change.TableID, s silver.Step) {
	t := m.table(id)
	t.merges.Inc()
	t.mergeTook.Observe(s.Took.Seconds())
	t.merged.Add(float64(s.Changes))
	t.upserted.Add(float64(s.Upserts))
	t.deleted.Add(float64(s.Deletes))
	t.sDead.Add(float64(s.DeadLetters))
	now := s.At.UnixMicro()
	for _, at := range s.TxCommitMicros {
		t.silverLat.Observe(max(0, float64(now-at)/1e6))
	}
}

// Done implements silver.Observer: the table's state after a merge, or
// the error that ended it (the backlog is then left as it was).
func (m *metrics) Done(id change.TableID, r silver.Result, err error) {
	if err != nil {
		m.noteError(layerSilver, err)
		if !fault.NeedsOperator(err) {
			m.retries.WithLabelValues(layerSilver).Inc()
		}
		return
	}
	t := m.table(id)
	if r.Visible() {
		t.published.Set(1)
	} else {
		t.published.Set(0)
	}
	t.behindN.Set(float64(r.Backlog.Commits))
	t.behindCh.Set(float64(r.Backlog.Changes))
	m.behind.set(id, r.Backlog)
}

// maintained records the outcome of a maintenance run (maintain.Options.OnRun).
func (m *metrics) maintained(err error) {
	if err != nil {
		m.maintRuns.WithLabelValues("failed").Inc()
		m.noteError(layerMaintain, err)
		m.retries.WithLabelValues(layerMaintain).Inc()
		return
	}
	m.maintRuns.WithLabelValues("ok").Inc()
	m.maintLast.Set(float64(time.Now().UnixNano()) / 1e9)
}

// goldRefreshed records a gold refresh of table name that computed it (or
// failed), taking took.
func (m *metrics) goldRefreshed(name string, rows int64, took time.Duration, err error) {
	if err != nil {
		m.goldRuns.WithLabelValues(name, "failed").Inc()
		m.noteError(layerGold, err)
		m.retries.WithLabelValues(layerGold).Inc()
		return
	}
	m.goldRuns.WithLabelValues(name, "ok").Inc()
	m.goldTook.WithLabelValues(name).Observe(took.Seconds())
	m.goldLast.WithLabelValues(name).Set(float64(time.Now().UnixNano()) / 1e9)
	m.goldRows.WithLabelValues(name).Set(float64(rows))
}

// progress records a durable flush of the capture.
// lagBytes is the source's log past cp's position (-1: unknown, shown as 0).
func (m *metrics) progress(cp pipeline.Checkpoint, lagBytes int64) {
	m.flushes.Inc()
	// PostgreSQL confirms the end LSN to its slot; a source whose resume
	// token is not an LSN (MySQL) confirms the commit position.
	acked := postgres.AckedLSN(cp)
	if acked == 0 {
		acked = cp.Pos
	}
	m.confirmed.Set(float64(acked))
	m.lagBytes.Set(float64(max(lagBytes, 0)))
	if !cp.Watermark.IsZero() {
		m.watermark.Store(cp.Watermark.UnixNano())
	}
}

// sessionError records the error that ended a capture session; retried
// says whether a new session follows.
func (m *metrics) sessionError(err error, retried bool) {
	m.classes.WithLabelValues(fault.ClassOf(err).String()).Inc()
	m.noteError(layerCapture, err)
	if retried {
		m.retries.WithLabelValues(layerCapture).Inc()
	}
}

func (m *metrics) noteError(layer string, err error) {
	m.errs.WithLabelValues(layer, errorCode(err)).Inc()
}

// errorCode is the code label of err: the code of the first named error
// in its chain (for joined errors, of the first that has one), else
// "transient" for a retryable one, else "unclassified". The set of values
// is bounded by internal/fault's codes.
func errorCode(err error) string {
	var fe *fault.Error
	if errors.As(err, &fe) && fe.Code != "" {
		return fe.Code
	}
	if fault.ClassOf(err) == fault.Transient {
		return "transient"
	}
	return "unclassified"
}

// behindCollector reports tidemark_silver_behind_seconds from each table's
// last backlog, aged at scrape time (silver.Backlog.Seconds, what tidemark
// status prints): silver that stops merging is seen falling behind.
type behindCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	at   map[change.TableID]silver.Backlog
}

func (c *behindCollector) set(id change.TableID, b silver.Backlog) {
	c.mu.Lock()
	c.at[id] = b
	c.mu.Unlock()
}

func (c *behindCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *behindCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, b := range c.at {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, b.Seconds(now), id.Schema+"."+id.Name)
	}
}

// lakeRetryCollector reports lake.Retries by reason.
type lakeRetryCollector struct{ desc *prometheus.Desc }

func (c *lakeRetryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lakeRetryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range lake.RetryReasons() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(lake.Retries(r)), r.String())
	}
}

// serveMetrics serves /metrics on addr until ctx is done. An address that
// cannot be bound is a configuration error, reported before any data moves.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("metrics_addr: cannot listen on %s", addr), err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err.Error())
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return nil
}
