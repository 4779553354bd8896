package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/source/mysql/myverify"
	"github.com/tidemark/tidemark/internal/verify"
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
	timeAs := cfg.TimeAs
	switch {
	case timeAs == mysql.TimeAsMicros || timeAs == mysql.TimeAsText:
	case timeAs == "" || timeAs == config.DefaultTimeAs && !cfg.TimeAsGiven():
		timeAs = mysql.TimeAsMicros // the default: time cannot hold a MySQL TIME
	default:
		// A MySQL TIME (-838:59:59 to 838:59:59) is a signed duration; an
		// Iceberg time is a time of day (00:00 to 24:00).
		return mysql.Options{}, fault.With(fault.ErrBadConfig, "time_as: "+cfg.TimeAs+" cannot hold a MySQL/MariaDB TIME (-838:59:59 to 838:59:59; an Iceberg time is 00:00:00 to 23:59:59.999999): use micros (long microseconds, the default for MySQL) or text (docs/type-mapping.md)", nil)
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
		TimeAs:            timeAs,
		MaxValueBytes:     int64(cfg.MaxValueBytes),
		Snapshot: mysql.SnapshotOptions{
			Enabled:     cfg.Snapshot.IsEnabled(),
			Parallelism: cfg.Snapshot.Parallelism,
			ChunkRows:   cfg.Snapshot.ChunkRows,
			ChunkBytes:  int64(cfg.Snapshot.ChunkBytes),
		},
	}, nil
}

// openMySQL is the mysql source's open.
func openMySQL(cfg *config.Config, log *slog.Logger) (func(pipeline.Sink, func(pipeline.Checkpoint)) capture, error) {
	opts, err := mysqlOptions(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("mysql source", "host", opts.Host, "port", opts.Port, "database", opts.Database, "server_id", opts.ServerID)
	return func(w pipeline.Sink, onProgress func(pipeline.Checkpoint)) capture {
		o := opts
		o.OnProgress = onProgress
		return mysql.New(w, o, log)
	}, nil
}

// mysqlClassifier classifies the MySQL/MariaDB server errors of both
// client libraries (go-sql-driver, go-mysql) as mysql.Classify names them.
func mysqlClassifier() fault.Classifier {
	return fault.Classifier{Name: "mysql", Class: func(err error) (fault.Class, bool) {
		if _, _, ok := mysql.ServerError(err); !ok {
			return fault.Unknown, false
		}
		var fe *fault.Error
		if errors.As(mysql.Classify(err), &fe) {
			return fe.Class, true
		}
		return fault.Unknown, false
	}}
}

// mysqlFormatPos prints a MySQL commit position as the binlog file's number
// and the offset in it (000007:1234); status names the file in full.
func mysqlFormatPos(lsn uint64) string { return mysql.FormatPosition("", lsn) }

// mysqlPosition is the mysql source's position: the checkpoint's binlog
// file:pos, and the bytes between it and end (the binlog end measured now)
// when both are in one binlog file (-1 otherwise, or without end).
func mysqlPosition(cp pipeline.Checkpoint, end uint64) (string, int64) {
	pos := mysql.FormatPosition(cp.Info[mysql.InfoBinlogBase], cp.Pos)
	if end == 0 || end>>32 != cp.Pos>>32 || end < cp.Pos {
		return pos, -1
	}
	return pos, int64(end - cp.Pos)
}

// mysqlLogEnd is the mysql source's logEnd: SHOW MASTER STATUS.
func mysqlLogEnd(ctx context.Context, conn string) (uint64, error) {
	opts, err := mysqlOptions(&config.Config{Source: config.NewSecret(conn)})
	if err != nil {
		return 0, err
	}
	db, err := sql.Open("mysql", opts.DSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var file, pos, a, b sql.NullString
	if err := db.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &pos, &a, &b); err != nil {
		return 0, mysql.Classify(err)
	}
	n, _ := strconv.ParseUint(pos.String, 10, 32)
	return mysql.PositionLSN(file.String, uint32(n))
}

// mysqlVerify is the mysql source's verify.
func mysqlVerify(cfg *config.Config) (verify.Source, error) {
	opts, err := mysqlOptions(cfg)
	if err != nil {
		return nil, err
	}
	return myverify.NewWith(opts.DSN(), opts.TimeAs)
}

// tailMySQL is the mysql source's tail: a capture from the binlog's
// current position (no checkpoint, no snapshot) into tw, registered under
// a server id of its own so that the pipeline's binlog connection, which
// a second one with its server id would replace, is left alone.
func tailMySQL(ctx context.Context, cfg *config.Config, tw *tailWriter, log *slog.Logger) error {
	opts, err := mysqlOptions(cfg)
	if err != nil {
		return err
	}
	if err := tw.open(opts.Database, mysqlBinlog(mysqlBinlogBase(ctx, opts.DSN()))); err != nil {
		return err
	}
	for _, t := range opts.Tables {
		tw.only[change.TableID{Schema: opts.Database, Name: t}] = true
	}
	tag := fmt.Sprintf("tail.%d.%d", os.Getpid(), time.Now().UnixNano())
	opts.ServerID = uint32(config.DefaultServerID(cfg.Name + "." + tag))
	if tw.slot != "" {
		// A named position: its binlog position and GTID set are in the
		// store, and its server id is its own, the same every run (two
		// runs of one position at once are refused as a server_id
		// collision).
		opts.ServerID = uint32(config.DefaultServerID(cfg.Name + "." + tw.slot))
	}
	// The same chunked, watermark-reconciled snapshot as the pipeline's:
	// a chunk's rows whose keys changed in its window are dropped (the
	// stream delivers the newer version), the others come at the high
	// watermark's position. Progress is kept in memory (tailWriter).
	opts.Snapshot.Enabled = tw.snapshot
	opts.HeartbeatInterval = 0
	opts.CommitInterval = 200 * time.Millisecond
	opts.SpoolDir = filepath.Join(os.TempDir(), "tidemark_"+tag)
	defer os.RemoveAll(opts.SpoolDir)
	if tw.ready != nil {
		// Ready once the start is fixed: a resumed position is the
		// store's; a new one is the server's position when the capture
		// starts, which it records (Flush) before it reads the binlog.
		// Every change committed after either is delivered.
		_, resumed, err := tw.LoadCheckpoint(ctx)
		if err != nil {
			return err
		}
		if resumed {
			tw.ready()
		} else {
			tw.readyOnFlush = true
		}
	}
	return mysql.New(tw, opts, log).Run(ctx)
}

// mysqlBinlogBase is the server's binlog file basename (mysql-bin), for
// tail's positions and file names; "" when it cannot be read (they then
// show the file's number only).
func mysqlBinlogBase(ctx context.Context, dsn string) string {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return ""
	}
	defer db.Close()
	var base sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT @@log_bin_basename").Scan(&base); err != nil || base.String == "" {
		return ""
	}
	return filepath.Base(base.String)
}

// mysqlBinlog splits a commit position into its binlog file's name (with
// the server's basename) and offset, for the event codec.
func mysqlBinlog(base string) func(lsn uint64) (string, uint32) {
	return func(lsn uint64) (string, uint32) {
		idx, pos := mysql.SplitLSN(lsn)
		file := mysql.FormatPosition(base, uint64(idx)<<32)
		return file[:strings.LastIndexByte(file, ':')], pos
	}
}
