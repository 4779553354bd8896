package mysql

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	gmysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// eventCache bounds the events go-mysql reads ahead of the stream: row
// events can be large (up to max_allowed_packet), and every one buffered
// there is memory outside the budget.
const eventCache = 16

// txState is the transaction being read: its changes wait for its commit
// event, whose position they carry.
type txState struct {
	open    bool
	gtidSeq uint64 // GTID sequence number (MariaDB) or GNO (MySQL): cdc_source_tx_id
	gtid    *GTID  // nil: the server gives no GTIDs
	rows    []*replication.RowsEvent
	// raw are the events rows were parsed from, with the table maps
	// before them, in binlog order: what a spool needs.
	raw   [][]byte
	bytes int64
	// spool holds the raw events once the transaction outgrew memory
	// (spoolAt); rows and raw are then empty.
	spool *txSpool
}

// stream reads the binlog and feeds the Sink through the Engine. Everything
// in it is owned by the run goroutine.
type stream struct {
	c       *Capture
	tables  map[change.TableID]*table
	eng     *pipeline.Engine
	syncer  *replication.BinlogSyncer
	bs      *replication.BinlogStreamer
	windows *windows
	ready   chan *window
	waiting []*window // chunks read, waiting for the stream to pass their high watermark
	snap    *snapshotter

	file    string // binlog file being read
	readPos uint64 // LSN of the end of the last event read
	tx      txState
	gtid    GTIDSet // executed set up to the last completed transaction
	// done is the resume point after the last completed transaction (or
	// the last event read between transactions).
	done Resume
	// stale: tables whose schema may have changed (a DDL statement): the
	// next row event's column names are checked against a fresh describe.
	stale           map[change.TableID]bool
	ddlp            DDLParser
	heartbeatPeriod time.Duration
	// readTimeout: a server silent this long (no event, no heartbeat) is
	// gone; 0 when heartbeats are off.
	readTimeout time.Duration
	// fde is the raw format description event of the binlog being read.
	fde []byte
	// lastWatermark is the commit time of the last transaction (or
	// heartbeat) read.
	lastWatermark time.Time
	// pending: a resume point completed since the engine was last told
	// (publish); pendingLSN is the position read at that point. Building a
	// checkpoint (its info map, the resume token, the GTID set as text)
	// per transaction was 8 % of a catch-up's CPU: it is built once per
	// event batch, and before any flush, instead.
	pending    bool
	pendingLSN uint64
	// ids are table ids seen in the binlog (tableID).
	ids []change.TableID
	// rawBuf and rowsBuf are the last transaction's event lists, reused.
	rawBuf  [][]byte
	rowsBuf []*replication.RowsEvent
}

func newStream(c *Capture, tables map[change.TableID]*table, start Resume) (*stream, error) {
	s := &stream{c: c, tables: tables, windows: newWindows(), ready: make(chan *window, 64),
		file: start.File, done: start, stale: map[change.TableID]bool{}}
	s.readPos = binlogPos{start.File, start.Pos}.LSN()
	var err error
	s.gtid = start.GTID
	if s.gtid.Flavor() == "" {
		s.gtid, _ = ParseGTIDSet(c.flavor, "")
	}
	s.lastWatermark = c.startWM
	startCP := c.checkpoint(start, s.readPos, c.startWM)
	s.eng = pipeline.NewEngine(c.sink, startCP, pipeline.EngineOptions{
		CommitInterval: c.opts.CommitInterval,
		CommitBytes:    c.opts.CommitBytes,
		// MySQL keeps no slot: the checkpoint in the lake is the resume
		// point, and nothing is sent to the server.
		Ack: func(context.Context, pipeline.Checkpoint) error { return nil },
		OnDurable: func(cp pipeline.Checkpoint) {
			if c.opts.OnProgress != nil {
				c.opts.OnProgress(cp)
			}
		},
	})
	cfg := replication.BinlogSyncerConfig{
		ServerID:         c.opts.ServerID,
		Flavor:           string(c.flavor),
		Host:             c.opts.Host,
		Port:             uint16(c.opts.Port),
		User:             c.opts.User,
		Password:         c.opts.Password,
		HeartbeatPeriod:  c.opts.HeartbeatInterval,
		DisableRetrySync: true, // a broken stream ends the session; the next resumes from the lake
		EventCacheCount:  eventCache,
		// The stream keeps its own GTID set (s.gtid): go-mysql's copy of
		// its set on every XID and query event (a map of maps per
		// transaction, a tenth of a catch-up's allocations) is not used.
		DiscardGTIDSet: true,
		Logger:         c.log.With("component", "binlog"),
	}
	if cfg.HeartbeatPeriod <= 0 || cfg.HeartbeatPeriod > 30*time.Second {
		cfg.HeartbeatPeriod = 30 * time.Second
	}
	if c.opts.HeartbeatInterval > 0 {
		// Enforced by run, not by go-mysql's per-packet read deadline.
		s.readTimeout = 3*cfg.HeartbeatPeriod + 10*time.Second
	}
	SyncerSettings(&cfg)
	s.heartbeatPeriod = cfg.HeartbeatPeriod
	s.syncer = replication.NewBinlogSyncer(cfg)
	if !start.GTID.IsEmpty() && c.info.GTIDMode {
		s.bs, err = s.syncer.StartSyncGTID(s.gtid.GoMySQL())
	} else {
		s.bs, err = s.syncer.StartSync(gmysql.Position{Name: start.File, Pos: start.Pos})
	}
	if err != nil {
		s.syncer.Close()
		return nil, s.streamError(fmt.Errorf("start reading the binlog from %s: %w", describeResume(start), err))
	}
	return s, nil
}

