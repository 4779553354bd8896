package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// metrics are the pipeline's Prometheus metrics. Labels are bounded sets
// (source, class); never keys or positions.
type metrics struct {
	rows      prometheus.Counter
	flushes   prometheus.Counter
	confirmed prometheus.Gauge
	lagBytes  prometheus.Gauge
	lagSec    prometheus.Gauge
	errors    *prometheus.CounterVec
	restarts  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, source string) *metrics {
	cl := prometheus.Labels{"source": source}
	m := &metrics{
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_bronze_rows_committed_total",
			Help: "Rows committed to bronze tables.", ConstLabels: cl}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_flushes_total",
			Help: "Durable flushes (lake commits followed by a checkpoint).", ConstLabels: cl}),
		confirmed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_confirmed_lsn",
			Help: "LSN confirmed to PostgreSQL (all changes up to it are durable in the lake).", ConstLabels: cl}),
		lagBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_lag_bytes",
			Help: "Server WAL end minus the confirmed LSN at the last flush.", ConstLabels: cl}),
		lagSec: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_lag_seconds",
			Help: "Now minus the commit time of the last transaction captured (the watermark).", ConstLabels: cl}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_capture_errors_total",
			Help: "Errors that ended a capture session, by class.", ConstLabels: cl}, []string{"class"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_sessions_total",
			Help: "Capture sessions started (1 + retries).", ConstLabels: cl}),
	}
	reg.MustRegister(m.rows, m.flushes, m.confirmed, m.lagBytes, m.lagSec, m.errors, m.restarts)
	return m
}

// lagBytes is the source's log past cp's position (-1: unknown, shown as 0).
func (m *metrics) progress(cp pipeline.Checkpoint, rowsDelta, lagBytes int64) {
	m.flushes.Inc()
	if rowsDelta > 0 {
		m.rows.Add(float64(rowsDelta))
	}
	// PostgreSQL confirms the end LSN to its slot; a source whose resume
	// token is not an LSN (MySQL) confirms the commit position.
	acked := postgres.AckedLSN(cp)
	if acked == 0 {
		acked = cp.Pos
	}
	m.confirmed.Set(float64(acked))
	m.lagBytes.Set(float64(max(lagBytes, 0)))
	if !cp.Watermark.IsZero() {
		m.lagSec.Set(time.Since(cp.Watermark).Seconds())
	}
}

func (m *metrics) sessionError(err error) {
	m.errors.WithLabelValues(fault.ClassOf(err).String()).Inc()
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
