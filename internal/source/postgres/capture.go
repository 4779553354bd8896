package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// Options configure a Capture.
type Options struct {
	Slot        string
	Publication string
	Tables      []change.TableID // empty: publication FOR ALL TABLES
	// MergeKeys are the declared merge keys (config merge_keys): the
	// columns a table is keyed by instead of its primary key.
	MergeKeys      map[change.TableID][]string
	SpoolDir       string
	CommitInterval time.Duration
	CommitBytes    int64
	// Types chooses between the lake types of the source types that have
	// more than one (config time_as).
	Types typemap.Options
	// MaxValueBytes: a row with a column value longer than this (its text
	// as PostgreSQL sends it) is a dead letter (tooLarge); 0: no maximum.
	MaxValueBytes     int64
	HeartbeatInterval time.Duration
	PublicationPoll   time.Duration
	Snapshot          SnapshotOptions
	// TemporarySlot makes the session use a temporary slot that PostgreSQL
	// drops when the connection ends (tidemark tail): no checkpoint is read
	// or required, and the pipeline's slot is never touched.
	TemporarySlot bool
	// OnProgress, if set, is called after each durable flush (for tests and metrics).
	OnProgress func(pipeline.Checkpoint)
}

// SnapshotOptions configure the chunked snapshot.
type SnapshotOptions struct {
	Enabled     bool
	Parallelism int
	ChunkRows   int
	ChunkBytes  int64
	// DropChanged reconciles as DBLog does, for a consumer that applies
	// events in the order they come (tail, the cdc package): a chunk row
	// whose key the stream changed inside the chunk's window is dropped
	// (the streamed change already went out), and the others are placed
	// at the HIGH watermark's position, so that for one key the order of
	// delivery is the order of positions. Without it (the lake) every
	// chunk row is kept, placed at the LOW watermark, and the lake's
	// position order does the reconciling (emitChunk). Only for a Sink
	// that is not a pipeline.ChunkSink.
	DropChanged bool
}

// Capture moves changes from one PostgreSQL database into a pipeline.Sink.
type Capture struct {
	d      *Dialer
	types  *TypeCache
	w      pipeline.Sink // bronze.Writer: also a pipeline.BackgroundSink and a pipeline.ChunkSink
	opts   Options
	log    *slog.Logger
	prefix string // logical message prefix of this pipeline

	// Set by ensurePublication for the session.
	pubAll      bool // the publication is FOR ALL TABLES
	pubCreated  bool // this session created it (dropped again if the start fails)
	slotCreated bool // this session created the slot (and has not dropped it)
	started     bool // the slot exists with a checkpoint (or tail's temporary slot): the pipeline has started

	// refused holds the published tables left out on their own (isRefusal),
	// with why; owned by Run's goroutine, then by the stream's.
	refused map[change.TableID]error
	// keyless holds the captured tables that have no key to merge by
	// (TableInfo.Keyless): bronze only, no silver. Owned as refused is.
	keyless map[change.TableID]error
}

// New returns a Capture. It does nothing until Run.
func New(d *Dialer, w pipeline.Sink, opts Options, log *slog.Logger) *Capture {
	return &Capture{d: d, types: NewTypeCache(d), w: w, opts: opts, log: log, prefix: "tidemark." + opts.Slot + "."}
}

// Close releases the type cache connection.
func (c *Capture) Close() { c.types.Close() }

// table is the capture's view of one published table.
type table struct {
	id change.TableID
	// info is replaced whole when the table's key changes (rekey.go), or
	// a keyless table gets one (stream.keyGained); the snapshot worker
	// reads it too.
	info     atomic.Pointer[TableInfo]
	schema   *change.Schema
	snapshot snapState
	// Rewrite detection (rewrite.go): the relfilenode bronze records, the
	// transactions of the table's recent TRUNCATEs, and the generation of
	// its snapshot (bumped when a rewrite restarts it). gen is read by
	// the snapshot worker, the rest is the stream goroutine's.
	filenode  uint32
	truncXids []uint32
	gen       atomic.Int64
	// replacedBefore: the stream's changes of the table committed below
	// this LSN are not written (pipeline.PropReplacedBefore: the table was
	// rebuilt by `tidemark resnapshot --replace`; its re-snapshot holds them).
	replacedBefore uint64
	// leaves are a partitioned table's leaf partitions as last recorded
	// (PropPartitions; "" for other tables). Stream goroutine only.
	leaves string
	// leafNodes are their relfilenodes as last recorded
	// (PropLeafFilenodes; nil when none are).
	leafNodes map[string]uint32
}

