// Package mysql captures a MySQL or MariaDB database: a chunked snapshot of
// every table, reconciled with the row-based binlog by read-only
// watermarks, then the binlog stream, into a pipeline.Sink (bronze).
//
// Positions: a transaction's commit position (change.Position.LSN, bronze's
// cdc_source_lsn) is fileIndex<<32 | endPos of its XID (or COMMIT) event in
// the binlog of the server read, where mysql-bin.000007 has index 7. The
// resume token (pipeline.Checkpoint.Resume) holds the GTID set executed up
// to that transaction and its file:pos; a session resumes by GTID when the
// token has one, else by file:pos. MySQL keeps no replication slot: the
// checkpoint in the lake is the only record of how far capture got, and
// acknowledging it sends nothing to the server.
package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	gomysql "github.com/go-sql-driver/mysql"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Flavours of server.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// Options configure a Capture.
type Options struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
	// Tables limits capture to these tables of Database (empty: every base
	// table, and tables created later).
	Tables []string
	// Flavor is FlavorMariaDB or FlavorMySQL; "" detects it from VERSION().
	Flavor string
	// ServerID is the replica server id the binlog reader registers with;
	// it must be unique among the server's replicas.
	ServerID          uint32
	CommitInterval    time.Duration
	CommitBytes       int64
	HeartbeatInterval time.Duration
	Snapshot          SnapshotOptions
	// OnProgress, if set, is called after each durable flush.
	OnProgress func(pipeline.Checkpoint)
}

// SnapshotOptions configure the chunked snapshot.
type SnapshotOptions struct {
	Enabled     bool
	Parallelism int
	ChunkRows   int
	ChunkBytes  int64
}

// Capture moves changes from one MySQL/MariaDB database into a Sink.
type Capture struct {
	opts   Options
	sink   pipeline.Sink
	log    *slog.Logger
	db     *sql.DB
	flavor string
	// basename of the binlog files (mysql-bin), learnt at start.
	basename string
	// startWM is the watermark of the checkpoint the session starts from.
	startWM time.Time
}

// New returns a Capture; nothing happens until Run.
func New(sink pipeline.Sink, opts Options, log *slog.Logger) *Capture {
	return &Capture{opts: opts, sink: sink, log: log}
}

// table is the capture's view of one source table.
type table struct {
	id     change.TableID
	cols   []column
	schema *change.Schema
	keyIdx []int // indexes of the key columns in cols
	est    int64
	snap   snapState
}

func (t *table) names() []string {
	out := make([]string, len(t.cols))
	for i, c := range t.cols {
		out[i] = c.Name
	}
	return out
}

// DSN returns the go-sql-driver DSN of opts (the password in it: never log it).
func (o Options) DSN() string {
	cfg := gomysql.NewConfig()
	cfg.User, cfg.Passwd = o.User, o.Password
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	cfg.DBName = o.Database
	// Text protocol for every query (one decoder for snapshot rows), UTC
	// session so TIMESTAMP values read as UTC.
	cfg.InterpolateParams = true
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	cfg.Timeout = 15 * time.Second
	return cfg.FormatDSN()
}

