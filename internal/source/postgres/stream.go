package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// statusInterval is how often a standby status update is sent even when
// nothing new was acknowledged (keeps wal_sender_timeout at bay).
const statusInterval = 10 * time.Second

// txState is the transaction being decoded.
type txState struct {
	xid        uint32
	commitLSN  uint64
	commitTime time.Time
	seq        int64
}

// stream decodes the replication stream and feeds the Sink. Everything in
// it is owned by the run goroutine.
type stream struct {
	c      *Capture
	repl   *pgconn.PgConn
	tables map[change.TableID]*table
	rels   map[uint32]*Relation
	// unknownRels are Relation messages of tables not captured (yet): set
	// up when a change refers to one.
	unknownRels map[uint32]*pglogrepl.RelationMessage
	windows     *windows
	snap        *snapshotter
	offered     chan []change.TableID
	// Rewrite detection (rewrite.go): readings from the publication poll,
	// and those waiting for the stream to pass their position.
	filenodes   chan []filenodeObs
	pendingFn   []filenodeObs
	rewritesDue bool
	// Key changes (rekey.go) waiting for the stream to pass their position,
	// and the keys found unfit to key their table (not tried again).
	pendingKey   []keyObs
	declinedKeys map[change.TableID][]string

	inStream  bool
	streamXid uint32
	spools    map[uint32]*spool
	tx        txState

	// engine flushes the Sink and confirms a checkpoint to PostgreSQL
	// (sendStatus) once it is durable.
	engine       *pipeline.Engine
	completedEnd uint64 // end LSN of the last transaction fully decoded
	acked        uint64 // last LSN confirmed to PostgreSQL
	walEnd       uint64
	lastStatus   time.Time
	// readDeadline is the read deadline set on the replication connection.
	readDeadline time.Time
}

// newStream returns the stream of a session that starts at end LSN start;
// from is the checkpoint the lake holds (zero if none).
func newStream(c *Capture, repl *pgconn.PgConn, tables map[change.TableID]*table, start uint64, from pipeline.Checkpoint) *stream {
	s := &stream{
		c: c, repl: repl, tables: tables, rels: map[uint32]*Relation{}, unknownRels: map[uint32]*pglogrepl.RelationMessage{},
		windows: newWindows(), offered: make(chan []change.TableID, 1), filenodes: make(chan []filenodeObs, 1),
		spools:       map[uint32]*spool{},
		declinedKeys: map[change.TableID][]string{},
		completedEnd: start, acked: start,
	}
	s.engine = pipeline.NewEngine(c.w, NewCheckpoint(start, from.Pos, from.Watermark, 0, c.opts.Slot), pipeline.EngineOptions{
		CommitInterval: c.opts.CommitInterval,
		CommitBytes:    c.opts.CommitBytes,
		Ack:            func(ctx context.Context, _ pipeline.Checkpoint) error { return s.sendStatus(ctx) },
		OnDurable:      s.durable,
		Stamp:          func(cp *pipeline.Checkpoint) { stamp(cp, s.completedEnd, s.walEnd, c.opts.Slot) },
	})
	return s
}

// offerTables hands the current publication table list to the stream
// goroutine (non-blocking; a newer list replaces an unread one).
func (s *stream) offerTables(ids []change.TableID) {
	select {
	case s.offered <- ids:
	default:
		select {
		case <-s.offered:
		default:
		}
		select {
		case s.offered <- ids:
		default:
		}
	}
}