// Run runs one capture session: it verifies or creates the publication, the
// slot and the lake tables, then streams until ctx is done or an error
// occurs. On ctx cancellation it flushes and acknowledges before returning
// nil. Errors are classified (fault.Class): transient ones may be retried by
// calling Run again.
func (c *Capture) Run(ctx context.Context) (err error) {
	meta, err := c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer meta.Close(context.Background())
	c.pubCreated, c.started, c.slotCreated = false, false, false
	// Deferred after meta.Close, so it runs first, on the open connection.
	defer func() { err = c.cleanupFailedStart(meta, err) }()
	if err := c.checkServer(ctx, meta); err != nil {
		return err
	}
	if !c.opts.TemporarySlot {
		if err := c.lockPipeline(ctx, meta); err != nil {
			return err
		}
	}

	cp, haveCP, err := c.w.LoadCheckpoint(ctx)
	if err != nil {
		return err
	}
	if haveCP {
		if _, err := ResumeLSN(cp); err != nil {
			return err
		}
	}
	if err := c.ensurePublication(ctx, meta, haveCP); err != nil {
		return err
	}
	// A start that fails for a transient reason right after creating the
	// publication, again and again until its retries run out.
	if err := failpoint.Err("capture-after-publication"); err != nil {
		return fault.MarkTransient(fmt.Errorf("after ensuring publication %q: %w", c.opts.Publication, err))
	}
	if err := checkPartitionRoot(ctx, meta, c.opts.Publication); err != nil {
		return err
	}
	ids, err := publicationTables(ctx, meta, c.opts.Publication)
	if err != nil {
		return err
	}
	if err := c.checkReadable(ctx, meta); err != nil {
		return err
	}
	// Every table is checked before a lake table is created for any: a
	// start refused for one table leaves nothing behind in the lake.
	// A table refused on its own (no key, a name the lake cannot hold) is
	// left out and named in status; the others run.
	infos := map[change.TableID]*TableInfo{}
	var problems []error
	c.refused = map[change.TableID]error{}
	c.keyless = map[change.TableID]error{}
	for _, id := range ids {
		info, err := c.describe(ctx, meta, id)
		if isRefusal(err) {
			c.refused[id] = err
			continue
		}
		if err != nil {
			problems = append(problems, err)
			continue
		}
		infos[id] = info
		c.noteKeyless(id, info)
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	if err := c.recordRefused(ctx); err != nil {
		return err
	}
	tables := map[change.TableID]*table{}
	for _, id := range ids {
		if infos[id] == nil {
			continue
		}
		t, err := c.openDescribed(ctx, meta, id, infos[id])
		if err != nil {
			return err
		}
		tables[id] = t
	}

	// Streamed transactions restart from their beginning in a new session:
	// spool files of an earlier (crashed) session are garbage.
	if !c.opts.TemporarySlot {
		if err := os.RemoveAll(c.opts.SpoolDir); err != nil {
			return fmt.Errorf("clean spool directory %s: %w", c.opts.SpoolDir, err)
		}
	}

	repl, err := c.d.ConnectReplication(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())

	start, err := c.ensureSlot(ctx, meta, repl, cp, haveCP)
	if err != nil {
		return err
	}
	c.log.Info("capture starting", "slot", c.opts.Slot, "publication", c.opts.Publication,
		"tables", len(tables), "from_lsn", FormatLSN(start))

	err = pglogrepl.StartReplication(ctx, repl, c.opts.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: []string{
			"proto_version '2'",
			"publication_names '" + strings.ReplaceAll(c.opts.Publication, "'", "''") + "'",
			"messages 'true'",
			"streaming 'true'",
		},
	})
	if err != nil {
		return c.replicationError(err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	s := newStream(c, repl, tables, start, cp)
	// A rewrite while tidemark was stopped (or after its last commit):
	// bronze records another relfilenode than the table has now.
	if err := c.startFilenodes(ctx, meta, s); err != nil {
		return err
	}
	snap := newSnapshotter(c, s.windows)
	s.snap = snap
	for _, t := range tables {
		if _, err := snap.sched.Admit(ctx, t.id, &t.snapshot, t); err != nil {
			return err
		}
	}
	// A panic in any of them (a bug) becomes this session's error, not a
	// crash whose runtime print could show an unredacted value.
	g.Go(fault.Guard("capture stream", func() error { return s.run(gctx) }))
	g.Go(fault.Guard("snapshot", func() error { return snap.run(gctx) }))
	g.Go(fault.Guard("heartbeat", func() error { return c.heartbeat(gctx) }))
	g.Go(fault.Guard("publication poll", func() error { return c.pollPublication(gctx, s) }))
	err = g.Wait()
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *Capture) ensurePublication(ctx context.Context, meta *pgx.Conn, haveCP bool) error {
	ok, err := publicationExists(ctx, meta, c.opts.Publication)
	if err != nil {
		return err
	}
	if err := c.checkListedTables(ctx, meta); err != nil {
		return err
	}
	if !ok {
		if haveCP {
			return fault.With(fault.ErrPublicationMissing, fmt.Sprintf(
				"publication %q was dropped after tidemark started using it: changes made while it was missing cannot be decoded. "+
					"Restore it, or re-snapshot: %s", c.opts.Publication, resnapshotAll), nil)
		}
		if err := c.checkCanCreatePublication(ctx, meta); err != nil {
			return err
		}
		c.log.Info("creating publication", "publication", c.opts.Publication, "tables", len(c.opts.Tables))
		if err := createPublication(ctx, meta, c.opts.Publication, c.opts.Tables); err != nil {
			return err
		}
		c.pubAll, c.pubCreated = len(c.opts.Tables) == 0, true
		return nil
	}
	if c.pubAll, err = publicationKind(ctx, meta, c.opts.Publication); err != nil {
		return err
	}
	if c.pubAll && len(c.opts.Tables) > 0 {
		return c.refuseTablesForAll()
	}
	if len(c.opts.Tables) > 0 {
		have, err := publicationTables(ctx, meta, c.opts.Publication)
		if err != nil {
			return err
		}
		return addToPublication(ctx, meta, c.opts.Publication, have, c.opts.Tables)
	}
	return nil
}

// openTable describes a published table and creates its lake tables.
func (c *Capture) openTable(ctx context.Context, meta *pgx.Conn, id change.TableID) (*table, error) {
	info, err := c.describe(ctx, meta, id)
	if err != nil {
		return nil, err
	}
	return c.openDescribed(ctx, meta, id, info)
}

// describe is describeTable with the table's declared merge key.
func (c *Capture) describe(ctx context.Context, meta *pgx.Conn, id change.TableID) (*TableInfo, error) {
	info, err := describeKeyed(ctx, meta, id, c.types.Lookup, c.opts.Types, c.opts.MergeKeys[id])
	var r *refusedTable
	if errors.As(err, &r) && slices.Contains(c.opts.Tables, id) {
		// Asked for by name: capturing less than the list says is refused
		// for the whole run, with how to leave it out.
		var fe *fault.Error
		if errors.As(r.err, &fe) {
			return nil, fault.With(fe, fe.Msg+"; or leave it out of tables: (--tables)", fe.Err)
		}
		return nil, r.err
	}
	return info, err
}

// noteKeyless records whether table id, as described by info, is captured
// into bronze only; it reports whether that changed.
func (c *Capture) noteKeyless(id change.TableID, info *TableInfo) bool {
	prev, was := c.keyless[id]
	if info.Keyless == nil {
		delete(c.keyless, id)
		return was
	}
	c.keyless[id] = info.Keyless
	return !was || prev.Error() != info.Keyless.Error()
}

// openDescribed creates (or verifies) the lake tables of a described table.
func (c *Capture) openDescribed(ctx context.Context, meta *pgx.Conn, id change.TableID, info *TableInfo) (*table, error) {
	if err := c.lakeKey(ctx, id, info); err != nil {
		return nil, err
	}
	t := &table{id: id, schema: schemaOf(info.Relation)}
	t.info.Store(info)
	texts, err := missingValues(ctx, meta, id)
	if err != nil {
		return nil, err
	}
	if err := withMissing(id, t.schema, info.Relation, texts); err != nil {
		return nil, err
	}
	st, err := c.w.OpenTable(ctx, id, t.schema)
	if err != nil {
		return nil, err
	}
	t.snapshot, err = pipeline.ParseSnapshotState(st.Props[pipeline.PropSnapshot])
	if err != nil {
		return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: snapshot state in the lake cannot be read", id), err)
	}
	t.snapshot.Estimate = info.Estimate
	t.filenode, t.truncXids = parseFilenodeProps(st.Props)
	if v := st.Props[pipeline.PropReplacedBefore]; v != "" {
		if t.replacedBefore, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: %s = %q in the lake is not a position", id, pipeline.PropReplacedBefore, v), err)
		}
	}
	if err := c.openLeaves(ctx, meta, t, st.Props); err != nil {
		return nil, err
	}
	return t, nil
}

// schemaOf builds the lake schema of a relation.
func schemaOf(r *Relation) *change.Schema {
	s := &change.Schema{Key: r.KeyNames}
	for _, col := range r.Columns {
		s.Fields = append(s.Fields, change.Field{Name: col.Name, ID: int(col.AttNum), Type: col.Map.IcebergType(), SourceType: col.Map.SourceType()})
	}
	return s
}

// ensureSlot verifies (or creates) the replication slot and returns the LSN
// to start streaming from.
func (c *Capture) ensureSlot(ctx context.Context, meta *pgx.Conn, repl *pgconn.PgConn, cp pipeline.Checkpoint, haveCP bool) (uint64, error) {
	if c.opts.TemporarySlot {
		res, err := pglogrepl.CreateReplicationSlot(ctx, repl, c.opts.Slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
		if err != nil {
			return 0, classify(fmt.Errorf("create temporary replication slot %q: %w", c.opts.Slot, err))
		}
		c.started = true // streaming from here on: tail's end is no failed start
		return ParseLSN(res.ConsistentPoint)
	}
	si, err := slotInfo(ctx, meta, c.opts.Slot)
	if err != nil {
		return 0, err
	}
	if err := c.slotProblem(si, cp, haveCP); err != nil {
		return 0, err
	}
	if !si.Exists {
		res, err := pglogrepl.CreateReplicationSlot(ctx, repl, c.opts.Slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
		if err != nil {
			return 0, classify(fmt.Errorf("create replication slot %q: %w", c.opts.Slot, err))
		}
		c.slotCreated = true
		lsn, err := ParseLSN(res.ConsistentPoint)
		if err != nil {
			return 0, c.dropCreatedSlot(meta, err)
		}
		c.log.Info("created replication slot", "slot", c.opts.Slot, "consistent_point", res.ConsistentPoint)
		// Record the slot's starting point before any data moves, so a later
		// start can tell a lost slot from a fresh one.
		if err := c.w.Flush(ctx, NewCheckpoint(lsn, 0, time.Now().UTC(), 0, c.opts.Slot)); err != nil {
			return 0, c.dropCreatedSlot(meta, err)
		}
		c.started = true
		return lsn, nil
	}
	if si.ActivePID != 0 {
		return 0, fault.MarkTransient(fmt.Errorf("replication slot %q is in use by backend pid %d (another tidemark, or our previous connection not yet gone)", c.opts.Slot, si.ActivePID))
	}
	c.started = true // the slot existed before this start
	if !haveCP {
		if err := c.w.Flush(ctx, NewCheckpoint(si.ConfirmedFlush, 0, time.Now().UTC(), 0, c.opts.Slot)); err != nil {
			return 0, err
		}
		return si.ConfirmedFlush, nil
	}
	return ResumeLSN(cp)
}

// Recovery hints of the errors that a re-snapshot repairs: the exact
// command first, a fresh pipeline as the alternative.
const (
	resnapshotAll = "To recover, run `tidemark resnapshot --all` with the same --source/--warehouse/--name flags (it drops the broken slot, creates a new one and marks every table for re-snapshot), then `tidemark run`; or start a fresh pipeline with a new --name"
)

// slotProblem returns the named error a start with slot si and checkpoint
// cp must stop with (slot_lost, wal_lost, slot_moved; bad_config for a slot
// that is not ours), or nil: the start-up
// checks of run, also used by `tidemark resnapshot` to tell a broken slot
// from a healthy one.
func (c *Capture) slotProblem(si SlotInfo, cp pipeline.Checkpoint, haveCP bool) error {
	acked := AckedLSN(cp)
	switch {
	case !si.Exists && haveCP:
		return fault.With(fault.ErrSlotLost, fmt.Sprintf(
			"replication slot %q no longer exists (tidemark had confirmed up to %s): changes after that point are gone from PostgreSQL. "+
				"Nothing was skipped silently. %s", c.opts.Slot, FormatLSN(acked), resnapshotAll), nil)
	case !si.Exists:
		return nil
	case si.Plugin != "pgoutput":
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("replication slot %q uses plugin %q, tidemark needs pgoutput: choose another --slot", c.opts.Slot, si.Plugin), nil)
	case si.Database != "" && si.Database != c.d.Database():
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("replication slot %q belongs to database %q, not %q: choose another --slot", c.opts.Slot, si.Database, c.d.Database()), nil)
	case si.WALStatus == "lost":
		return fault.With(fault.ErrWALLost, fmt.Sprintf(
			"replication slot %q has wal_status = 'lost': PostgreSQL removed WAL that tidemark had not yet captured (max_slot_wal_keep_size). "+
				"Changes after %s are gone. Raise max_slot_wal_keep_size. %s", c.opts.Slot, FormatLSN(si.ConfirmedFlush), resnapshotAll), nil)
	case haveCP && si.ConfirmedFlush > acked:
		return fault.With(fault.ErrSlotMoved, fmt.Sprintf(
			"replication slot %q is at %s but tidemark only confirmed %s: the slot was recreated or advanced by someone else, "+
				"so changes in between may be missing. %s", c.opts.Slot, FormatLSN(si.ConfirmedFlush), FormatLSN(acked), resnapshotAll), nil)
	}
	return nil
}

// replicationError classifies an error from the replication protocol.
func (c *Capture) replicationError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := strings.ToLower(pgErr.Message)
		switch {
		case pgErr.Code == "42704" && strings.Contains(msg, "publication"):
			return fault.With(fault.ErrPublicationMissing, fmt.Sprintf("publication %q does not exist (dropped while tidemark was using it). %s", c.opts.Publication, resnapshotAll), err)
		case pgErr.Code == "42704" && strings.Contains(msg, "slot"):
			return fault.With(fault.ErrSlotLost, fmt.Sprintf("replication slot %q was dropped while tidemark was using it. %s", c.opts.Slot, resnapshotAll), err)
		case pgErr.Code == "55000" && strings.Contains(msg, "wal"):
			return fault.With(fault.ErrWALLost, fmt.Sprintf("replication slot %q can no longer be used: required WAL was removed. %s", c.opts.Slot, resnapshotAll), err)
		}
	}
	return classify(err)
}