// Run runs one capture session until ctx is done (clean stop: flush, then
// return nil) or an error. Transient errors are marked; Run may be called
// again on a new Sink.
func (c *Capture) Run(ctx context.Context) error {
	db, err := sql.Open("mysql", c.opts.DSN())
	if err != nil {
		return fmt.Errorf("mysql source: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(c.opts.Snapshot.Parallelism + 4)
	c.db = db
	if err := db.PingContext(ctx); err != nil {
		return classify(fmt.Errorf("connect to %s:%d: %w", c.opts.Host, c.opts.Port, err))
	}
	if c.flavor, err = c.detectFlavor(ctx); err != nil {
		return err
	}
	cp, haveCP, err := c.sink.LoadCheckpoint(ctx)
	if err != nil {
		return err
	}
	ids, err := c.listTables(ctx)
	if err != nil {
		return err
	}
	tables := map[change.TableID]*table{}
	var problems []error
	for _, id := range ids {
		t, err := c.describe(ctx, id)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		tables[id] = t
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	for _, id := range ids {
		if err := c.open(ctx, tables[id]); err != nil {
			return err
		}
	}
	start, err := c.startPoint(ctx, cp, haveCP)
	if err != nil {
		return err
	}
	c.log.Info("capture starting", "source", "mysql", "flavor", c.flavor, "database", c.opts.Database,
		"tables", len(tables), "from", start.describe())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := newStream(c, tables, start)
	if err != nil {
		return err
	}
	defer s.close()
	snap := newSnapshotter(c, s.windows, s.ready)
	s.snap = snap
	g, gctx := errgroup.WithContext(ctx)
	for _, id := range ids {
		t := tables[id]
		switch {
		case t.snap.Status == snapDone || t.snap.Status == snapSkipped:
		case c.opts.Snapshot.Enabled || t.snap.Request != "":
			snap.enqueue(t)
		default:
			if err := s.markSkipped(ctx, t); err != nil {
				return err
			}
		}
	}
	g.Go(fault.Guard("mysql binlog stream", func() error { return s.run(gctx) }))
	g.Go(fault.Guard("mysql snapshot", func() error { return snap.run(gctx) }))
	err = g.Wait()
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *Capture) detectFlavor(ctx context.Context) (string, error) {
	var v string
	if err := c.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", classify(fmt.Errorf("read server version: %w", err))
	}
	if c.opts.Flavor != "" {
		return c.opts.Flavor, nil
	}
	if strings.Contains(strings.ToLower(v), "mariadb") {
		return FlavorMariaDB, nil
	}
	return FlavorMySQL, nil
}

// listTables returns the base tables to capture, sorted.
func (c *Capture) listTables(ctx context.Context) ([]change.TableID, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME`, c.opts.Database)
	if err != nil {
		return nil, classify(fmt.Errorf("list tables of %s: %w", c.opts.Database, err))
	}
	defer rows.Close()
	have := map[string]bool{}
	var out []change.TableID
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, classify(err)
		}
		have[n] = true
		if c.wanted(n) {
			out = append(out, change.TableID{Schema: c.opts.Database, Name: n})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify(err)
	}
	var missing []string
	for _, n := range c.opts.Tables {
		if !have[n] {
			missing = append(missing, c.opts.Database+"."+n)
		}
	}
	if len(missing) > 0 {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("tables %s listed in tables: do not exist in database %s (or the user may not see them)",
			strings.Join(missing, ", "), c.opts.Database), nil)
	}
	return out, nil
}

// wanted reports whether a table of the database is captured.
func (c *Capture) wanted(name string) bool {
	if len(c.opts.Tables) == 0 {
		return true
	}
	for _, n := range c.opts.Tables {
		if n == name {
			return true
		}
	}
	return false
}

// describe reads a table's columns and primary key.
func (c *Capture) describe(ctx context.Context, id change.TableID) (*table, error) {
	cols, err := loadColumns(ctx, c.db, id)
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s: no columns visible (dropped, or no SELECT privilege)", id)
	}
	t := &table{id: id, cols: cols, schema: &change.Schema{}}
	var keys []column
	for i, col := range cols {
		if reservedColumn(col.Name) {
			return nil, fault.With(fault.ErrColumnCollision, fmt.Sprintf("table %s: column %q collides with a bronze metadata column (cdc_*): rename it at the source", id, col.Name), nil)
		}
		f, err := col.field()
		if err != nil {
			return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s column %q", id, col.Name), err)
		}
		t.schema.Fields = append(t.schema.Fields, f)
		if col.KeySeq > 0 {
			keys = append(keys, col)
			t.keyIdx = append(t.keyIdx, i)
		}
	}
	if len(keys) == 0 {
		return nil, fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"table %s has no primary key: its changes cannot be merged into a replica by key. Add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or leave it out with tables:",
			id, quoteTable(id)), nil)
	}
	sort.SliceStable(t.keyIdx, func(a, b int) bool { return cols[t.keyIdx[a]].KeySeq < cols[t.keyIdx[b]].KeySeq })
	for _, i := range t.keyIdx {
		t.schema.Key = append(t.schema.Key, cols[i].Name)
	}
	_ = c.db.QueryRowContext(ctx, `SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		id.Schema, id.Name).Scan(&t.est)
	return t, nil
}

// open creates (or verifies) the table's lake tables and reads its snapshot
// progress.
func (c *Capture) open(ctx context.Context, t *table) error {
	st, err := c.sink.OpenTable(ctx, t.id, t.schema)
	if err != nil {
		return err
	}
	t.snap, err = parseSnapState(st.Props[PropSnapshot])
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: snapshot state in the lake cannot be read", t.id), err)
	}
	t.snap.Estimate = t.est
	return nil
}