func (s *stream) close() {
	s.syncer.Close()
	if s.tx.spool != nil {
		s.tx.spool.remove()
	}
}

// streamError names the errors a binlog dump can end with.
func (s *stream) streamError(err error) error {
	if c := Classify(err); fault.ClassOf(c) != fault.Unknown {
		return c
	}
	var me *gmysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case gmysql.ER_MASTER_FATAL_ERROR_READING_BINLOG:
			return fault.With(fault.ErrWALLost, fmt.Sprintf(
				"the server cannot send the binlog from %s (%s): the binlog tidemark needs was purged, or the GTID position is not in it. "+
					"Nothing was skipped silently. Re-snapshot: run `tidemark resnapshot --all` with the same --source/--warehouse/--name flags, then `tidemark run`",
				describeResume(s.done), me.Message), err)
		case 1045, 1227, 1044:
			return fault.With(fault.ErrPermissionDenied, "the MySQL user may not read the binlog: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO it", err)
		}
		if strings.Contains(strings.ToLower(me.Message), "server_id") || strings.Contains(me.Message, "same server id") {
			return fault.With(fault.ErrAlreadyRunning, fmt.Sprintf(
				"another replica is reading the binlog with server_id %d: each reader needs its own. Set mysql.server_id to an unused value", s.c.opts.ServerID), err)
		}
	}
	return fault.MarkTransient(err)
}