// lockPipeline takes a session advisory lock on the source, named after the
// slot, held by meta for the whole session: a second tidemark on the same
// pipeline refuses to start, and the lock goes away with the process (a
// crashed process's session ends when its connection drops). A just-killed
// predecessor may hold it for a moment, so it is retried briefly.
func (c *Capture) lockPipeline(ctx context.Context, meta *pgx.Conn) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		var ok bool
		if err := meta.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('tidemark:' || $1, 0))`, c.opts.Slot).Scan(&ok); err != nil {
			return classify(fmt.Errorf("lock pipeline %q: %w", c.opts.Slot, err))
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			var holder string
			meta.QueryRow(ctx, `SELECT coalesce(a.application_name, '') || ' pid ' || l.pid || coalesce(' from ' || host(a.client_addr), '')
				FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				  AND (l.classid::bigint << 32 | l.objid::bigint) = hashtextextended('tidemark:' || $1, 0) LIMIT 1`, c.opts.Slot).Scan(&holder)
			return fault.With(fault.ErrAlreadyRunning, fmt.Sprintf(
				"another tidemark is already running pipeline %q (slot %s; held by %s): one writer per pipeline. Stop it, or give this one another --name",
				c.opts.Slot, c.opts.Slot, holder), nil)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkReadable refuses to capture a published table the role may not
// SELECT. pgoutput itself checks no table privilege, so without this a
// revoked grant would go unnoticed until the next snapshot, while the
// table's changes kept flowing to a role that may no longer read them.
// Checked at start and at every publication poll.
func (c *Capture) checkReadable(ctx context.Context, conn *pgx.Conn) error {
	bad, err := unreadableTables(ctx, conn, c.opts.Publication)
	if err != nil || len(bad) == 0 {
		return err
	}
	names := make([]string, len(bad))
	quoted := make([]string, len(bad))
	for i, t := range bad {
		names[i], quoted[i] = t.String(), quoteTable(t)
	}
	leaveOut := fmt.Sprintf("or remove the table from the publication (ALTER PUBLICATION %s DROP TABLE %s)", quoteIdent(c.opts.Publication), strings.Join(quoted, ", "))
	if c.pubAll {
		leaveOut = "(a FOR ALL TABLES publication cannot leave a table out: to capture without it, use a publication with a table list, --publication)"
	}
	return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
		"role %q may not SELECT %s, which publication %q publishes: grant it (GRANT SELECT ON %s TO %s) %s, then restart. "+
			"Everything up to the last commit is in the lake and nothing past it was acknowledged",
		c.d.User(), strings.Join(names, ", "), c.opts.Publication, strings.Join(quoted, ", "), quoteIdent(c.d.User()), leaveOut), nil)
}

// heartbeat emits a small transactional logical message at a fixed interval.
// Its commit moves the watermark and lets the slot advance on an idle or
// unpublished-only workload.
func (c *Capture) heartbeat(ctx context.Context) error {
	if c.opts.HeartbeatInterval <= 0 {
		return nil
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(c.opts.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if conn == nil || conn.IsClosed() {
			var err error
			if conn, err = c.d.Connect(ctx); err != nil {
				return err
			}
		}
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, '')`, c.prefix+"hb"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return classify(fmt.Errorf("emit heartbeat: %w", err))
		}
	}
}