func reservedColumn(name string) bool { return strings.HasPrefix(strings.ToLower(name), "cdc_") }

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

func quoteTable(id change.TableID) string { return quoteIdent(id.Schema) + "." + quoteIdent(id.Name) }

// binlogPos is a position in the binlog: a file and an offset in it.
type binlogPos struct {
	File string
	Pos  uint32
}

// LSN is the position as a sortable integer: fileIndex<<32 | pos.
func (p binlogPos) LSN() uint64 { return fileIndex(p.File)<<32 | uint64(p.Pos) }

func (p binlogPos) String() string { return p.File + ":" + strconv.FormatUint(uint64(p.Pos), 10) }

// fileIndex is the numeric suffix of a binlog file name (mysql-bin.000007: 7).
func fileIndex(name string) uint64 {
	i := strings.LastIndexByte(name, '.')
	n, err := strconv.ParseUint(name[i+1:], 10, 32)
	if err != nil {
		return 0
	}
	return n
}

// FormatPosition prints a commit position (LSN) as file:pos, with the
// binlog basename when known (mysql-bin.000007:1234), else #7:1234.
func FormatPosition(basename string, lsn uint64) string {
	idx, pos := lsn>>32, lsn&0xffffffff
	if basename == "" {
		return fmt.Sprintf("#%d:%d", idx, pos)
	}
	return fmt.Sprintf("%s.%06d:%d", basename, idx, pos)
}

// resume is the decoded form of a checkpoint's Resume token.
type resume struct {
	// GTID is the executed GTID set up to and including the checkpoint's
	// transaction (MariaDB domain-server-seq list, or MySQL uuid:interval
	// set); "" when the server has none.
	GTID string `json:"gtid,omitempty"`
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
	// ServerUUID (MySQL) / server_id (MariaDB) of the server read.
	Server string `json:"server,omitempty"`
}

func (r resume) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func (r resume) describe() string {
	if r.GTID != "" {
		return "gtid " + r.GTID + " (" + binlogPos{r.File, r.Pos}.String() + ")"
	}
	return binlogPos{r.File, r.Pos}.String()
}

func parseResume(s string) (resume, error) {
	var r resume
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, err
	}
	if r.File == "" {
		return r, errors.New("no binlog file")
	}
	return r, nil
}

// Info keys of the checkpoint, for status.
const (
	InfoBinlogFile = "binlog-file"
	InfoBinlogPos  = "binlog-pos"
	InfoGTID       = "gtid"
	InfoFlavor     = "flavor"
	InfoServer     = "server"
)

