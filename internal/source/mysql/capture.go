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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
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
	// Flavor is MariaDB or MySQL; "" detects it from VERSION().
	Flavor Flavor
	// ServerID is the replica server id the binlog reader registers with;
	// it must be unique among the server's replicas.
	ServerID uint32
	// SpoolDir holds transactions too large for memory until their commit
	// (emptied of them at start).
	SpoolDir          string
	CommitInterval    time.Duration
	CommitBytes       int64
	HeartbeatInterval time.Duration
	Snapshot          SnapshotOptions
	// MaxValueBytes: a row (snapshot read, insert, update) with a value
	// longer than this (its lake form: a BLOB's bytes, a TEXT's UTF-8
	// bytes) goes to the dead-letter table instead (value_too_large),
	// without the value; a delete's row and an update's old row leave such
	// a value out (0: no maximum).
	MaxValueBytes int64
	// TimeAs is how a TIME column lands: "" or TimeAsMicros (long
	// microseconds), or TimeAsText (its text, a string).
	TimeAs string
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
	flavor Flavor
	info   ServerInfo // what Preflight learned at the start of the session
	// basename of the binlog files (mysql-bin), learnt at start.
	basename string
	// startWM is the watermark of the checkpoint the session starts from.
	startWM time.Time
	// refused are the tables left out on their own (refusable), with why;
	// status names them. Used by Run, then by the stream goroutine only.
	refused map[change.TableID]error
	// keyless are the tables captured into bronze only (keyless.go), with
	// why; status names them. Owned as refused.
	keyless map[change.TableID]error
}

// New returns a Capture; nothing happens until Run.
func New(sink pipeline.Sink, opts Options, log *slog.Logger) *Capture {
	return &Capture{opts: opts, sink: sink, log: log}
}

// Close releases what the session holds (Run releases everything itself).
func (c *Capture) Close() {}

// table is the capture's view of one source table.
type table struct {
	id     change.TableID
	cols   []Column
	maps   []*Mapping // of cols
	schema *change.Schema
	keyIdx []int // indexes of the key columns in cols
	// keyless: no key, captured into bronze only (keyless.go).
	keyless bool
	est     int64
	snap    snapState
	// mapped: cols were brought in line with a table map event
	// (ApplyTableMap).
	mapped bool
	// after is the layout the DDL statements read since cols describe
	// (nil: none).
	after []Column
	// ctl is shared by every value the stream replaces the table's with
	// (a schema change makes a new one): its snapshot's generation
	// (rekey.go).
	ctl *tableCtl
}