func (s *stream) run(ctx context.Context) error {
	// The reader hands over every event go-mysql has ready at once (the
	// one it waited for, then its cache): one goroutine hand-off, and one
	// round of the reconcile/poll/timer work below, per batch instead of
	// per event. A TPC-B transaction is about 10 events; at catch-up the
	// cache is full and a batch holds up to eventCache+1 of them.
	events := make(chan []*replication.BinlogEvent)
	readErr := make(chan error, 1)
	go func() {
		for {
			ev, err := s.bs.GetEvent(ctx)
			if err != nil {
				readErr <- err
				return
			}
			batch := append([]*replication.BinlogEvent{ev}, s.bs.DumpEvents()...)
			select {
			case events <- batch:
			case <-ctx.Done():
				readErr <- ctx.Err()
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// A server that sends nothing, not even a heartbeat, for this long is
	// gone: checked here, instead of go-mysql's ReadTimeout, which sets a
	// read deadline on the connection for every packet (8 % of the CPU of
	// a catch-up). Only the time the loop waits for the reader counts: a
	// long flush or reconcile is not the server's silence.
	var silent time.Duration
	for {
		if ctx.Err() != nil {
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s.publish()
			err := s.eng.Sync(fctx)
			cancel()
			if err != nil {
				return fmt.Errorf("final flush on shutdown: %w", err)
			}
			s.c.log.Info("capture stopped cleanly", "position", describeResume(s.done))
			return ctx.Err()
		}
		if err := s.reconcileReady(ctx); err != nil {
			return err
		}
		s.publish()
		if err := s.eng.Poll(ctx); err != nil {
			return err
		}
		wait := time.Until(s.eng.Wake())
		if wait < 5*time.Millisecond {
			wait = 5 * time.Millisecond
		}
		timer.Reset(wait)
		waitFrom := time.Now()
		select {
		case <-ctx.Done():
		case <-timer.C:
			silent += time.Since(waitFrom)
			if s.readTimeout > 0 && silent > s.readTimeout {
				return s.streamError(fmt.Errorf("read the binlog after %s: nothing received, not even a heartbeat, for %s", describeResume(s.done), s.readTimeout))
			}
		case w := <-s.ready:
			s.waiting = append(s.waiting, w)
		case err := <-readErr:
			if ctx.Err() != nil {
				continue
			}
			return s.streamError(fmt.Errorf("read the binlog after %s: %w", describeResume(s.done), err))
		case batch := <-events:
			silent = 0
			for _, ev := range batch {
				if err := s.handle(ctx, ev); err != nil {
					return err
				}
			}
		}
	}
}

// handle processes one binlog event.
func (s *stream) handle(ctx context.Context, ev *replication.BinlogEvent) error {
	h := ev.Header
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		s.file = string(e.NextLogName)
		// The rotate a GTID dump starts with says position 4 of the file
		// that holds the GTID: the position read never moves back.
		if p := (binlogPos{s.file, uint32(e.Position)}).LSN(); p > s.readPos {
			s.readPos = p
			s.between(time.Time{})
		}
		return nil
	case *replication.MariadbGTIDEvent:
		g := GTID{Flavor: MariaDB, Domain: e.GTID.DomainID, ServerID: e.GTID.ServerID, Seq: e.GTID.SequenceNumber}
		s.tx = txState{open: true, gtidSeq: g.Seq, gtid: &g}
	case *replication.GTIDEvent:
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return fault.With(fault.ErrCorruptState, "a GTID event's source id cannot be read", err)
		}
		g := GTID{Flavor: MySQL, UUID: u, Seq: uint64(e.GNO)}
		s.tx = txState{open: true, gtidSeq: g.Seq, gtid: &g}
	case *replication.QueryEvent:
		q := strings.TrimSpace(string(e.Query))
		switch strings.ToUpper(q) {
		case "BEGIN":
			s.tx.open = true
		case "COMMIT":
			s.setPos(h)
			return s.commit(ctx, h)
		default:
			s.setPos(h)
			// The statement is read under the sql_mode it was written with.
			mode, _ := QueryEventSQLMode(e.StatusVars)
			s.ddlp.ANSIQuotes, s.ddlp.NoBackslashEscapes = mode.ANSIQuotes(), mode.NoBackslashEscapes()
			if err := s.ddl(ctx, string(e.Schema), q, h); err != nil {
				return err
			}
			return s.commit(ctx, h)
		}
	case *replication.FormatDescriptionEvent:
		// Kept to parse a spooled transaction's events again.
		s.fde = ev.RawData
	case *replication.TableMapEvent:
		id := s.tableID(e.Schema, e.Table)
		if _, ok := s.tables[id]; ok && s.tx.open {
			return s.buffer(ev, nil)
		}
	case *replication.RowsEvent:
		id := s.tableID(e.Table.Schema, e.Table.Table)
		if _, ok := s.tables[id]; ok {
			return s.buffer(ev, e)
		}
	case *replication.XIDEvent:
		s.setPos(h)
		return s.commit(ctx, h)
	default:
		if h.EventType == replication.HEARTBEAT_EVENT {
			// The server had nothing more to send: the source is captured
			// up to about now (a heartbeat period back, as the server may
			// have written events since it sent this one). Its position is
			// not used: it can be ahead of events still on their way.
			if !s.tx.open {
				s.between(time.Now().UTC().Add(-s.heartbeatPeriod))
			}
			return nil
		}
	}
	if !s.tx.open {
		s.setPos(h)
	}
	return nil
}

// tableID is the TableID of a binlog event's schema and table names,
// from the ids seen before when it is one of them: two string copies per
// table map and row event were a tenth of the stream's allocations.
func (s *stream) tableID(schema, name []byte) change.TableID {
	for _, id := range s.ids {
		if id.Name == string(name) && id.Schema == string(schema) {
			return id
		}
	}
	id := change.TableID{Schema: string(schema), Name: string(name)}
	if len(s.ids) < 64 {
		s.ids = append(s.ids, id)
	}
	return id
}

// setPos moves the position read to the end of the event of header h. It
// never moves back: a GTID dump starts with the file's format description
// and GTID list events, whose positions lie before the resume point.
func (s *stream) setPos(h *replication.EventHeader) {
	if h.LogPos > 0 {
		if p := (binlogPos{s.file, h.LogPos}).LSN(); p > s.readPos {
			s.readPos = p
		}
	}
}

// between records a resume point between transactions: everything up to
// readPos has been read and handed to the sink.
func (s *stream) between(wm time.Time) {
	if s.tx.open {
		return
	}
	p := uint32(s.readPos & 0xffffffff)
	if s.done.File == s.file && s.done.Pos == p && wm.IsZero() {
		return
	}
	s.done.File, s.done.Pos = s.file, p
	s.completed(wm)
}

// completed records s.done as the resume point the engine is to be handed
// (by publish, before the engine next flushes or polls).
func (s *stream) completed(wm time.Time) {
	s.done.GTID = s.gtid
	// The watermark never moves back (a commit's timestamp is its
	// statement's start, a heartbeat's an estimate).
	if wm.After(s.lastWatermark) {
		s.lastWatermark = wm
	}
	s.pending, s.pendingLSN = true, s.readPos
}

// publish hands the last completed resume point to the engine. Called
// before every eng.Poll, eng.Flush and eng.Sync: what a flush records is
// then exactly what it was when the point was completed.
func (s *stream) publish() {
	if !s.pending {
		return
	}
	s.pending = false
	if a := s.eng.Acked().Watermark; a.After(s.lastWatermark) {
		s.lastWatermark = a
	}
	s.eng.Completed(s.c.checkpoint(s.done, s.pendingLSN, s.lastWatermark))
}

// commit ends the open transaction at the event of header h: its changes
// are written at its commit position, then it is handed to the engine.
func (s *stream) commit(ctx context.Context, h *replication.EventHeader) error {
	tx := s.tx
	s.tx = txState{}
	defer s.reuse(&tx)
	lsn := s.readPos
	at := time.Unix(int64(h.Timestamp), 0).UTC()
	var seq int64
	for _, e := range tx.rows {
		if err := s.rowsEvent(ctx, e, lsn, int64(tx.gtidSeq), at, &seq); err != nil {
			return err
		}
	}
	if tx.spool != nil {
		err := tx.spool.replay(s, func(e *replication.RowsEvent) error {
			return s.rowsEvent(ctx, e, lsn, int64(tx.gtidSeq), at, &seq)
		})
		tx.spool.remove()
		if err != nil {
			return err
		}
	}
	if tx.gtid != nil {
		g, err := s.gtid.Add(*tx.gtid)
		if err != nil {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("the binlog's transaction after %s cannot be placed", describeResume(s.done)), err)
		}
		s.gtid = g
	}
	s.done.File, s.done.Pos = s.file, uint32(lsn&0xffffffff)
	s.completed(at)
	return nil
}