func (s *stream) run(ctx context.Context) error {
	stopWake := context.AfterFunc(ctx, func() { s.repl.Conn().SetReadDeadline(time.Now()) })
	defer stopWake()
	defer func() {
		for xid, sp := range s.spools {
			sp.remove()
			delete(s.spools, xid)
		}
	}()
	for {
		if ctx.Err() != nil {
			// Clean stop: flush what we have and confirm it.
			fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := s.engine.Sync(fctx)
			cancel()
			if err != nil {
				return fmt.Errorf("final flush on shutdown: %w", err)
			}
			s.c.log.Info("capture stopped cleanly", "confirmed_lsn", FormatLSN(s.acked))
			return ctx.Err()
		}
		select {
		case ids := <-s.offered:
			// A refused table is described again at its next Relation
			// message (after DDL), not at every poll.
			ids = slices.DeleteFunc(ids, func(id change.TableID) bool { _, refused := s.c.refused[id]; return refused })
			if err := s.addTables(ctx, ids); err != nil {
				return err
			}
		default:
		}
		select {
		case obs := <-s.filenodes:
			s.addObservations(obs)
		default:
		}
		// Acknowledge a background flush that has finished, start a due
		// one, wait at commit_bytes.
		if err := s.engine.Poll(ctx); err != nil {
			return err
		}
		now := time.Now()
		if now.Sub(s.lastStatus) >= statusInterval {
			if err := s.sendStatus(ctx); err != nil {
				return err
			}
		}
		// While a flush is in flight the engine asks to look again soon
		// (its checkpoint is acknowledged, and the next flush started, as
		// soon as it is durable, even when no message arrives), with a
		// time that moves at most once per 10ms: setting the deadline is
		// not free, and this runs once per message.
		deadline := s.engine.Wake()
		if d := s.lastStatus.Add(statusInterval); !s.engine.Flushing() && d.Before(deadline) {
			deadline = d
		}
		if min := now.Add(5 * time.Millisecond); deadline.Before(min) {
			deadline = min
		}
		// One read deadline on the connection, changed only when the
		// deadline moves, instead of a deadline context per message:
		// context.WithDeadline and pgconn's per-call context watch cost a
		// fifth of this goroutine's CPU at high change rates. Cancellation
		// still interrupts a blocked read (AfterFunc above).
		if !deadline.Equal(s.readDeadline) {
			if err := s.repl.Conn().SetReadDeadline(deadline); err != nil {
				return classify(fmt.Errorf("receive from replication slot %q: %w", s.c.opts.Slot, err))
			}
			s.readDeadline = deadline
			if ctx.Err() != nil {
				continue // cancelled before the deadline was set
			}
		}
		msg, err := s.repl.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			return s.c.replicationError(fmt.Errorf("receive from replication slot %q: %w", s.c.opts.Slot, err))
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.handleCopyData(ctx, m.Data); err != nil {
				return err
			}
			if s.rewritesDue {
				// Just after a commit: no transaction is half-buffered.
				s.rewritesDue = false
				if err := s.checkKeys(ctx); err != nil {
					return err
				}
				if err := s.checkRewrites(ctx); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			return s.c.replicationError(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return fault.MarkTransient(fmt.Errorf("replication stream of slot %q ended by the server", s.c.opts.Slot))
		}
	}
}

func (s *stream) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		if uint64(ka.ServerWALEnd) > s.walEnd {
			s.walEnd = uint64(ka.ServerWALEnd)
		}
		if ka.ReplyRequested {
			return s.sendStatus(ctx)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		if uint64(xld.ServerWALEnd) > s.walEnd {
			s.walEnd = uint64(xld.ServerWALEnd)
		}
		return s.handleWAL(ctx, xld.WALData)
	}
	return nil
}

// handleWAL processes one pgoutput message as received.
func (s *stream) handleWAL(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeStreamStart:
		m, err := pglogrepl.ParseV2(data, false)
		if err != nil {
			return fmt.Errorf("parse stream start: %w", err)
		}
		st := m.(*pglogrepl.StreamStartMessageV2)
		s.inStream, s.streamXid = true, st.Xid
		if _, ok := s.spools[st.Xid]; !ok {
			sp, err := newSpool(s.c.opts.SpoolDir, st.Xid)
			if err != nil {
				return err
			}
			s.spools[st.Xid] = sp
		}
		return nil
	case pglogrepl.MessageTypeStreamStop:
		s.inStream = false
		return nil
	case pglogrepl.MessageTypeStreamAbort:
		m, err := pglogrepl.ParseV2(data, false)
		if err != nil {
			return fmt.Errorf("parse stream abort: %w", err)
		}
		ab := m.(*pglogrepl.StreamAbortMessageV2)
		if sp, ok := s.spools[ab.Xid]; ok {
			if ab.SubXid == ab.Xid {
				sp.remove()
				delete(s.spools, ab.Xid)
			} else {
				sp.aborted[ab.SubXid] = true
			}
		}
		return nil
	case pglogrepl.MessageTypeStreamCommit:
		m, err := pglogrepl.ParseV2(data, false)
		if err != nil {
			return fmt.Errorf("parse stream commit: %w", err)
		}
		sc := m.(*pglogrepl.StreamCommitMessageV2)
		sp, ok := s.spools[sc.Xid]
		if !ok {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("stream commit for transaction %d without its streamed changes (commit LSN %s)", sc.Xid, sc.CommitLSN), nil)
		}
		s.tx = txState{xid: sc.Xid, commitLSN: uint64(sc.CommitLSN), commitTime: sc.CommitTime}
		err = sp.replay(func(msg []byte) error {
			if err := s.beforeLarge(ctx, int64(len(msg))); err != nil {
				return err
			}
			return s.handleMessage(ctx, msg, true)
		})
		sp.remove()
		delete(s.spools, sc.Xid)
		if err != nil {
			return err
		}
		s.commit(uint64(sc.CommitLSN), uint64(sc.TransactionEndLSN), sc.CommitTime)
		return nil
	}
	if s.inStream {
		sp := s.spools[s.streamXid]
		sub := s.streamXid
		if len(data) >= 5 {
			sub = uint32(data[1])<<24 | uint32(data[2])<<16 | uint32(data[3])<<8 | uint32(data[4])
		}
		return sp.append(sub, data)
	}
	if err := s.beforeLarge(ctx, int64(len(data))); err != nil {
		return err
	}
	return s.handleMessage(ctx, data, false)
}