// startPoint is where the stream starts: the checkpoint's resume token, or,
// on a first start, the server's current position, recorded in the lake
// before any data moves (a crash before the first flush must not resume
// from a later "now").
func (c *Capture) startPoint(ctx context.Context, cp pipeline.Checkpoint, haveCP bool) (resume, error) {
	cur, gtid, err := c.masterStatus(ctx)
	if err != nil {
		return resume{}, err
	}
	c.basename = cur.File[:max(strings.LastIndexByte(cur.File, '.'), 0)]
	server, err := c.serverIdentity(ctx)
	if err != nil {
		return resume{}, err
	}
	c.startWM = cp.Watermark
	if haveCP && cp.Resume != "" {
		r, err := parseResume(cp.Resume)
		if err != nil {
			return r, fault.With(fault.ErrCorruptState, "the checkpoint's resume token cannot be read; refusing to guess a position", err)
		}
		if r.Server != "" && server != "" && r.Server != server {
			return r, fault.With(fault.ErrSlotMoved, fmt.Sprintf(
				"the server's identity changed from %s to %s since the checkpoint: its binlog is another server's, and positions in it mean nothing for this pipeline. "+
					"Point --source at the original server, or re-snapshot into a fresh pipeline (new --name)", r.Server, server), nil)
		}
		if err := c.checkAvailable(ctx, r); err != nil {
			return r, err
		}
		return r, nil
	}
	if haveCP && cp.Pos != 0 {
		// A checkpoint without a resume token: resume from its position.
		r := resume{File: fmt.Sprintf("%s.%06d", c.basename, cp.Pos>>32), Pos: uint32(cp.Pos & 0xffffffff)}
		return r, c.checkAvailable(ctx, r)
	}
	r := resume{GTID: gtid, File: cur.File, Pos: cur.Pos, Server: server}
	c.startWM = time.Now().UTC()
	if err := c.sink.Flush(ctx, c.checkpoint(r, cur.LSN(), c.startWM)); err != nil {
		return r, err
	}
	return r, nil
}

// checkpoint builds the checkpoint of a resume point.
func (c *Capture) checkpoint(r resume, lsn uint64, wm time.Time) pipeline.Checkpoint {
	return pipeline.Checkpoint{Pos: lsn, Resume: r.encode(), Watermark: wm, Info: map[string]string{
		InfoBinlogFile: r.File, InfoBinlogPos: strconv.FormatUint(uint64(r.Pos), 10),
		InfoGTID: r.GTID, InfoFlavor: c.flavor, InfoServer: r.Server,
	}}
}

// masterStatus is the server's current binlog end and executed GTID set.
func (c *Capture) masterStatus(ctx context.Context) (binlogPos, string, error) {
	p, err := c.binlogEnd(ctx, c.db)
	if err != nil {
		return p, "", err
	}
	var gtid string
	q := "SELECT @@GLOBAL.gtid_binlog_pos"
	if c.flavor == FlavorMySQL {
		q = "SELECT @@GLOBAL.gtid_executed"
	}
	if err := c.db.QueryRowContext(ctx, q).Scan(&gtid); err != nil {
		return p, "", classify(fmt.Errorf("read the executed GTID set: %w", err))
	}
	return p, strings.ReplaceAll(gtid, "\n", ""), nil
}

// queryer is a *sql.DB or *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// binlogEnd is SHOW MASTER STATUS: the end of the last event group written.
func (c *Capture) binlogEnd(ctx context.Context, q queryer) (binlogPos, error) {
	rows, err := q.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return binlogPos{}, classify(fmt.Errorf("read the binlog position (SHOW MASTER STATUS; the user needs REPLICATION CLIENT / BINLOG MONITOR): %w", err))
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return binlogPos{}, fault.With(fault.ErrServerConfig, "the server writes no binlog (SHOW MASTER STATUS is empty): start it with log_bin", rows.Err())
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return binlogPos{}, classify(err)
	}
	pos, err := strconv.ParseUint(string(vals[1]), 10, 32)
	if err != nil {
		return binlogPos{}, fmt.Errorf("SHOW MASTER STATUS: position %q: %w", vals[1], err)
	}
	return binlogPos{File: string(vals[0]), Pos: uint32(pos)}, nil
}

// serverIdentity is the MySQL server_uuid, or the MariaDB server_id.
func (c *Capture) serverIdentity(ctx context.Context) (string, error) {
	q := "SELECT CONCAT('server_id=', @@GLOBAL.server_id)"
	if c.flavor == FlavorMySQL {
		q = "SELECT @@GLOBAL.server_uuid"
	}
	var s string
	if err := c.db.QueryRowContext(ctx, q).Scan(&s); err != nil {
		return "", classify(fmt.Errorf("read the server identity: %w", err))
	}
	return s, nil
}