// rowsEvent writes the changes of one row event.
func (s *stream) rowsEvent(ctx context.Context, e *replication.RowsEvent, lsn uint64, txid int64, at time.Time, seq *int64) error {
	id := s.tableID(e.Table.Schema, e.Table.Table)
	if t := s.tables[id]; t != nil && lsn <= t.ctl.replacedBefore {
		// Before the table was replaced: its re-snapshot holds the
		// change, and its layout may be the one it was replaced for.
		return nil
	}
	t, err := s.tableFor(ctx, id, e.Table)
	if err != nil || t == nil {
		return err
	}
	// emit writes one change: row and before are the event's values,
	// vals and bvals their decoded form (decoded by emit when nil), unch
	// the columns left out of vals (a delete's row: values over
	// max_value_bytes).
	emit := func(op change.Op, row, before, vals, bvals []any, unch []string) error {
		*seq++
		pos := change.Position{LSN: lsn, Seq: *seq}
		var derr error
		if vals == nil {
			// A delete is never refused for size: its row only names the
			// row removed, and leaves a value over the maximum out.
			vals, unch, derr = s.decodeRow(t, row, op == change.OpDelete)
		}
		if derr == nil && before != nil && bvals == nil {
			bvals, _, derr = s.decodeRow(t, before, true)
		}
		if derr != nil {
			return s.c.sink.DeadLetter(ctx, change.DeadLetter{Table: id, Op: op, Pos: pos, TxID: txid, CommitTime: at,
				Raw: rawJSON(t, row, s.c.opts.MaxValueBytes), Error: derr.Error()})
		}
		s.windows.changedRow(t, vals, lsn)
		if err := s.write(ctx, &change.Change{Table: id, Op: op, Values: vals, Before: bvals, Unchanged: unch, Schema: t.schema,
			Pos: pos, TxID: txid, CommitTime: at}); err != nil {
			return err
		}
		if s.eng.Full() {
			// Back-pressure inside a transaction: the checkpoint the flush
			// records is the last complete transaction's.
			s.publish()
			if err := s.eng.Flush(ctx); err != nil {
				return err
			}
			// The previous flush is durable, a part of this transaction
			// may be in the lake: tests kill the process here.
			failpoint.Inject("mysql-after-backpressure-flush")
		}
		return nil
	}
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
		for _, r := range e.Rows {
			if err := emit(change.OpInsert, r, nil, nil, nil, nil); err != nil {
				return err
			}
		}
	case replication.EnumRowsEventTypeUpdate:
		for i := 0; i+1 < len(e.Rows); i += 2 {
			before, after := e.Rows[i], e.Rows[i+1]
			// The old row only identifies the row changed: max_value_bytes
			// applies to the new one (a value over it in the old row is
			// left out).
			ov, ounch, oerr := s.decodeRow(t, before, true)
			nv, _, nerr := s.decodeRow(t, after, false)
			if oerr != nil || nerr != nil {
				// emit decodes again and dead-letters the row.
				ov, nv = nil, nil
			}
			if oerr == nil && nerr == nil && !sameKey(t, ov, nv) {
				// A key change is a delete of the old key and an insert of the
				// new one, for replay by key.
				if err := emit(change.OpDelete, before, before, ov, nil, ounch); err != nil {
					return err
				}
				if err := emit(change.OpInsert, after, nil, nv, nil, nil); err != nil {
					return err
				}
				continue
			}
			if err := emit(change.OpUpdate, after, before, nv, ov, nil); err != nil {
				return err
			}
		}
	case replication.EnumRowsEventTypeDelete:
		for _, r := range e.Rows {
			if err := emit(change.OpDelete, r, r, nil, nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// tableFor returns the captured table of a row event, its column layout
// checked against the TABLE_MAP event's column names (binlog_row_metadata
// = FULL): after a DDL statement the table is described again, and a
// layout that matches neither is a named error, never misaligned columns.
func (s *stream) tableFor(ctx context.Context, id change.TableID, tm *replication.TableMapEvent) (*table, error) {
	t := s.tables[id]
	if t == nil {
		return nil, nil
	}
	if len(tm.ColumnName) == 0 {
		return nil, fault.With(fault.ErrServerConfig, fmt.Sprintf(
			"table %s: the binlog's row events carry no column names: set binlog_row_metadata = FULL on the server (SET GLOBAL binlog_row_metadata = 'FULL' and in its config)", id), nil)
	}
	if sameColumnNames(tm.ColumnName, t.cols) && !s.stale[id] {
		return s.applyTableMap(t, tm)
	}
	names := tm.ColumnNameString()
	// After a DDL statement (or with columns the table did not have): the
	// table as it is now, if its columns are the event's; else the layout
	// the DDL statements describe.
	nt, err := s.redescribe(ctx, t)
	if err != nil {
		return nil, err
	}
	if !sameNames(names, nt.names()) && t.after != nil && sameNames(names, columnNames(t.after)) {
		// The table changed again since this event: its layout is the one
		// the DDL statements read so far describe.
		nt, err = s.c.tableOf(nil, id, t.after, t.schema.Key)
		if err != nil {
			return nil, err
		}
	}
	if !sameNames(names, nt.names()) {
		// A session that resumes behind DDL it has not read yet (columns
		// added or redefined while tidemark was stopped): the event's
		// columns by name, as the table defines them now. A column the
		// table no longer has (dropped or renamed since) cannot be typed:
		// the named error below.
		if cols, ok := columnsByName(names, nt.cols); ok {
			if nt, err = s.c.tableOf(nil, id, cols, t.schema.Key); err != nil {
				return nil, err
			}
		}
	}
	if !sameNames(names, nt.names()) {
		return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
			"table %s: the binlog's row event has columns %v, the table now has %v: a column was dropped or renamed after this event while tidemark was not reading, so the event's layout cannot be typed. "+
				"Nothing was skipped. Re-snapshot the table (tidemark resnapshot %s), or restore the column", id, names, nt.names(), id), nil)
	}
	nt.after = nil
	// Its columns keep their ids; a column renamed by the statements read
	// has the old name's (ddl), so the lake renames it.
	t.ctl.ids.stamp(nt.schema)
	// The table as now described (an enum's members, say, may have
	// changed with the same lake schema); the lake evolves when the
	// schema did.
	if !sameSchema(nt.schema, t.schema) {
		s.c.withDefaults(t.schema, nt)
		if _, err := s.c.sink.OpenTable(ctx, id, nt.schema); err != nil {
			return nil, err
		}
		s.c.log.Info("schema change", "table", id.String(), "columns", len(nt.cols))
	}
	// A new table value: a snapshot worker may still read the old one.
	nt.snap, nt.est, nt.ctl = t.snap, t.est, t.ctl
	s.tables[id] = nt
	delete(s.stale, id)
	return s.applyTableMap(nt, tm)
}

// applyTableMap brings t's columns in line with the first table map event
// of the table read (ApplyTableMap: exact enum/set members, MariaDB's old
// temporal formats) and returns the table to decode its row events with:
// t itself when that changes nothing, else a new table value (a snapshot
// worker may be decoding with t's mappings).
func (s *stream) applyTableMap(t *table, tm *replication.TableMapEvent) (*table, error) {
	if t.mapped {
		return t, nil
	}
	cols := slices.Clone(t.cols)
	if err := ApplyTableMap(cols, tm); err != nil {
		return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s", t.id), err)
	}
	nt := *t
	nt.cols, nt.maps, nt.mapped = cols, make([]*Mapping, len(cols)), true
	for i, c := range cols {
		m, err := Map(c)
		if err != nil {
			return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s column %q", t.id, c.Name), err)
		}
		nt.maps[i] = m
	}
	s.tables[t.id] = &nt
	return &nt, nil
}

func sameSchema(a, b *change.Schema) bool {
	if len(a.Fields) != len(b.Fields) {
		return false
	}
	for i := range a.Fields {
		if a.Fields[i].Name != b.Fields[i].Name || !a.Fields[i].Type.Equals(b.Fields[i].Type) {
			return false
		}
	}
	return true
}

// columnsByName returns the columns of have named names, in that order.
func columnsByName(names []string, have []Column) ([]Column, bool) {
	out := make([]Column, len(names))
	for i, n := range names {
		j := slices.IndexFunc(have, func(c Column) bool { return strings.EqualFold(c.Name, n) })
		if j < 0 {
			return nil, false
		}
		out[i] = have[j]
	}
	return out, true
}

func columnNames(cols []Column) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c.Name
	}
	return out
}