// beforeLarge waits for the flush in flight before a row of at least
// commit_bytes/4 (a message of that size, replayed from a spool or not, or
// a snapshot chunk whose rows average that size) is handed to the writer:
// its decoded values and the Arrow buffer they are appended to would
// otherwise be held at the same time as the flush's own copies of the
// previous large row (its record, Parquet's page and compression buffers),
// which is what took a stream of 16 MiB values past memory_budget.
// Waiting costs the overlap of decoding with committing, which for rows
// this large saved little: the next such row fills a commit on its own.
func (s *stream) beforeLarge(ctx context.Context, rowBytes int64) error {
	if !s.engine.Flushing() || rowBytes < s.c.opts.CommitBytes/4 {
		return nil
	}
	return s.engine.AwaitFlush(ctx)
}

// handleMessage decodes one transaction-level message (live or replayed from
// a spool) in the context of s.tx.
func (s *stream) handleMessage(ctx context.Context, data []byte, inStream bool) error {
	m, err := pglogrepl.ParseV2(data, inStream)
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("cannot parse pgoutput message type %q in transaction %d", data[0], s.tx.xid), err)
	}
	switch m := m.(type) {
	case *pglogrepl.BeginMessage:
		s.tx = txState{xid: m.Xid, commitLSN: uint64(m.FinalLSN), commitTime: m.CommitTime}
	case *pglogrepl.CommitMessage:
		s.commit(uint64(m.CommitLSN), uint64(m.TransactionEndLSN), m.CommitTime)
	case *pglogrepl.RelationMessageV2:
		return s.relation(ctx, &m.RelationMessage)
	case *pglogrepl.InsertMessageV2:
		return s.insert(ctx, m.RelationID, m.Tuple)
	case *pglogrepl.UpdateMessageV2:
		return s.update(ctx, &m.UpdateMessage)
	case *pglogrepl.DeleteMessageV2:
		return s.delete(ctx, &m.DeleteMessage)
	case *pglogrepl.TruncateMessageV2:
		return s.truncate(ctx, m.RelationIDs)
	case *pglogrepl.LogicalDecodingMessageV2:
		return s.message(ctx, &m.LogicalDecodingMessage)
	case *pglogrepl.TypeMessageV2, *pglogrepl.OriginMessage:
	}
	return nil
}

// commit records that a transaction has been fully decoded.
func (s *stream) commit(commitLSN, endLSN uint64, t time.Time) {
	s.windows.committed(s.tx.xid, commitLSN)
	s.completedEnd = endLSN
	s.engine.Completed(pipeline.Checkpoint{Pos: commitLSN, Watermark: t})
	for _, o := range s.pendingFn {
		if o.lsn <= endLSN {
			s.rewritesDue = true
			break
		}
	}
	for _, o := range s.pendingKey {
		if o.lsn <= endLSN {
			s.rewritesDue = true
			break
		}
	}
}

func (s *stream) nextPos() change.Position {
	s.tx.seq++
	return change.Position{LSN: s.tx.commitLSN, Seq: s.tx.seq}
}

// relation applies a Relation message: the column layout of the following
// changes of that table.
func (s *stream) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	id := change.TableID{Schema: m.Namespace, Name: m.RelationName}
	if _, ok := s.tables[id]; !ok {
		// Set up only once a change refers to it: with
		// publish_via_partition_root, pgoutput sends the Relation message of
		// the leaf partition a change came from after the root's, while the
		// change itself refers to the root (partition.go).
		delete(s.rels, m.RelationID)
		s.unknownRels[m.RelationID] = m
		return nil
	}
	return s.applyRelation(ctx, m)
}