// checkAvailable refuses a resume point the server no longer holds: its
// binlog file was purged. A silent jump to the oldest file would lose every
// change in between.
func (c *Capture) checkAvailable(ctx context.Context, r resume) error {
	rows, err := c.db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return classify(fmt.Errorf("list binary logs (the user needs REPLICATION CLIENT / BINLOG MONITOR): %w", err))
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var first string
	found := false
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return classify(err)
		}
		name := string(vals[0])
		if first == "" {
			first = name
		}
		if name == r.File {
			found = true
		}
	}
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	if found {
		return nil
	}
	return fault.With(fault.ErrWALLost, fmt.Sprintf(
		"the binlog tidemark must resume from (%s) was purged from the server (oldest binlog now %s): the changes after it are gone. "+
			"Nothing was skipped silently. Raise binlog_expire_logs_seconds (expire_logs_days), then re-snapshot: run `tidemark resnapshot --all` "+
			"with the same --source/--warehouse/--name flags and `tidemark run`, or start a fresh pipeline with a new --name", r.describe(), first), nil)
}

// classify marks connection-level errors transient; server errors that an
// operator must fix keep their class.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1227, 1370:
			return fault.With(fault.ErrPermissionDenied, "the MySQL user lacks a privilege tidemark needs (REPLICATION SLAVE, REPLICATION CLIENT, SELECT): grant it, then restart", err)
		case 1236:
			return fault.With(fault.ErrWALLost, "the server cannot send the binlog from tidemark's position (purged?): re-snapshot with `tidemark resnapshot --all`, then `tidemark run`", err)
		}
	}
	if errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, context.DeadlineExceeded) {
		return fault.MarkTransient(err)
	}
	var ne net.Error
	if errors.As(err, &ne) || fault.IsTransient(err) {
		return fault.MarkTransient(err)
	}
	return err
}

// ---- column types ----
//
// The interim type layer of the capture: mysqltypes' types*.go (Column,
// LoadColumns, MapColumn, DecodeBinlog, DecodeText) replaces it.

// column is one source column.
type column struct {
	Name       string
	DataType   string // information_schema DATA_TYPE: int, varchar, ...
	ColumnType string // COLUMN_TYPE: int(10) unsigned, enum('a','b'), ...
	Precision  int
	Scale      int
	Unsigned   bool
	KeySeq     int // position in the primary key, 0: not in it
}

// loadColumns reads a table's columns in ordinal order.
func loadColumns(ctx context.Context, db *sql.DB, id change.TableID) ([]column, error) {
	rows, err := db.QueryContext(ctx, `SELECT c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE,
			COALESCE(c.NUMERIC_PRECISION, 0), COALESCE(c.NUMERIC_SCALE, 0), COALESCE(k.ORDINAL_POSITION, 0)
		FROM information_schema.COLUMNS c
		LEFT JOIN information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
			AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY'
		WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? ORDER BY c.ORDINAL_POSITION`, id.Schema, id.Name)
	if err != nil {
		return nil, classify(fmt.Errorf("table %s: read columns: %w", id, err))
	}
	defer rows.Close()
	var out []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &c.Precision, &c.Scale, &c.KeySeq); err != nil {
			return nil, classify(err)
		}
		c.DataType = strings.ToLower(c.DataType)
		c.Unsigned = strings.Contains(strings.ToLower(c.ColumnType), "unsigned")
		out = append(out, c)
	}
	return out, classify(rows.Err())
}