// sameColumnNames is sameNames of a table map event's column names and
// cols' names, without making either a []string (it runs for every row
// event).
func sameColumnNames(names [][]byte, cols []Column) bool {
	if len(names) != len(cols) {
		return false
	}
	for i := range names {
		// Equal bytes first: the common case, and cheaper than EqualFold.
		if n := names[i]; string(n) != cols[i].Name && !strings.EqualFold(string(n), cols[i].Name) {
			return false
		}
	}
	return true
}

func sameNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !strings.EqualFold(a[i], b[i]) {
			return false
		}
	}
	return true
}

// decodeRow decodes a binlog row image. A value longer than
// max_value_bytes is a value_too_large error (the row is a dead letter);
// with omit (a delete's row, an update's old row), it is left out instead
// (nil), its column named in the list returned, unless it is a key column.
func (s *stream) decodeRow(t *table, row []any, omit bool) ([]any, []string, error) {
	if len(row) != len(t.cols) {
		return nil, nil, fmt.Errorf("row has %d columns, table %s has %d", len(row), t.id, len(t.cols))
	}
	maxValue := s.c.opts.MaxValueBytes
	var omitted []string
	out := make([]any, len(row))
	for i, v := range row {
		m := t.maps[i]
		over := m.overRaw(v, false, maxValue)
		var x any
		if over == nil {
			var err error
			if x, err = m.DecodeBinlog(v); err != nil {
				return nil, nil, fmt.Errorf("column %q: %w", t.cols[i].Name, err)
			}
			over = m.overDecoded(x, false, maxValue)
		}
		if over != nil {
			if !omit || slices.Contains(t.keyIdx, i) {
				return nil, nil, over
			}
			omitted = append(omitted, t.cols[i].Name)
			continue
		}
		out[i] = x
	}
	return out, omitted, nil
}