// tableCtl is what the stream and the snapshot worker of a table share
// across the table's values: the generation of its snapshot, moved when a
// key change restarts it (chunks of an older generation are not written),
// and the table value the snapshot of the current generation reads with
// (nil: the one the table was admitted with).
type tableCtl struct {
	gen  atomic.Int64
	snap atomic.Pointer[table]
	// replacedBefore: the stream's changes and statements of the table
	// at or below this commit position are not applied (pipeline.
	// PropReplacedBefore: the table was rebuilt by `tidemark resnapshot
	// --replace`; its re-snapshot holds them). The mark is the binlog end
	// when the request was made, the commit position of the last
	// transaction before it. Set by open; stream goroutine.
	replacedBefore uint64
	// ids numbers the table's columns (columnids.go). Set by open; stream
	// goroutine.
	ids colIDs
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
	// Text protocol for every query (one decoder for snapshot rows), and
	// the session settings DecodeText relies on (TIMESTAMP in UTC, utf8mb4).
	cfg.InterpolateParams = true
	cfg.Params = SessionVariables()
	cfg.Collation = "utf8mb4_unicode_ci"
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
		return Classify(fmt.Errorf("connect to %s:%d: %w", c.opts.Host, c.opts.Port, err))
	}
	if c.info, err = Preflight(ctx, db); err != nil {
		return err
	}
	for _, w := range c.info.Warnings {
		c.log.Warn(w)
	}
	c.flavor = c.info.Flavor
	if c.opts.Flavor != "" {
		c.flavor = c.opts.Flavor
	}
	if err := CheckServerID(ctx, db, c.opts.ServerID, ""); err != nil {
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
	// Every table is checked before a lake table is created for any. A
	// table refused on its own (no key, a reserved column name) is left
	// out and named in status; the others run.
	tables := map[change.TableID]*table{}
	var problems []error
	c.refused = map[change.TableID]error{}
	for _, id := range ids {
		t, err := c.describe(ctx, id)
		if c.refusable(id, err) {
			c.refused[id] = err
			continue
		}
		if err == nil {
			t, err = c.lakeKey(ctx, t)
		}
		if err != nil {
			problems = append(problems, err)
			continue
		}
		tables[id] = t
		c.noteKeyless(t)
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	if err := c.recordRefused(ctx); err != nil {
		return err
	}
	ids = slices.DeleteFunc(ids, func(id change.TableID) bool { return tables[id] == nil })
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
		"tables", len(tables), "from", describeResume(start))

	// A transaction (or a keyless table's snapshot) spooled by an earlier
	// (crashed) session is read again: its spool file is garbage.
	if c.opts.SpoolDir != "" {
		old, _ := filepath.Glob(filepath.Join(c.opts.SpoolDir, "mysql-*.spool"))
		for _, f := range old {
			os.Remove(f)
		}
	}
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
		if _, err := snap.sched.Admit(ctx, id, &tables[id].snap, tables[id]); err != nil {
			return err
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

// listTables returns the base tables to capture, sorted.
func (c *Capture) listTables(ctx context.Context) ([]change.TableID, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME`, c.opts.Database)
	if err != nil {
		return nil, Classify(fmt.Errorf("list tables of %s: %w", c.opts.Database, err))
	}
	defer rows.Close()
	have := map[string]bool{}
	var out []change.TableID
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, Classify(err)
		}
		have[n] = true
		if c.wanted(n) {
			out = append(out, change.TableID{Schema: c.opts.Database, Name: n})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, Classify(err)
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

// refusable reports whether err, describing table id, leaves that table
// out on its own rather than stopping the run: a table with no key to
// merge by, or with a column named like a metadata column, that tables:
// does not list by name (capturing less than the list says is refused).
func (c *Capture) refusable(id change.TableID, err error) bool {
	if !errors.Is(err, fault.ErrNoPrimaryKey) && !errors.Is(err, fault.ErrColumnCollision) {
		return false
	}
	return !slices.Contains(c.opts.Tables, id.Name)
}

// recordRefused logs and records the tables refused on their own and the
// tables captured into bronze only (each whole set, so a table fixed
// since is no longer named).
func (c *Capture) recordRefused(ctx context.Context) error {
	if err := pipeline.RecordRefused(ctx, c.sink, c.log, c.refused, func(id change.TableID) string { return id.String() }); err != nil {
		return err
	}
	return c.recordBronzeOnly(ctx)
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

// errNoColumns: information_schema shows no column of the table (it was
// dropped or renamed since it was listed, or the user cannot see it).
var errNoColumns = errors.New("no columns")

// describe reads a table's columns and primary key.
func (c *Capture) describe(ctx context.Context, id change.TableID) (*table, error) {
	cols, key, err := LoadColumns(ctx, c.db, id.Schema, id.Name)
	if err != nil {
		return nil, Classify(err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s: no columns visible (dropped, or no SELECT privilege): %w", id, errNoColumns)
	}
	return c.tableOf(ctx, id, cols, key)
}

// tableOf builds the capture's table from its columns and key.
func (c *Capture) tableOf(ctx context.Context, id change.TableID, cols []Column, key []string) (*table, error) {
	cols = slices.Clone(cols)
	for i := range cols {
		cols[i].TimeAs = c.opts.TimeAs
	}
	t := &table{id: id, cols: cols, schema: &change.Schema{Key: key}, ctl: &tableCtl{}}
	for _, col := range cols {
		if reservedColumn(col.Name) {
			return nil, fault.With(fault.ErrColumnCollision, fmt.Sprintf(
				"table %s: column %q collides with a bronze metadata column (cdc_*), so the table is not captured: rename it at the source (ALTER TABLE %s RENAME COLUMN %s TO ...), or leave the table out with tables:",
				id, col.Name, quoteTable(id), QuoteIdent(col.Name)), nil)
		}
		m, err := Map(col)
		if err != nil {
			return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s column %q", id, col.Name), err)
		}
		t.maps = append(t.maps, m)
		t.schema.Fields = append(t.schema.Fields, m.Field())
	}
	t.keyless = len(key) == 0
	for _, k := range key {
		i := slices.IndexFunc(cols, func(c Column) bool { return c.Name == k })
		if i < 0 {
			return nil, fmt.Errorf("table %s: key column %q not among its columns", id, k)
		}
		t.keyIdx = append(t.keyIdx, i)
	}
	if ctx != nil {
		_ = c.db.QueryRowContext(ctx, `SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
			id.Schema, id.Name).Scan(&t.est)
	}
	return t, nil
}