// applyRelation is relation for a table a change refers to.
func (s *stream) applyRelation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	id := change.TableID{Schema: m.Namespace, Name: m.RelationName}
	t, ok := s.tables[id]
	if !ok {
		// A refused table is described again: a Relation message follows
		// DDL (ALTER TABLE ... ADD PRIMARY KEY, REPLICA IDENTITY FULL), so
		// the fix takes effect here, with a backfill.
		if err := s.addTables(ctx, []change.TableID{id}); err != nil {
			return err
		}
		if _, refused := s.c.refused[id]; refused {
			s.rels[m.RelationID] = nil // its changes are left out (keyless.go)
			return nil
		}
		if t, ok = s.tables[id]; !ok {
			return fmt.Errorf("table %s: appeared in the stream but could not be set up", id)
		}
	}
	rel := &Relation{ID: m.RelationID, Table: id}
	for _, col := range m.Columns {
		if IsReservedColumn(col.Name) {
			return columnCollision(id, col.Name, false)
		}
		rel.Columns = append(rel.Columns, Column{Name: col.Name, TypeOID: col.DataType, TypeMod: col.TypeModifier})
	}
	if err := mapColumns(id, rel.Columns, s.c.types.Lookup, s.c.opts.Types); err != nil {
		return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: a column's type cannot be mapped", id), err)
	}
	rekeyed := false
	if len(t.info.Load().Relation.KeyNames) == 0 {
		// A keyless table is described again at each Relation message
		// (they follow DDL): a key added makes it a keyed table.
		var err error
		if rekeyed, err = s.keyGained(ctx, t); err != nil {
			return err
		}
	}
	if s.tx.commitLSN >= t.replacedBefore {
		// (Changes from before a replace are skipped, whatever their key.)
		if flagged, changed := keyChanged(m, t.info.Load().Relation.KeyNames); changed {
			if len(s.c.opts.MergeKeys[id]) > 0 {
				return keyChangedError(id, t.info.Load().Relation.KeyNames, flagged)
			}
			// Followed here, before a change by the new key (rekey.go).
			if err := s.rekeyAtRelation(ctx, t, flagged); err != nil {
				return err
			}
		}
	}
	rel.setKeys(t.info.Load().Relation.KeyNames)
	for i, k := range rel.KeyIdx {
		if k < 0 {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: key column %q is no longer in the published columns", id, rel.KeyNames[i]), nil)
		}
	}
	schema := schemaOf(rel)
	if s.tx.commitLSN < t.replacedBefore {
		// Before the table was replaced: its changes are skipped, and the
		// lake is not evolved to a schema it may have been replaced for.
		rel.schema, rel.unopened = schema, t
		s.rels[m.RelationID] = rel
		return nil
	}
	if err := s.openRelation(ctx, t, rel, schema); err != nil {
		return err
	}
	if rekeyed {
		return s.takeKey(ctx, t, rel)
	}
	return nil
}

// keyGained describes keyless table t again; if it has a key now (ALTER
// TABLE ... ADD PRIMARY KEY, REPLICA IDENTITY FULL on columns that can key
// it, a merge key declared), t takes it and keyGained returns true. The
// recorded reason of a table still keyless is kept up to date.
func (s *stream) keyGained(ctx context.Context, t *table) (bool, error) {
	meta, err := s.c.d.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer meta.Close(context.Background())
	info, err := s.c.describe(ctx, meta, t.id)
	if isRefusal(err) {
		// Refused now (a declared merge key that cannot key it): it
		// stays as captured, keyless, until the next start.
		s.c.log.Warn("keyless table cannot take the key declared for it", "table", t.id.String(), "reason", err.Error())
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if s.c.noteKeyless(t.id, info) {
		if err := s.c.recordRefused(ctx); err != nil {
			return false, err
		}
	}
	if info.Keyless != nil {
		return false, nil
	}
	t.info.Store(info)
	s.c.log.Info("keyless table has a key now: bronze records it, its silver table is built", "table", t.id.String(), "key", info.Relation.KeyNames)
	return true, nil
}

// takeKey records the key keyless table t got (keyGained) in bronze (its
// tidemark.key, from none to the key) and, if its snapshot is not complete, reads it again by that
// key (a snapshot read in row positions cannot resume by key). Silver is
// then built from the whole bronze table: under REPLICA IDENTITY DEFAULT
// or NOTHING a keyless table took inserts and truncates only, which
// replay by any key (docs/silver.md, "Tables without a primary key").
func (s *stream) takeKey(ctx context.Context, t *table, rel *Relation) error {
	sch := *t.schema
	sch.Key = slices.Clone(t.info.Load().Relation.KeyNames)
	if _, err := s.c.w.OpenTable(ctx, t.id, &sch); err != nil {
		return err
	}
	t.schema, rel.schema = &sch, &sch
	if t.snapshot.Status == snapDone || t.snapshot.Status == snapSkipped {
		return nil
	}
	return s.reread(ctx, t, rewriteRequestID(time.Now()),
		"the table got a key while its snapshot, read in row positions, ran: it is read again by its key", nil)
}

// openRelation brings the lake to the relation's schema and makes it the
// one the relation's changes are written with.
func (s *stream) openRelation(ctx context.Context, t *table, rel *Relation, schema *change.Schema) error {
	id := t.id
	rel.unopened = nil
	if !sameSchema(schema, t.schema) {
		if err := s.c.columnIDs(ctx, id, schema, t.schema); err != nil {
			return err
		}
		if err := s.c.noteMissing(ctx, id, schema, t.schema, rel); err != nil {
			return err
		}
		if _, err := s.c.w.OpenTable(ctx, id, schema); err != nil {
			return err
		}
		t.schema = schema
		s.c.log.Info("schema change", "table", id.String(), "columns", len(schema.Fields))
	}
	rel.schema = t.schema
	s.rels[rel.ID] = rel
	return nil
}

// skip reports whether a change of rel in the current transaction is not
// written: the table was replaced after it (table.replacedBefore). The
// first change of rel that is written opens its relation.
func (s *stream) skip(ctx context.Context, rel *Relation) (bool, error) {
	t := rel.unopened
	if t == nil {
		return false, nil
	}
	if s.tx.commitLSN < t.replacedBefore {
		return true, nil
	}
	return false, s.openRelation(ctx, t, rel, rel.schema)
}

// keyChanged reports the replica identity columns of a Relation message
// (the columns pgoutput flags as part of the key) when they are not the
// key the table is keyed by: a primary key added or changed while
// tidemark runs, followed by a re-key (rekey.go). A message that flags
// every column (REPLICA IDENTITY FULL), or none (the key dropped), says
// nothing about the key, nor does any message of a table captured with no
// key (keyGained). The flagged columns come in column order.
func keyChanged(m *pglogrepl.RelationMessage, key []string) ([]string, bool) {
	if len(key) == 0 {
		return nil, false
	}
	var flagged []string
	for _, col := range m.Columns {
		if col.Flags&1 != 0 {
			flagged = append(flagged, col.Name)
		}
	}
	if len(flagged) == len(m.Columns) || len(flagged) == 0 {
		return nil, false
	}
	a, b := slices.Clone(flagged), slices.Clone(key)
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return nil, false
	}
	return flagged, true
}