// rawJSON renders a binlog row for the dead-letter table, without the
// values whose bytes are longer than maxValue (0: no maximum): the error of
// such a row names the column and its length, and the key stays.
func rawJSON(t *table, row []any, maxValue int64) string {
	m := make(map[string]any, len(row))
	for i, v := range row {
		if n, ok := byteLen(v); ok && maxValue > 0 && n > maxValue {
			continue
		}
		name := strconv.Itoa(i)
		if i < len(t.cols) {
			name = t.cols[i].Name
		}
		switch {
		case v == nil:
			m[name] = nil
		case i < len(t.maps):
			m[name] = t.maps[i].BinlogText(v)
		default:
			m[name] = fmt.Sprint(v)
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// keyOf is the comparable form of a row's key values: for each key column
// "%T:%v\x00" of its value, written without fmt for the common types.
func keyOf(t *table, vals []any) string {
	var b []byte
	for _, i := range t.keyIdx {
		if i < len(vals) {
			b = appendKeyValue(b, vals[i])
		}
	}
	return string(b)
}

// appendKeyValue appends fmt's "%T:%v\x00" of v.
func appendKeyValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case int64:
		b = strconv.AppendInt(append(b, "int64:"...), x, 10)
	case int32:
		b = strconv.AppendInt(append(b, "int32:"...), int64(x), 10)
	case uint64:
		b = strconv.AppendUint(append(b, "uint64:"...), x, 10)
	case string:
		b = append(append(b, "string:"...), x...)
	default:
		b = fmt.Appendf(b, "%T:%v", v, v)
	}
	return append(b, 0)
}

// sameKey reports whether two decoded rows of t have the same key, as
// keyOf compares them.
func sameKey(t *table, a, b []any) bool {
	var buf [64]byte
	for _, i := range t.keyIdx {
		if i >= len(a) || i >= len(b) {
			if (i < len(a)) != (i < len(b)) {
				return false
			}
			continue
		}
		ka := appendKeyValue(buf[:0], a[i])
		n := len(ka)
		kb := appendKeyValue(ka, b[i])
		if string(ka[:n]) != string(kb[n:]) {
			return false
		}
	}
	return true
}

// ddl applies a statement of the binlog other than BEGIN/COMMIT, in stream
// order, parsed by ddl.go (the TiDB parser): a statement it cannot read
// stops the stream (unsupported_ddl), never skipped.
func (s *stream) ddl(ctx context.Context, schema, q string, h *replication.EventHeader) error {
	d, err := s.ddlp.Parse(schema, q)
	if err != nil {
		return err
	}
	at := time.Unix(int64(h.Timestamp), 0).UTC()
	idOf := func(n TableName) change.TableID { return change.TableID{Schema: n.Schema, Name: n.Name} }
	ours := func(n TableName) bool { return n.Schema == s.c.opts.Database && s.c.wanted(n.Name) }
	switch d.Kind {
	case NotSchema, CreateDatabase:
	case TruncateTable:
		for _, n := range d.Tables {
			id := idOf(n)
			t := s.tables[id]
			if t == nil || s.readPos <= t.ctl.replacedBefore {
				continue
			}
			s.windows.truncate(id, s.readPos)
			if err := s.write(ctx, &change.Change{Table: id, Op: change.OpTruncate, Values: make([]any, len(t.cols)), Schema: t.schema,
				Pos: change.Position{LSN: s.readPos, Seq: 1}, TxID: int64(s.tx.gtidSeq), CommitTime: at}); err != nil {
				return err
			}
		}
	case AlterTable:
		fixed := false
		for _, n := range d.Tables {
			t := s.tables[idOf(n)]
			if _, refused := s.c.refused[idOf(n)]; t == nil && refused {
				fixed = true // perhaps: described again below
			}
			if t == nil || s.readPos <= t.ctl.replacedBefore {
				continue // (before a replace: the table is described as it is now)
			}
			// The layout after the statement, for the next row events (the
			// table may have changed again since, so information_schema is
			// not asked now).
			was := t.afterCols()
			t.after = alteredColumns(was, d.Columns)
			for _, ch := range d.Columns {
				// A renamed column keeps its id (columnids.go).
				if (ch.Op == RenameColumn || ch.Op == ChangeColumn) && ch.NewName != "" &&
					slices.ContainsFunc(was, func(c Column) bool { return strings.EqualFold(c.Name, ch.Column) }) {
					t.ctl.ids.rename(ch.Column, ch.NewName)
				}
			}
			s.stale[t.id] = true
			if d.KeyChanged {
				if err := s.keyChanged(ctx, t, d); err != nil {
					return err
				}
			}
		}
		for _, rn := range d.Renames {
			if err := s.renamed(ctx, rn); err != nil {
				return err
			}
		}
		if fixed {
			if err := s.pickUpNewTables(ctx); err != nil {
				return err
			}
		}
	case RenameTable:
		for _, rn := range d.Renames {
			if err := s.renamed(ctx, rn); err != nil {
				return err
			}
		}
	case DropTable:
		unrefused := false
		for _, n := range d.Tables {
			if _, ok := s.tables[idOf(n)]; ok {
				delete(s.tables, idOf(n))
				s.c.log.Warn("captured table dropped at the source: its bronze and silver tables stay as they were", "table", idOf(n).String())
			}
			if _, ok := s.c.refused[idOf(n)]; ok {
				delete(s.c.refused, idOf(n))
				unrefused = true
			}
		}
		if unrefused {
			if err := s.c.recordRefused(ctx); err != nil {
				return err
			}
		}
	case DropDatabase:
		if d.Database == s.c.opts.Database {
			for id := range s.tables {
				delete(s.tables, id)
			}
			s.c.log.Warn("the captured database was dropped at the source", "database", d.Database)
		}
	case CreateTable:
		for _, n := range d.Tables {
			if !ours(n) {
				continue
			}
			if d.OrReplace {
				delete(s.tables, idOf(n))
			}
			if err := s.pickUpNewTables(ctx); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// renamed follows a table rename: the old name is no longer captured, a
// new name in the database is picked up as a new table (snapshotted).
func (s *stream) renamed(ctx context.Context, rn TableRename) error {
	from := change.TableID{Schema: rn.From.Schema, Name: rn.From.Name}
	if _, ok := s.tables[from]; ok {
		delete(s.tables, from)
		s.c.log.Warn("captured table renamed at the source: the new name is captured as a new table", "table", from.String(), "to", rn.To.String())
	}
	if rn.To.Schema == s.c.opts.Database && s.c.wanted(rn.To.Name) {
		return s.pickUpNewTables(ctx)
	}
	return nil
}

// afterCols is the column layout the last DDL left (the current one if none).
func (t *table) afterCols() []Column {
	if t.after != nil {
		return t.after
	}
	return t.cols
}

// alteredColumns applies an ALTER TABLE's column clauses to cols.
func alteredColumns(cols []Column, changes []ColumnChange) []Column {
	out := slices.Clone(cols)
	find := func(name string) int {
		return slices.IndexFunc(out, func(c Column) bool { return strings.EqualFold(c.Name, name) })
	}
	place := func(c Column, first bool, after string) {
		switch {
		case first:
			out = slices.Insert(out, 0, c)
		case after != "":
			if i := find(after); i >= 0 {
				out = slices.Insert(out, i+1, c)
				return
			}
			out = append(out, c)
		default:
			out = append(out, c)
		}
	}
	newCol := func(like Column, name, typ string) Column {
		c := Column{Schema: like.Schema, Table: like.Table, Name: name, ColumnType: typ, Nullable: true}
		if err := c.ParseColumnType(); err != nil {
			c.DataType = "" // unmappable: the row event's check will say so
		}
		return c
	}
	var like Column
	if len(cols) > 0 {
		like = cols[0]
	}
	for _, ch := range changes {
		i := find(ch.Column)
		switch ch.Op {
		case AddColumn:
			if i >= 0 && ch.IfNotExists {
				continue
			}
			place(newCol(like, ch.Column, ch.Type), ch.First, ch.After)
		case DropColumn:
			if i >= 0 {
				out = slices.Delete(out, i, i+1)
			}
		case RenameColumn:
			if i >= 0 {
				out[i].Name = ch.NewName
			}
		case ModifyColumn, ChangeColumn:
			if i < 0 {
				continue
			}
			name := ch.Column
			if ch.Op == ChangeColumn && ch.NewName != "" {
				name = ch.NewName
			}
			c := newCol(out[i], name, ch.Type)
			if ch.First || ch.After != "" {
				out = slices.Delete(out, i, i+1)
				place(c, ch.First, ch.After)
			} else {
				out[i] = c
			}
		}
	}
	return out
}

// pickUpNewTables sets up tables of the database that appeared since the
// start, or that were refused and are fixed (ALTER TABLE … ADD PRIMARY
// KEY), and queues their snapshot. A table still refused stays out, named
// in status.
func (s *stream) pickUpNewTables(ctx context.Context) error {
	ids, err := s.c.listTables(ctx)
	if err != nil {
		return err
	}
	changed := false
	for id := range s.c.refused {
		if !slices.Contains(ids, id) { // dropped or renamed since
			delete(s.c.refused, id)
			changed = true
		}
	}
	for _, id := range ids {
		if _, ok := s.tables[id]; ok {
			continue
		}
		t, err := s.c.describe(ctx, id)
		if errors.Is(err, errNoColumns) || noSuchTable(err) {
			// Gone again since it was listed (renamed away, dropped): a
			// later statement of the stream brings it back if it returns.
			s.c.log.Info("new table gone before it could be described: not picked up", "table", id.String())
			continue
		}
		if s.c.refusable(id, err) {
			if prev, was := s.c.refused[id]; !was || prev.Error() != err.Error() {
				s.c.refused[id], changed = err, true
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := s.c.open(ctx, t); err != nil {
			return err
		}
		if _, was := s.c.refused[id]; was {
			delete(s.c.refused, id)
			changed = true
		}
		if t.snap.Status != snapPending || t.snap.Rows > 0 {
			// The lake holds an earlier table of this name (dropped and
			// created again, or renamed away and back): its silver rows
			// are not this table's.
			if err := s.reread(ctx, t); err != nil {
				return err
			}
		}
		s.tables[id] = t
		if t.keyless {
			s.c.noteKeyless(t)
			changed = true
		}
		s.c.log.Info("new table picked up", "table", id.String())
		if _, err := s.snap.sched.Admit(ctx, t.id, &t.snap, t); err != nil {
			return err
		}
	}
	if changed {
		return s.c.recordRefused(ctx)
	}
	return nil
}

// reread requests a re-read of table t, picked up at the current binlog
// position under a name whose lake tables hold an earlier table's changes
// (a table dropped and created again, or renamed away and back): as for a
// key change (rekey.go), everything read before is committed, then a
// marker commit sets its snapshot back to pending under a new request id,
// and silver, once the re-read is complete, is replaced by what bronze
// holds from the marker on. Bronze keeps the earlier table's changes
// before the marker. Stream goroutine.
func (s *stream) reread(ctx context.Context, t *table) error {
	at := FormatPosition(s.c.basename, s.readPos)
	id := time.Now().UTC().Format("20060102T150405Z") + "-recreated-" + requestTag()
	reason := fmt.Sprintf("the table was created (or renamed) again under this name at %s: its lake tables held an earlier table's rows, so it is read again", at)
	s.c.log.Warn("table created again under a captured name: reading it again, silver is replaced when the read is complete",
		"table", t.id.String(), "seen_at", at, "request", id)
	s.publish()
	if err := s.eng.Sync(ctx); err != nil {
		return err
	}
	st := pipeline.SnapshotState{Status: snapPending, Request: id, Estimate: t.est}
	if err := s.c.sink.WriteBatch(ctx, t.id, nil, map[string]string{
		PropSnapshot:                  st.Encode(),
		pipeline.PropResnapshot:       id,
		pipeline.PropResnapshotReason: reason,
	}); err != nil {
		return err
	}
	s.publish()
	if err := s.eng.Sync(ctx); err != nil {
		return err
	}
	t.snap = st
	return nil
}

// spoolAt is the size of a transaction's row events (of captured tables)
// past which they go to a spool file instead of memory: a transaction's
// changes are written only at its commit, whose position they carry, so a
// 1 GiB transaction is held until then, on disk.
func (s *stream) spoolAt() int64 { return max(s.c.opts.CommitBytes/4, 1<<20) }

// reuse keeps the event lists of a committed transaction for the next one
// (cleared, so the events they held can be collected).
func (s *stream) reuse(tx *txState) {
	if cap(tx.raw) > 0 && cap(tx.raw) <= 1024 {
		clear(tx.raw)
		s.rawBuf = tx.raw[:0]
	}
	if cap(tx.rows) > 0 && cap(tx.rows) <= 1024 {
		clear(tx.rows)
		s.rowsBuf = tx.rows[:0]
	}
}

// buffer keeps an event of the open transaction (rows nil: a table map).
func (s *stream) buffer(ev *replication.BinlogEvent, rows *replication.RowsEvent) error {
	tx := &s.tx
	tx.bytes += int64(len(ev.RawData))
	if tx.spool != nil {
		return tx.spool.append(ev.RawData)
	}
	if tx.raw == nil {
		tx.raw, s.rawBuf = s.rawBuf, nil
	}
	if tx.rows == nil && rows != nil {
		tx.rows, s.rowsBuf = s.rowsBuf, nil
	}
	tx.raw = append(tx.raw, ev.RawData)
	if rows != nil {
		tx.rows = append(tx.rows, rows)
	}
	if tx.bytes < s.spoolAt() {
		return nil
	}
	if s.fde == nil {
		return fmt.Errorf("a transaction outgrew memory before the binlog's format description event was read")
	}
	sp, err := newTxSpool(s.c.opts.SpoolDir)
	if err != nil {
		return err
	}
	for _, raw := range tx.raw {
		if err := sp.append(raw); err != nil {
			sp.remove()
			return err
		}
	}
	s.c.log.Debug("large transaction spooled to disk", "bytes", tx.bytes, "file", sp.f.Name())
	tx.spool, tx.raw, tx.rows = sp, nil, nil
	return nil
}

// txSpool is a transaction's raw events on disk: each a 4-byte length,
// then the event.
type txSpool struct {
	f *os.File
	w *bufio.Writer
}

func newTxSpool(dir string) (*txSpool, error) { return newSpool(dir, "mysql-tx-*.spool") }

// newSpool creates a spool file named by pattern in dir (the system's
// temporary directory if "").
func newSpool(dir, pattern string) (*txSpool, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create a spool file: %w", err)
	}
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, fmt.Errorf("create a spool file: %w", err)
	}
	return &txSpool{f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

func (sp *txSpool) append(raw []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(raw)))
	if _, err := sp.w.Write(n[:]); err != nil {
		return fmt.Errorf("spool a large transaction to %s: %w", sp.f.Name(), err)
	}
	if _, err := sp.w.Write(raw); err != nil {
		return fmt.Errorf("spool a large transaction to %s: %w", sp.f.Name(), err)
	}
	return nil
}

// replay parses the spooled events again, with a parser of the stream's
// settings, and hands each row event to fn in binlog order.
func (sp *txSpool) replay(s *stream, fn func(*replication.RowsEvent) error) error {
	p := replication.NewBinlogParser()
	p.SetFlavor(string(s.c.flavor))
	p.SetParseTime(false)
	p.SetTimestampStringLocation(time.UTC)
	p.SetUseFloatWithTrailingZero(true)
	if _, err := p.Parse(s.fde); err != nil {
		return fmt.Errorf("parse the binlog's format description again: %w", err)
	}
	return sp.each(func(raw []byte) error {
		ev, err := p.Parse(raw)
		if err != nil {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("the spooled transaction %s cannot be parsed again", sp.f.Name()), err)
		}
		if e, ok := ev.Event.(*replication.RowsEvent); ok {
			return fn(e)
		}
		return nil
	})
}

// each hands every record appended to fn, in order.
func (sp *txSpool) each(fn func(raw []byte) error) error {
	if err := sp.w.Flush(); err != nil {
		return fmt.Errorf("spool to %s: %w", sp.f.Name(), err)
	}
	if _, err := sp.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read the spool %s: %w", sp.f.Name(), err)
	}
	r := bufio.NewReaderSize(sp.f, 1<<20)
	var n [4]byte
	for {
		if _, err := io.ReadFull(r, n[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the spool %s: %w", sp.f.Name(), err)
		}
		raw := make([]byte, binary.LittleEndian.Uint32(n[:]))
		if _, err := io.ReadFull(r, raw); err != nil {
			return fmt.Errorf("read the spool %s: %w", sp.f.Name(), err)
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
}

func (sp *txSpool) remove() {
	sp.f.Close()
	os.Remove(sp.f.Name())
}

// withDefaults gives the columns nt has and old lacks (added by ALTER TABLE)
// their constant DEFAULT as the missing value: the rows that existed then
// hold it without a row event for them, and bronze and silver give it to
// the rows written before the column (bronze/defaults.go). A default that
// is an expression (CURRENT_TIMESTAMP, a function) is not known per row:
// those rows keep NULL.
func (c *Capture) withDefaults(old *change.Schema, nt *table) {
	had := map[string]bool{}
	hadID := map[int]bool{}
	for _, f := range old.Fields {
		had[f.Name] = true
		hadID[f.ID] = f.ID != 0
	}
	for i, col := range nt.cols {
		// (A renamed column, which keeps its id, is no new column.)
		if had[col.Name] || hadID[nt.schema.Fields[i].ID] || col.Default == nil {
			continue
		}
		text, ok := constantDefault(c.flavor, col)
		if !ok {
			continue
		}
		v, err := nt.maps[i].DecodeText([]byte(text))
		if err != nil || v == nil {
			continue
		}
		nt.schema.Fields[i].Missing, nt.schema.Fields[i].MissingText = v, text
	}
}

// constantDefault is the text of a column's DEFAULT when it is a constant.
// MariaDB's information_schema writes COLUMN_DEFAULT as SQL ('abc', 12,
// NULL, current_timestamp()); MySQL's as the value, with
// DEFAULT_GENERATED in EXTRA for an expression.
func constantDefault(f Flavor, col Column) (string, bool) {
	d := *col.Default
	if f == MySQL {
		if strings.Contains(strings.ToUpper(col.Extra), "DEFAULT_GENERATED") {
			return "", false
		}
		return d, true
	}
	switch {
	case strings.EqualFold(d, "NULL"):
		return "", false
	case len(d) >= 2 && d[0] == '\'' && d[len(d)-1] == '\'':
		return strings.ReplaceAll(d[1:len(d)-1], "''", "'"), true
	}
	if _, err := strconv.ParseFloat(d, 64); err == nil {
		return d, true
	}
	return "", false
}