// open creates (or verifies) the table's lake tables and reads its snapshot
// progress.
func (c *Capture) open(ctx context.Context, t *table) error {
	if err := c.checkTimeAs(ctx, t); err != nil {
		return err
	}
	st, err := c.sink.OpenTable(ctx, t.id, t.schema)
	if err != nil {
		return err
	}
	if err := c.recordTimeAs(ctx, t, st); err != nil {
		return err
	}
	if v := st.Props[pipeline.PropReplacedBefore]; v != "" {
		if t.ctl.replacedBefore, err = strconv.ParseUint(v, 10, 64); err != nil {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: %s = %q in the lake is not a binlog position", t.id, pipeline.PropReplacedBefore, v), err)
		}
	}
	// The columns' ids, from those the lake records; numbered ones are
	// recorded before any change is written, so that a rename read later
	// finds the old name's id in the lake.
	if err := t.ctl.ids.learn(st.Props[pipeline.PropColumnIDs]); err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s", t.id), err)
	}
	if t.ctl.ids.stamp(t.schema) {
		if st, err = c.sink.OpenTable(ctx, t.id, t.schema); err != nil {
			return err
		}
	}
	t.snap, err = parseSnapState(st.Props[PropSnapshot])
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: snapshot state in the lake cannot be read", t.id), err)
	}
	t.snap.Estimate = t.est
	return nil
}

func reservedColumn(name string) bool { return strings.HasPrefix(strings.ToLower(name), "cdc_") }

func quoteIdent(s string) string { return QuoteIdent(s) }

func quoteTable(id change.TableID) string { return QuoteIdent(id.Schema) + "." + QuoteIdent(id.Name) }

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
// binlog basename when known (mysql-bin.000007:1234), else the file's
// number (000007:1234).
func FormatPosition(basename string, lsn uint64) string {
	idx, pos := lsn>>32, lsn&0xffffffff
	if basename == "" {
		return fmt.Sprintf("%06d:%d", idx, pos)
	}
	return fmt.Sprintf("%s.%06d:%d", basename, idx, pos)
}

func describeResume(r Resume) string {
	if !r.GTID.IsEmpty() {
		return "gtid " + r.GTID.String() + " (" + binlogPos{r.File, r.Pos}.String() + ")"
	}
	return binlogPos{r.File, r.Pos}.String()
}

// Info keys of the checkpoint, for status.
const (
	InfoBinlogFile = "binlog-file"
	InfoBinlogPos  = "binlog-pos"
	InfoGTID       = "gtid"
	InfoFlavor     = "flavor"
	InfoServerID   = "server-id"
	InfoServerUUID = "server-uuid"
	// InfoBinlogBase is the binlog file basename (mysql-bin), for printing
	// positions as mysql-bin.000007:1234.
	InfoBinlogBase = "binlog-basename"
)

// startPoint is where the stream starts: the checkpoint's resume token, or,
// on a first start, the server's current position, recorded in the lake
// before any data moves (a crash before the first flush must not resume
// from a later "now").
func (c *Capture) startPoint(ctx context.Context, cp pipeline.Checkpoint, haveCP bool) (Resume, error) {
	cur := c.info.Position()
	c.basename = cur.File[:max(strings.LastIndexByte(cur.File, '.'), 0)]
	c.startWM = cp.Watermark
	if haveCP && cp.Resume != "" {
		r, err := ParseResume(cp.Resume)
		if err != nil {
			return r, fault.With(fault.ErrCorruptState, "the checkpoint's resume token cannot be read; refusing to guess a position", err)
		}
		return r, CheckResume(ctx, c.db, r)
	}
	if haveCP && cp.Pos != 0 {
		// A checkpoint without a resume token: resume from its position.
		r := cur
		r.GTID, _ = ParseGTIDSet(c.flavor, "")
		r.File, r.Pos = fmt.Sprintf("%s.%06d", c.basename, cp.Pos>>32), uint32(cp.Pos&0xffffffff)
		return r, CheckResume(ctx, c.db, r)
	}
	cur, err := c.consistentStart(ctx)
	if err != nil {
		return cur, err
	}
	c.startWM = time.Now().UTC()
	if err := c.sink.Flush(ctx, c.checkpoint(cur, binlogPos{cur.File, cur.Pos}.LSN(), c.startWM)); err != nil {
		return cur, err
	}
	return cur, nil
}