// keyChangedError stops the stream at a key change of a table whose key
// the config declares (merge_keys): the declared key is not followed.
func keyChangedError(id change.TableID, key, flagged []string) error {
	return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
		"table %s: its key changed from %v to %v while tidemark was capturing it; changes by the new key cannot be merged with the old ones. "+
			"Restore the old key, or rebuild the table on its new key with `tidemark resnapshot --replace %s` (docs/operations.md, Schema changes)",
		id, key, flagged, id), nil)
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

func (s *stream) rel(ctx context.Context, id uint32) (*Relation, error) {
	r, ok := s.rels[id]
	if m, unknown := s.unknownRels[id]; !ok && unknown {
		// A table new to the stream (added to the publication).
		delete(s.unknownRels, id)
		if err := s.applyRelation(ctx, m); err != nil {
			return nil, err
		}
		r, ok = s.rels[id]
	}
	if ok && r == nil {
		return nil, nil // a refused table's: the caller leaves the change out
	}
	if !ok {
		return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("change for relation id %d before its Relation message (transaction %d, commit %s)", id, s.tx.xid, FormatLSN(s.tx.commitLSN)), nil)
	}
	return r, nil
}

// decoded is one tuple decoded against a relation.
type decoded struct {
	values    []any
	raw       [][]byte
	unchanged []string
	err       error
}

// decodeTuple decodes tup; a value longer than maxValue (0: no maximum)
// makes it a dead letter (tooLarge).
func decodeTuple(rel *Relation, tup *pglogrepl.TupleData, maxValue int64) decoded {
	var d decoded
	if tup == nil {
		return d
	}
	n := len(rel.Columns)
	d.values = make([]any, n)
	d.raw = make([][]byte, n)
	for i, col := range tup.Columns {
		if i >= n {
			d.err = fmt.Errorf("tuple has %d columns, relation has %d", len(tup.Columns), n)
			return d
		}
		switch col.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeToast:
			d.unchanged = append(d.unchanged, rel.Columns[i].Name)
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			d.raw[i] = col.Data
			if d.err != nil {
				continue
			}
			if err := tooLarge(rel, i, col.Data, maxValue); err != nil {
				d.err = err
				continue
			}
			v, err := rel.Columns[i].Map.Decode(col.Data)
			if err != nil {
				d.err = err
				continue
			}
			d.values[i] = v
		}
	}
	return d
}

// fillUnchanged takes the values of TOAST columns the new tuple left
// unchanged from the full old tuple (REPLICA IDENTITY FULL), where it has
// them, so the change needs no earlier state to be complete.
func fillUnchanged(rel *Relation, nd, od *decoded) {
	if len(nd.unchanged) == 0 || od.err != nil {
		return
	}
	var still []string
	for _, name := range nd.unchanged {
		i := rel.Index(name)
		if i < 0 || i >= len(od.raw) || od.raw[i] == nil {
			still = append(still, name)
			continue
		}
		nd.values[i], nd.raw[i] = od.values[i], od.raw[i]
	}
	nd.unchanged = still
}

