package app

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/source/postgres"
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

// isMySQLCheckpoint reports whether cp was written by the MySQL source.
func isMySQLCheckpoint(cp pipeline.Checkpoint) bool {
	f := cp.Info[mysql.InfoFlavor]
	return f == string(mysql.MariaDB) || f == string(mysql.MySQL)
}

// positionFormat is how status and show print a commit position of the
// source that wrote cp, and the notation's name: mysql-bin.000007:1234
// for MySQL/MariaDB, X/Y for PostgreSQL.
func positionFormat(cp pipeline.Checkpoint, haveCP bool) (string, func(uint64) string) {
	if haveCP && isMySQLCheckpoint(cp) {
		base := cp.Info[mysql.InfoBinlogBase]
		return "binlog", func(lsn uint64) string { return mysql.FormatPosition(base, lsn) }
	}
	return "pg_lsn", postgres.FormatLSN
}

// mysqlLag is the lag in bytes of cp behind the live binlog end of the
// mysql:// source, when both are in one binlog file (-1 otherwise).
func mysqlLag(ctx context.Context, source config.Secret, cp pipeline.Checkpoint) (int64, error) {
	opts, err := mysqlOptions(&config.Config{Source: source})
	if err != nil {
		return -1, err
	}
	db, err := sql.Open("mysql", opts.DSN())
	if err != nil {
		return -1, config.RedactError(err, source)
	}
	defer db.Close()
	var file, pos, a, b sql.NullString
	if err := db.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &a, &b); err != nil {
		return -1, config.RedactError(mysql.Classify(err), source)
	}
	end, err := mysql.PositionLSN(file.String, uint32(atoiOr(pos.String, 0)))
	if err != nil || end>>32 != cp.Pos>>32 || end < cp.Pos {
		return -1, nil
	}
	return int64(end - cp.Pos), nil
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