// checkpoint builds the checkpoint of a resume point.
func (c *Capture) checkpoint(r Resume, lsn uint64, wm time.Time) pipeline.Checkpoint {
	info := map[string]string{
		pipeline.InfoSource: "mysql",
		InfoBinlogFile:      r.File, InfoBinlogPos: strconv.FormatUint(uint64(r.Pos), 10),
		InfoFlavor: string(c.flavor), InfoServerID: strconv.FormatUint(uint64(r.ServerID), 10), InfoBinlogBase: c.basename,
	}
	// The GTID set is rendered once, for the info and the resume token.
	gtid := ""
	if !r.GTID.IsEmpty() {
		gtid = r.GTID.String()
		info[InfoGTID] = gtid
	}
	if r.ServerUUID != "" {
		info[InfoServerUUID] = r.ServerUUID
	}
	if r.GTID.flavor == "" {
		gtid = ""
	}
	return pipeline.Checkpoint{Pos: lsn, Resume: r.token(gtid), Watermark: wm, Info: info}
}

// queryer is a *sql.DB or *sql.Conn.
type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// binlogEnd is SHOW MASTER STATUS: the end of the last event group written.
func (c *Capture) binlogEnd(ctx context.Context, q queryer) (binlogPos, error) {
	p, _, err := c.masterStatus(ctx, q)
	return p, err
}

// masterStatus is SHOW MASTER STATUS: the binlog end and, on MySQL, the
// executed GTID set of the same instant (Executed_Gtid_Set; "" else).
func (c *Capture) masterStatus(ctx context.Context, q queryer) (binlogPos, string, error) {
	rows, err := q.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return binlogPos{}, "", Classify(fmt.Errorf("read the binlog position (SHOW MASTER STATUS; the user needs REPLICATION CLIENT / BINLOG MONITOR): %w", err))
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return binlogPos{}, "", fault.With(fault.ErrServerConfig, "the server writes no binlog (SHOW MASTER STATUS is empty): start it with log_bin", rows.Err())
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return binlogPos{}, "", Classify(err)
	}
	pos, err := strconv.ParseUint(string(vals[1]), 10, 32)
	if err != nil {
		return binlogPos{}, "", fmt.Errorf("SHOW MASTER STATUS: position %q: %w", vals[1], err)
	}
	var gtid string
	if len(vals) >= 5 {
		gtid = strings.ReplaceAll(string(vals[4]), "\n", "")
	}
	return binlogPos{File: string(vals[0]), Pos: uint32(pos)}, gtid, nil
}

// consistentStart is the server's current position as a Resume whose GTID
// set and file:pos name the same point: Preflight reads them at different
// moments, and under writes a GTID set behind the position would make the
// stream re-read transactions at positions below its start. MariaDB:
// SHOW MASTER STATUS, then BINLOG_GTID_POS of that position; MySQL: the
// file, position and Executed_Gtid_Set of one SHOW MASTER STATUS.
func (c *Capture) consistentStart(ctx context.Context) (Resume, error) {
	r := c.info.Position()
	p, gtid, err := c.masterStatus(ctx, c.db)
	if err != nil {
		return r, err
	}
	if c.flavor == MariaDB {
		var g sql.NullString
		if err := c.db.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", p.File, p.Pos).Scan(&g); err != nil {
			return r, Classify(fmt.Errorf("read the GTID position of %s: %w", p, err))
		}
		gtid = g.String
	}
	set, err := ParseGTIDSet(c.flavor, gtid)
	if err != nil {
		return r, fmt.Errorf("the server's GTID position %q: %w", gtid, err)
	}
	r.File, r.Pos, r.GTID = p.File, p.Pos, set
	return r, nil
}
