package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/mysql"
)

// mysqlOptions are the capture options of a mysql:// source.
func mysqlOptions(cfg *config.Config) (mysql.Options, error) {
	conn, err := config.ParseMySQLURL(cfg.Source.Reveal())
	if err != nil {
		return mysql.Options{}, fault.With(fault.ErrBadConfig, "source", err)
	}
	var tables []string
	for _, s := range cfg.Tables {
		// "shop.orders" or "orders": the schema of a MySQL table is its database.
		t, err := config.ParseTableName(s)
		if err != nil {
			t = config.TableName{Schema: conn.Database, Table: s}
		}
		if t.Schema != conn.Database {
			return mysql.Options{}, fault.With(fault.ErrBadConfig, "tables: "+s+" is not in database "+conn.Database+", the one the source URL names", nil)
		}
		tables = append(tables, t.Table)
	}
	return mysql.Options{
		Host: conn.Host, Port: conn.Port, User: conn.User, Password: conn.Password, Database: conn.Database,
		Tables:            tables,
		Flavor:            mysql.Flavor(cfg.MySQL.Flavor),
		ServerID:          cfg.ServerIDOf(),
		SpoolDir:          spoolDir(cfg),
		CommitInterval:    time.Duration(cfg.CommitInterval),
		CommitBytes:       int64(cfg.CommitBytes),
		HeartbeatInterval: time.Duration(cfg.HeartbeatInterval),
		Snapshot: mysql.SnapshotOptions{
			Enabled:     cfg.Snapshot.IsEnabled(),
			Parallelism: cfg.Snapshot.Parallelism,
			ChunkRows:   cfg.Snapshot.ChunkRows,
			ChunkBytes:  int64(cfg.Snapshot.ChunkBytes),
		},
	}, nil
}

// runMySQL runs capture sessions of a mysql:// source until ctx is done or
// a non-transient error, retrying transient ones like Run does for
// PostgreSQL. onProgress is called after each durable flush.
func runMySQL(ctx context.Context, cfg *config.Config, cat *lake.Catalog, log *slog.Logger, onProgress func()) error {
	opts, err := mysqlOptions(cfg)
	if err != nil {
		return err
	}
	backoff := time.Duration(cfg.Retry.InitialBackoff)
	var failingSince time.Time
	log.Info("tidemark starting", "source", cfg.Name, "warehouse", cfg.Warehouse, "source_type", "mysql", "server_id", opts.ServerID)
	for {
		w, err := bronze.NewWriter(ctx, cat, cfg.Name, "", log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		opts.OnProgress = func(pipeline.Checkpoint) {
			failingSince = time.Time{}
			backoff = time.Duration(cfg.Retry.InitialBackoff)
			if onProgress != nil {
				onProgress()
			}
		}
		capt := mysql.New(w, opts, log)
		err = capt.Run(ctx)
		w.Close()
		if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
			return nil
		}
		err = config.RedactError(err, cfg.Secrets()...)
		if ctx.Err() != nil {
			return err
		}
		if fault.ClassOf(err) != fault.Transient && !diskFull(err) {
			return err
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if time.Since(failingSince) > time.Duration(cfg.Retry.MaxElapsed) {
			return &fault.GaveUpError{After: time.Duration(cfg.Retry.MaxElapsed), Err: err}
		}
		log.Warn("transient error, retrying", "error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Duration(cfg.Retry.MaxBackoff))
	}
}