// rawJSON renders a raw tuple for the dead-letter table, without the
// values longer than maxValue (0: no maximum): the error of such a row
// names the column and its length (tooLarge), and the row's key stays.
func rawJSON(rel *Relation, raw [][]byte, maxValue int64) string {
	m := make(map[string]any, len(raw))
	for i, r := range raw {
		if i >= len(rel.Columns) {
			break
		}
		if maxValue > 0 && int64(len(r)) > maxValue {
			continue
		}
		if r == nil {
			m[rel.Columns[i].Name] = nil
		} else {
			m[rel.Columns[i].Name] = string(r)
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func (s *stream) emit(ctx context.Context, rel *Relation, op change.Op, d decoded) error {
	return s.emitWithBefore(ctx, rel, op, d, nil)
}

func (s *stream) emitWithBefore(ctx context.Context, rel *Relation, op change.Op, d decoded, before []any) error {
	if skip, err := s.skip(ctx, rel); skip || err != nil {
		return err
	}
	pos := s.nextPos()
	var err error
	if d.err != nil {
		err = s.c.w.DeadLetter(ctx, change.DeadLetter{Table: rel.Table, Op: op, Pos: pos, TxID: int64(s.tx.xid),
			CommitTime: s.tx.commitTime, Raw: rawJSON(rel, d.raw, s.c.opts.MaxValueBytes), Error: d.err.Error()})
	} else {
		if s.c.opts.Snapshot.DropChanged {
			s.windows.changedKeys(rel.Table, rel.schema, d.values, before)
		}
		err = s.c.w.Write(ctx, &change.Change{Table: rel.Table, Op: op, Values: d.values, Unchanged: d.unchanged,
			Before: before, Schema: rel.schema, Pos: pos, TxID: int64(s.tx.xid), CommitTime: s.tx.commitTime})
	}
	if err != nil {
		return err
	}
	return s.backPressure(ctx)
}

// backPressure flushes when the buffer reaches commit_bytes, even in the
// middle of a transaction (a large one replayed from its spool, say): memory
// stays bounded and the per-table cursor makes a partly committed
// transaction safe to replay. The acknowledged position does not move past
// the last complete transaction.
func (s *stream) backPressure(ctx context.Context) error {
	if !s.engine.Full() {
		return nil
	}
	if err := s.engine.Flush(ctx); err != nil {
		return err
	}
	// A long replay reads nothing from the connection: answer the
	// walsender (with the last complete transaction, as ever) so that
	// wal_sender_timeout does not end the session mid-replay.
	if time.Since(s.lastStatus) >= statusInterval {
		return s.sendStatus(ctx)
	}
	return nil
}

func (s *stream) insert(ctx context.Context, relID uint32, tup *pglogrepl.TupleData) error {
	rel, err := s.rel(ctx, relID)
	if err != nil || rel == nil {
		return err
	}
	return s.emit(ctx, rel, change.OpInsert, decodeTuple(rel, tup, s.c.opts.MaxValueBytes))
}

func (s *stream) update(ctx context.Context, m *pglogrepl.UpdateMessage) error {
	rel, err := s.rel(ctx, m.RelationID)
	if err != nil || rel == nil {
		return err
	}
	nd := decodeTuple(rel, m.NewTuple, s.c.opts.MaxValueBytes)
	var before []any
	if m.OldTuple != nil {
		// The old row only identifies the row changed: max_value_bytes
		// applies to new rows (a delete is never a dead letter for size).
		od := decodeTuple(rel, m.OldTuple, 0)
		before = od.values
		if m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld {
			fillUnchanged(rel, &nd, &od)
		}
		oldKey, ok1 := rel.keyString(od.raw)
		newKey, ok2 := rel.keyString(nd.raw)
		if ok1 && ok2 && oldKey != newKey {
			// The key changed: for replay by key this is a delete of the old
			// key and an insert of the new one, at consecutive positions. Any
			// TOAST column the update left unchanged stays listed in the
			// insert's cdc_unchanged: its value is that of the row the
			// delete removed (docs/bronze.md, "Key changes").
			od.unchanged = nil
			if err := s.emitWithBefore(ctx, rel, change.OpDelete, od, od.values); err != nil {
				return err
			}
			return s.emit(ctx, rel, change.OpInsert, nd)
		}
	}
	return s.emitWithBefore(ctx, rel, change.OpUpdate, nd, before)
}

func (s *stream) delete(ctx context.Context, m *pglogrepl.DeleteMessage) error {
	rel, err := s.rel(ctx, m.RelationID)
	if err != nil || rel == nil {
		return err
	}
	d := decodeTuple(rel, m.OldTuple, 0)
	d.unchanged = nil
	return s.emitWithBefore(ctx, rel, change.OpDelete, d, d.values)
}

func (s *stream) truncate(ctx context.Context, ids []uint32) error {
	for _, id := range ids {
		rel, err := s.rel(ctx, id)
		if err != nil {
			return err
		}
		if rel == nil {
			continue
		}
		if skip, err := s.skip(ctx, rel); err != nil {
			return err
		} else if skip {
			continue
		}
		s.windows.truncate(rel.Table)
		if err := s.c.w.Write(ctx, &change.Change{Table: rel.Table, Op: change.OpTruncate, Values: make([]any, len(rel.Columns)),
			Schema: rel.schema, Pos: s.nextPos(), TxID: int64(s.tx.xid), CommitTime: s.tx.commitTime}); err != nil {
			return err
		}
		if t := s.tables[rel.Table]; t != nil {
			if err := s.noteTruncate(ctx, t, s.tx.xid); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *stream) message(ctx context.Context, m *pglogrepl.LogicalDecodingMessage) error {
	if strings.HasPrefix(m.Prefix, "tidemark.") {
		if !strings.HasPrefix(m.Prefix, s.c.prefix) {
			return nil // another pipeline's heartbeat or watermark
		}
		if m.Prefix == s.c.prefix+"wm" {
			return s.watermark(ctx, string(m.Content))
		}
		if m.Prefix == s.c.prefix+"parts" {
			return s.partitions(ctx, m.Content)
		}
		return nil // heartbeat: its commit moves the watermark
	}
	msg := change.Message{Prefix: m.Prefix, Content: append([]byte(nil), m.Content...), Transactional: m.Transactional}
	if m.Transactional {
		msg.Pos, msg.TxID, msg.CommitTime = s.nextPos(), int64(s.tx.xid), s.tx.commitTime
	} else {
		// Outside any transaction: its own LSN, no transaction id, no
		// commit time (the writer records the capture time).
		msg.Pos = change.Position{LSN: uint64(m.LSN)}
	}
	return s.c.w.Message(ctx, msg)
}

// watermark handles "low:<id>" and "high:<id>".
func (s *stream) watermark(ctx context.Context, content string) error {
	kind, id, ok := strings.Cut(content, ":")
	if !ok {
		return nil
	}
	s.c.log.Debug("snapshot watermark", "kind", kind, "window", id, "commit_lsn", FormatLSN(s.tx.commitLSN))
	switch kind {
	case "low":
		s.windows.open(id, s.tx.commitLSN, int64(s.tx.xid), s.tx.commitTime)
	case "high":
		w := s.windows.close(id)
		if w == nil {
			return nil // a window of an earlier session, replayed
		}
		return s.emitChunk(ctx, w)
	}
	return nil
}

// emitChunk writes a reconciled snapshot chunk. Its rows are placed at the
// LOW watermark's position: every stream change inside the window sorts
// after them and applies on top. A change that committed before the SELECT
// is then applied twice, which is harmless (inserts, updates and deletes set
// a key's state), while a change after the SELECT correctly wins, and an
// update that left TOAST columns unchanged finds their value in the chunk
// row. (Dropping the chunk rows of keys changed in the window, as DBLog
// does, would lose those TOAST values.) A truncate inside the window makes
// the chunk unplaceable: it is read again.
func (s *stream) emitChunk(ctx context.Context, w *window) error {
	t := s.tables[w.table]
	if t == nil {
		w.finish(fmt.Errorf("table %s: snapshot chunk for a table no longer captured", w.table))
		return nil
	}
	if w.gen != t.gen.Load() {
		w.finish(errSnapshotRestarted) // the table was rewritten: read again from the first key
		return nil
	}
	if w.truncated {
		w.finish(errTruncatedInWindow)
		return nil
	}
	cs, chunk, dls, n := w.output()
	if s.c.opts.Snapshot.DropChanged && chunk == nil {
		cs, n = s.dropChanged(w, cs)
	}
	if chunk != nil {
		defer chunk.Release()
	}
	if w.schema != nil && n > 0 {
		// Make sure the lake has every column the chunk read (a column added
		// since the last Relation message).
		merged := mergeSchema(t.schema, w.schema)
		if w.rel != nil {
			if err := s.c.noteMissing(ctx, w.table, merged, t.schema, w.rel); err != nil {
				w.finish(err)
				return err
			}
		}
		if _, err := s.c.w.OpenTable(ctx, w.table, merged); err != nil {
			w.finish(err)
			return err
		}
	}
	st := t.snapshot
	st.Status = snapRunning
	st.LastKey = w.lastKey
	st.Rows += int64(n)
	if w.last {
		st.Status = snapDone
		st.FinishedAt = time.Now().UTC().Format(time.RFC3339)
	}
	if st.StartedAt == "" {
		st.StartedAt = time.Now().UTC().Format(time.RFC3339)
	}
	props := map[string]string{pipeline.PropSnapshot: st.Encode()}
	if n > 0 {
		if err := s.beforeLarge(ctx, w.bytes/int64(n)); err != nil {
			w.finish(err)
			return err
		}
	}
	var err error
	if chunk != nil {
		err = s.c.w.(pipeline.ChunkSink).WriteChunk(ctx, chunk, props)
	} else {
		err = s.c.w.WriteBatch(ctx, w.table, cs, props)
	}
	if err != nil {
		w.finish(err)
		return err
	}
	for _, dl := range dls {
		if err := s.c.w.DeadLetter(ctx, dl); err != nil {
			w.finish(err)
			return err
		}
	}
	t.snapshot = st
	w.finish(nil)
	if w.last {
		// The table's snapshot is complete: commit it now, not at the next
		// commit_interval.
		s.engine.FlushSoon()
	}
	return s.backPressure(ctx)
}

// dropChanged drops the chunk rows of keys the stream changed inside w
// and places the others at the high watermark's position, the stream's
// current transaction (SnapshotOptions.DropChanged).
func (s *stream) dropChanged(w *window, cs []*change.Change) ([]*change.Change, int) {
	s.windows.mu.Lock()
	changed := w.changed
	s.windows.mu.Unlock()
	out := cs[:0]
	var schema *change.Schema
	var idx []int
	for _, c := range cs {
		if c.Schema != schema {
			schema, idx = c.Schema, keyIndex(c.Schema)
		}
		if k, ok := keyString(idx, c.Values); ok && changed[k] {
			continue
		}
		c.Pos = change.Position{LSN: s.tx.commitLSN, Seq: int64(len(out) + 1)}
		c.TxID, c.CommitTime = int64(s.tx.xid), s.tx.commitTime
		out = append(out, c)
	}
	if d := len(cs) - len(out); d > 0 {
		s.c.log.Debug("snapshot chunk: rows changed by the stream inside the window dropped", "table", w.table.String(), "dropped", d)
	}
	return out, len(out)
}

// mergeSchema returns base extended by the fields of extra it lacks, and
// with the wider type where extra widened a field (a chunk read after an
// ALTER COLUMN TYPE that the stream has not seen a Relation message for).
func mergeSchema(base, extra *change.Schema) *change.Schema {
	out := &change.Schema{Key: base.Key, Fields: append([]change.Field(nil), base.Fields...)}
	have := map[string]int{}
	for i, f := range base.Fields {
		have[f.Name] = i
	}
	byID := map[int]int{}
	for i, f := range base.Fields {
		if f.ID != 0 {
			byID[f.ID] = i
		}
	}
	for _, f := range extra.Fields {
		i, ok := have[f.Name]
		if j, same := byID[f.ID]; !ok && f.ID != 0 && same {
			// Renamed since base (the chunk was read after a RENAME COLUMN
			// the stream has not reached): the column under its new name.
			delete(have, out.Fields[j].Name)
			g := f
			g.Type = out.Fields[j].Type
			if coltype.CanWiden(g.Type, f.Type) {
				g.Type = f.Type
			}
			out.Fields[j] = g
			have[f.Name] = j
			continue
		}
		switch {
		case !ok:
			out.Fields = append(out.Fields, f)
		case coltype.CanWiden(out.Fields[i].Type, f.Type):
			out.Fields[i] = f
		}
	}
	return out
}

// addTables sets up tables that are new to the publication and queues their
// backfill.
func (s *stream) addTables(ctx context.Context, ids []change.TableID) error {
	var fresh []change.TableID
	for _, id := range ids {
		if _, ok := s.tables[id]; !ok {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	meta, err := s.c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer meta.Close(context.Background())
	changed := false
	for _, id := range fresh {
		t, err := s.c.openTable(ctx, meta, id)
		if isRefusal(err) {
			if prev, was := s.c.refused[id]; !was || prev.Error() != err.Error() {
				s.c.refused[id], changed = err, true
			}
			continue
		}
		if err != nil {
			return err
		}
		if _, was := s.c.refused[id]; was {
			delete(s.c.refused, id)
			changed = true
		}
		changed = s.c.noteKeyless(id, t.info.Load()) || changed
		s.tables[id] = t
		s.c.log.Info("table added to the publication", "table", id.String())
		if _, err := s.snap.sched.Admit(ctx, t.id, &t.snapshot, t); err != nil {
			return err
		}
	}
	if changed {
		return s.c.recordRefused(ctx)
	}
	return nil
}

// durable records that cp's checkpoint is in the lake (the engine calls it
// before it acknowledges cp).
func (s *stream) durable(cp pipeline.Checkpoint) {
	if lsn := AckedLSN(cp); lsn > s.acked {
		s.acked = lsn
	}
	if s.c.opts.OnProgress != nil {
		s.c.opts.OnProgress(cp)
	}
}

// sendStatus confirms s.acked to PostgreSQL.
func (s *stream) sendStatus(ctx context.Context) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(s.acked),
		WALFlushPosition: pglogrepl.LSN(s.acked),
		WALApplyPosition: pglogrepl.LSN(s.acked),
	})
	if err != nil {
		return classify(fmt.Errorf("send standby status to slot %q: %w", s.c.opts.Slot, err))
	}
	s.lastStatus = time.Now()
	return nil
}