// field is the column's lake field.
func (c column) field() (change.Field, error) {
	var t iceberg.Type
	switch c.DataType {
	case "tinyint", "smallint", "mediumint":
		t = iceberg.PrimitiveTypes.Int32
	case "int", "integer":
		t = iceberg.PrimitiveTypes.Int32
		if c.Unsigned {
			t = iceberg.PrimitiveTypes.Int64
		}
	case "bigint":
		t = iceberg.PrimitiveTypes.Int64
		if c.Unsigned {
			t = iceberg.DecimalTypeOf(20, 0)
		}
	case "decimal", "numeric":
		if c.Precision > 38 {
			return change.Field{}, fmt.Errorf("decimal(%d,%d) has more digits than Iceberg's decimal holds (38)", c.Precision, c.Scale)
		}
		t = iceberg.DecimalTypeOf(c.Precision, c.Scale)
	case "float":
		t = iceberg.PrimitiveTypes.Float32
	case "double", "real":
		t = iceberg.PrimitiveTypes.Float64
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json":
		t = iceberg.PrimitiveTypes.String
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		t = iceberg.PrimitiveTypes.Binary
	case "date":
		t = iceberg.PrimitiveTypes.Date
	case "datetime":
		t = iceberg.PrimitiveTypes.Timestamp
	case "timestamp":
		t = iceberg.PrimitiveTypes.TimestampTz
	default:
		return change.Field{}, fmt.Errorf("type %s is not mapped yet", c.ColumnType)
	}
	return change.Field{Name: c.Name, Type: t, SourceType: c.ColumnType}, nil
}

// decodeBinlog turns a value of a binlog row event (as go-mysql decodes it,
// ParseTime and UseDecimal off) into its lake value.
func (c column) decodeBinlog(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.DataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		var n int64
		switch x := v.(type) {
		case int8:
			n = int64(x)
			if c.Unsigned {
				n = int64(uint8(x))
			}
		case int16:
			n = int64(x)
			if c.Unsigned {
				n = int64(uint16(x))
			}
		case int32:
			n = int64(x)
			if c.Unsigned {
				if c.DataType == "mediumint" {
					n = int64(uint32(x) & 0xffffff)
				} else {
					n = int64(uint32(x))
				}
			}
		case int64:
			if c.Unsigned && c.DataType == "bigint" {
				return decimal128.FromU64(uint64(x)), nil
			}
			n = x
		default:
			return nil, fmt.Errorf("integer column: unexpected %T", v)
		}
		return c.intValue(n)
	case "decimal", "numeric":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("decimal column: unexpected %T", v)
		}
		return c.decodeText([]byte(s))
	case "float":
		if x, ok := v.(float32); ok {
			return x, nil
		}
	case "double", "real":
		if x, ok := v.(float64); ok {
			return x, nil
		}
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json":
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return append([]byte(nil), x...), nil
		}
	case "date", "datetime", "timestamp":
		if s, ok := v.(string); ok {
			return c.decodeText([]byte(s))
		}
	}
	return nil, fmt.Errorf("%s column: unexpected binlog value %T", c.ColumnType, v)
}

func (c column) intValue(n int64) (any, error) {
	f, _ := c.field()
	if f.Type.Equals(iceberg.PrimitiveTypes.Int32) {
		return int32(n), nil
	}
	return n, nil
}

// decodeText turns a text-protocol value into its lake value.
func (c column) decodeText(b []byte) (any, error) {
	if b == nil {
		return nil, nil
	}
	s := string(b)
	switch c.DataType {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		if c.Unsigned && c.DataType == "bigint" {
			u, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, err
			}
			return decimal128.FromU64(u), nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, err
		}
		return c.intValue(n)
	case "decimal", "numeric":
		return decimal128.FromString(s, int32(c.Precision), int32(c.Scale))
	case "float":
		f, err := strconv.ParseFloat(s, 32)
		return float32(f), err
	case "double", "real":
		return strconv.ParseFloat(s, 64)
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json":
		return s, nil
	case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		return append([]byte(nil), b...), nil
	case "date":
		t, err := time.Parse("2006-01-02", s)
		if err != nil {
			return nil, fmt.Errorf("date %q cannot be represented: %w", s, err)
		}
		return arrow.Date32FromTime(t), nil
	case "datetime", "timestamp":
		t, err := time.Parse("2006-01-02 15:04:05.999999", s)
		if err != nil {
			return nil, fmt.Errorf("%s %q cannot be represented: %w", c.DataType, s, err)
		}
		return arrow.Timestamp(t.UnixMicro()), nil
	}
	return nil, fmt.Errorf("type %s is not mapped yet", c.ColumnType)
}
