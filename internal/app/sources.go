package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/pgverify"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/verify"
)

// sources are the kinds of database tidemark captures from: the source
// URL's scheme picks one (sourceFor). Adding a source is one line here.
var sources = []source{
	{name: "postgres", schemes: []string{"postgres", "postgresql"}, dsn: true, classifier: postgres.Classifier(),
		formatPos: postgres.FormatLSN, posName: "pg_lsn", open: openPostgres, position: postgresPosition, logEnd: postgresWALEnd, verify: postgresVerify,
		connector: "postgresql", tail: tailPostgres},
	{name: "mysql", schemes: []string{"mysql", "mariadb"}, classifier: mysqlClassifier(),
		formatPos: mysqlFormatPos, posName: "binlog file:pos", open: openMySQL, position: mysqlPosition, logEnd: mysqlLogEnd, verify: mysqlVerify,
		connector: "mysql", tail: tailMySQL},
}

// source is one kind of database tidemark captures from.
type source struct {
	name    string   // what its checkpoints record as Info[pipeline.InfoSource]
	schemes []string // URL schemes of its connection strings (lowercase)
	dsn     bool     // it also takes a key=value connection string
	// classifier names its client library's errors (fault.RegisterClassifier).
	classifier fault.Classifier
	// formatPos renders a commit position (cdc_source_lsn) as the source
	// writes it (PostgreSQL: 16/B374D848).
	formatPos func(pos uint64) string
	// posName names formatPos's notation, for column headers.
	posName string
	// open prepares the capture of cfg's source for Run's session loop; each
	// session then gets a capture from newCapture, writing into w and calling
	// onProgress after each durable flush.
	open func(cfg *config.Config, log *slog.Logger) (newCapture func(w pipeline.Sink, onProgress func(pipeline.Checkpoint)) capture, err error)
	// position returns the position cp confirms to the source, formatted,
	// and how many bytes of the source's log lie past it (-1: unknown), up
	// to end, the log's end measured now (logEnd), or when 0 the end
	// recorded with cp. For the progress log and status.
	position func(cp pipeline.Checkpoint, end uint64) (confirmed string, lagBytes int64)
	// logEnd, if set, measures the end of the source's log now, for the
	// lag in status --source.
	logEnd func(ctx context.Context, conn string) (uint64, error)
	// verify is the source side of `tidemark verify` for cfg's source.
	verify func(cfg *config.Config) (verify.Source, error)
	// connector names the source in tail's envelopes; tail streams the
	// source's changes from its current position into tw, storing
	// nothing, until ctx is done or tw's limit (errTailDone).
	connector string
	tail      func(ctx context.Context, cfg *config.Config, tw *tailWriter, log *slog.Logger) error
}

// VerifySource is the source side of `tidemark verify` for cfg's source,
// picked by the source URL's scheme.
func VerifySource(cfg *config.Config) (verify.Source, error) {
	s, err := sourceFor(cfg.Source.Reveal())
	if err != nil {
		return nil, err
	}
	return s.verify(cfg)
}

// postgresVerify is the postgres source's verify.
func postgresVerify(cfg *config.Config) (verify.Source, error) {
	d, err := postgres.NewDialer(cfg.Source.Reveal(), config.RedactURL)
	if err != nil {
		return nil, err
	}
	return pgverify.NewWith(d, typemap.Options{TimeAs: typemap.TimeAs(cfg.TimeAs)}), nil
}

// capture is one session of a source's capture (postgres.Capture).
type capture interface {
	// Run captures until ctx is done (nil after a clean stop) or an error,
	// which is classified (fault.Class): Run's loop retries transient ones
	// with a new session.
	Run(ctx context.Context) error
	// Close releases what the session holds.
	Close()
}

// RegisterClassifiers registers every source's error classifier with
// fault, so that any command classifies (and advises on) a source's errors
// wherever they surface. cmd/tidemark calls it first; sourceFor does too,
// for callers of this package that do not go through cmd. Idempotent.
func RegisterClassifiers() {
	for i := range sources {
		fault.RegisterClassifier(sources[i].classifier)
	}
}

// sourceFor returns the source that takes connection string conn (a URL
// "scheme://..." or a key=value string), after RegisterClassifiers. The
// error never shows conn, which may hold a password.
func sourceFor(conn string) (*source, error) {
	RegisterClassifiers()
	scheme, _, isURL := strings.Cut(conn, "://")
	scheme = strings.ToLower(scheme)
	var names []string
	for i := range sources {
		s := &sources[i]
		for _, sc := range s.schemes {
			if isURL && sc == scheme {
				return s, nil
			}
			names = append(names, sc+"://")
		}
		if !isURL && s.dsn && strings.Contains(conn, "=") {
			return s, nil
		}
	}
	if isURL {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("--source: no source takes scheme %q (tidemark takes %s, or a PostgreSQL key=value string)", scheme, strings.Join(names, ", ")), nil)
	}
	return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("--source: not a connection URL (value not shown): tidemark takes %s, or a PostgreSQL key=value string", strings.Join(names, ", ")), nil)
}

// sourceNamed returns the source whose checkpoints record name (a lake's
// Info[pipeline.InfoSource]); lakes written before that key are
// PostgreSQL's, like an unknown name.
func sourceNamed(name string) *source {
	for i := range sources {
		if sources[i].name == name {
			return &sources[i]
		}
	}
	return &sources[0]
}

// openPostgres is the postgres source's open.
func openPostgres(cfg *config.Config, log *slog.Logger) (func(pipeline.Sink, func(pipeline.Checkpoint)) capture, error) {
	dialer, err := postgres.NewDialer(cfg.Source.Reveal(), config.RedactURL)
	if err != nil {
		return nil, err
	}
	opts, err := captureOptions(cfg)
	if err != nil {
		return nil, err
	}
	return func(w pipeline.Sink, onProgress func(pipeline.Checkpoint)) capture {
		o := opts
		o.OnProgress = onProgress
		return postgres.New(dialer, w, o, log)
	}, nil
}

// postgresPosition is the postgres source's position: the end LSN
// confirmed to the slot, and the WAL between it and the server's WAL end.
func postgresPosition(cp pipeline.Checkpoint, end uint64) (string, int64) {
	acked := postgres.AckedLSN(cp)
	if end == 0 {
		end = postgres.WALEnd(cp)
	}
	lag := int64(-1)
	if end >= acked {
		lag = int64(end - acked)
	}
	return postgres.FormatLSN(acked), lag
}

// postgresWALEnd is the postgres source's logEnd: pg_current_wal_lsn().
func postgresWALEnd(ctx context.Context, conn string) (uint64, error) {
	d, err := postgres.NewDialer(conn, config.RedactURL)
	if err != nil {
		return 0, err
	}
	c, err := d.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close(ctx)
	var s string
	if err := c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	lsn, _ := postgres.ParseLSN(s)
	return lsn, nil
}