// pollPublication looks for tables added to the publication and hands them
// to the stream goroutine, which sets them up and starts their backfill.
func (c *Capture) pollPublication(ctx context.Context, s *stream) error {
	if c.opts.PublicationPoll <= 0 {
		return nil
	}
	tick := time.NewTicker(c.opts.PublicationPoll)
	defer tick.Stop()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	sent := map[change.TableID]string{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if conn == nil || conn.IsClosed() {
			var err error
			if conn, err = c.d.Connect(ctx); err != nil {
				return err
			}
		}
		ok, err := publicationExists(ctx, conn, c.opts.Publication)
		if err != nil {
			return err
		}
		if !ok {
			return fault.With(fault.ErrPublicationMissing, fmt.Sprintf("publication %q was dropped while tidemark was using it. %s", c.opts.Publication, resnapshotAll), nil)
		}
		if err := checkPartitionRoot(ctx, conn, c.opts.Publication); err != nil {
			return err
		}
		ids, err := publicationTables(ctx, conn, c.opts.Publication)
		if err != nil {
			return err
		}
		if err := c.checkReadable(ctx, conn); err != nil {
			return err
		}
		if err := c.notePartitions(ctx, conn, ids, sent); err != nil {
			return err
		}
		s.offerTables(ids)
		obs, err := readFilenodes(ctx, conn, ids)
		if err != nil {
			return err
		}
		s.offerFilenodes(obs)
	}
}

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }
