package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// The snapshot reads each table in primary-key order, one chunk at a time,
// without a global read lock, and reconciles each chunk with the binlog by
// read-only watermarks (DBLog):
//
//   - the chunk's window is registered first: from then on the stream notes
//     the key of every change to the table, with its commit position;
//   - low: the binlog position the chunk's SELECT is consistent with. On
//     MariaDB that is exact: START TRANSACTION WITH CONSISTENT SNAPSHOT
//     and the Binlog_snapshot_file/position status it sets. On MySQL it is
//     SHOW MASTER STATUS just before the snapshot is opened. A snapshot
//     that does not see a transaction the stream read before the window
//     was registered is opened again (openWindow);
//   - the chunk is read: SELECT ... WHERE key > last ORDER BY key LIMIT n;
//   - high: SHOW MASTER STATUS after the SELECT;
//   - once the stream has read up to high (and is between transactions),
//     the rows whose key changed at a position after low are dropped from
//     the chunk (the stream holds a newer version), and the rest are
//     written at the high watermark's position (LSN high, seq = row): every
//     later change sorts after them, so a newer change always wins.
//
// "After low", not "in (low, high]": the stream is rarely exactly at high
// when it writes the chunk. It reads the binlog in batches of events and
// reconciles between batches, and a chunk reaches it only after its high
// watermark was read, so it may already have read and written changes past
// high. Those changes sort after the chunk by position (the lake), but a
// sink that keeps arrival order (Kafka, tail) would get the chunk's older
// row after them: a key changed anywhere after low is dropped (every
// change the window noted was already written, with the full row), and a
// truncate anywhere after low reads the chunk again.
//
// The chunk's progress (last key, rows) is committed with its rows, so a
// crash resumes at the next chunk.

// PropSnapshot is the bronze commit property holding a table's snapshot
// progress (pipeline.SnapshotState).
const PropSnapshot = pipeline.PropSnapshot

// Snapshot statuses.
const (
	snapPending = pipeline.SnapshotPending
	snapRunning = pipeline.SnapshotRunning
	snapDone    = pipeline.SnapshotDone
	snapSkipped = pipeline.SnapshotSkipped
)

// snapState is a table's snapshot progress.
type snapState = pipeline.SnapshotState

func parseSnapState(s string) (snapState, error) { return pipeline.ParseSnapshotState(s) }

// snapRow is one row a chunk read.
type snapRow struct {
	values []any
	raw    string // the dead letter's raw row (rawTextJSON), when err
	err    error
}

// window is one chunk from its registration to its reconciliation.
type window struct {
	table change.TableID
	t     *table
	// changed: keys the stream changed since registration, with the
	// highest commit position of the change.
	changed   map[string]uint64
	truncated []uint64 // positions of truncates seen

	low, high uint64 // LSNs of the watermarks
	// regPos is the highest commit position of a change the stream had
	// noted when the window was registered (windows.pos): its snapshot
	// must see every transaction up to it (openWindow).
	regPos uint64
	rows   []snapRow // the rows read, unless read in columnar form
	// cols are the rows read in columnar form (the Sink is a
	// pipeline.ChunkSink, snapcols.go), cc what their reconciliation
	// needs (keys, rows that failed to decode); nil otherwise.
	cols    []arrow.Array
	cc      *colChunk
	n       int // rows read
	lastKey []string
	last    bool
	bytes   int64
	kl      *keylessRead // a keyless table's whole read (keyless.go), else nil
	gen     int64        // the table's snapshot generation the chunk belongs to (tableCtl)

	done chan error
}

// windows is the registry shared by the snapshot workers and the stream.
type windows struct {
	mu sync.Mutex
	m  map[change.TableID][]*window
	// pos is the highest commit position of a change (row or truncate)
	// the stream has noted, of any table: a window registered now misses
	// the changes up to pos, and only those.
	pos uint64
}

// release drops the columns of a chunk not written.
func (w *window) release() {
	for _, a := range w.cols {
		a.Release()
	}
	w.cols = nil
}

func newWindows() *windows { return &windows{m: map[change.TableID][]*window{}} }

func (ws *windows) add(w *window) {
	ws.mu.Lock()
	ws.m[w.table] = append(ws.m[w.table], w)
	w.regPos = ws.pos
	ws.mu.Unlock()
}

func (ws *windows) remove(w *window) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l := ws.m[w.table]
	for i, x := range l {
		if x == w {
			ws.m[w.table] = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(ws.m[w.table]) == 0 {
		delete(ws.m, w.table)
	}
}

// changed notes a change to key of table at commit position lsn.
func (ws *windows) changed(id change.TableID, key string, lsn uint64) {
	ws.mu.Lock()
	ws.pos = max(ws.pos, lsn)
	for _, w := range ws.m[id] {
		if lsn > w.changed[key] {
			w.changed[key] = lsn
		}
	}
	ws.mu.Unlock()
}

// changedRow is changed for a decoded row of t: its key is computed only
// when a window of the table is open (mostly none is, and the key costs an
// allocation per change).
func (ws *windows) changedRow(t *table, vals []any, lsn uint64) {
	ws.mu.Lock()
	ws.pos = max(ws.pos, lsn)
	if l := ws.m[t.id]; len(l) > 0 {
		key := keyOf(t, vals)
		for _, w := range l {
			if lsn > w.changed[key] {
				w.changed[key] = lsn
			}
		}
	}
	ws.mu.Unlock()
}

func (ws *windows) truncate(id change.TableID, lsn uint64) {
	ws.mu.Lock()
	ws.pos = max(ws.pos, lsn)
	for _, w := range ws.m[id] {
		w.truncated = append(w.truncated, lsn)
	}
	ws.mu.Unlock()
}

// errTableGone ends the snapshot of a table dropped (or renamed) at the
// source while it was read.
var errTableGone = errors.New("table no longer captured")

// noSuchTable reports whether err is the server's "table doesn't exist"
// (ER_NO_SUCH_TABLE): a snapshot read of a table dropped or renamed since.
func noSuchTable(err error) bool {
	n, _, ok := ServerError(err)
	return ok && n == erNoSuchTable
}

// errTruncatedInWindow asks the worker to read a chunk again: the table was
// truncated after its low watermark (and the stream wrote the truncate
// before the chunk).
var errTruncatedInWindow = errors.New("table truncated inside the snapshot window")

// errSnapshotRestarted asks the worker to read the table again from its
// first key: its key changed (rekey.go), and chunks read by the old one
// are not written.
var errSnapshotRestarted = errors.New("table's snapshot restarted on a new key")

// snapSeqBase is added to the row number of a snapshot row to form its
// cdc_seq (see emitChunk).
const snapSeqBase = 1 << 40

// firstChunkRows bounds the first chunk of a table, read before its row
// size is known.
const firstChunkRows = 64

// snapshotter reads tables in key-ordered chunks, several tables at a time:
// the scheduler (shared with every source) decides which tables and runs
// the workers, table reads one.
type snapshotter struct {
	c       *Capture
	windows *windows
	ready   chan<- *window
	sched   *pipeline.SnapshotScheduler[*table]
}

func newSnapshotter(c *Capture, ws *windows, ready chan<- *window) *snapshotter {
	return &snapshotter{c: c, windows: ws, ready: ready,
		sched: pipeline.NewSnapshotScheduler[*table](c.sink, c.opts.Snapshot.Enabled)}
}

func (sn *snapshotter) run(ctx context.Context) error {
	return sn.sched.Run(ctx, sn.c.opts.Snapshot.Parallelism, "mysql snapshot worker", func() pipeline.SnapshotWorker[*table] {
		return pipeline.SnapshotFunc[*table](sn.table)
	})
}

// table snapshots one table from where its persisted progress left off.
// The worker reads t's columns and key, which the stream may replace after
// a schema change: it keeps its own copy, taken at start. A key change
// (rekey.go) moves the table's generation: the snapshot then starts again
// from the first key of the table value the change stored, and a
// snapshot that ends lets the table be queued again only if no key change
// came first (Finish).
func (sn *snapshotter) table(ctx context.Context, t *table) error {
	fresh := false
	for {
		gen := t.ctl.gen.Load() // before the table: a key change stores the table first
		if x := t.ctl.snap.Load(); x != nil {
			t = x
		}
		var err error
		if t.keyless {
			err = sn.keylessTable(ctx, t, gen)
		} else {
			err = sn.keyedTable(ctx, t, gen, fresh)
		}
		if err == nil && !sn.sched.Finish(t.id, func() bool { return t.ctl.gen.Load() == gen }) {
			err = errSnapshotRestarted
		}
		if !errors.Is(err, errSnapshotRestarted) {
			return err
		}
		fresh = true
		sn.c.log.Info("the table's key changed while its snapshot ran: reading it again from its first key", "table", t.id.String())
	}
}

// keyedTable snapshots keyed table t in chunks, from its persisted
// progress (or, fresh, from its first key), as generation gen.
func (sn *snapshotter) keyedTable(ctx context.Context, t *table, gen int64, fresh bool) error {
	conn, err := sn.c.db.Conn(ctx)
	if err != nil {
		return Classify(fmt.Errorf("table %s: connect for the snapshot: %w", t.id, err))
	}
	defer conn.Close()
	// The text DecodeText reads depends on the session's settings.
	if err := CheckSession(ctx, conn); err != nil {
		return err
	}
	// t.snap is the stream's; the progress read here is where this run
	// starts (the stream has not written a chunk of t yet).
	lastKey := t.snap.LastKey
	rows := t.snap.Rows
	if fresh {
		lastKey, rows = nil, 0
	}
	start := time.Now()
	lastLog := start
	startRows := rows
	chunkRows := max(sn.c.opts.Snapshot.ChunkRows, 1)
	limit := min(chunkRows, firstChunkRows)
	sn.c.log.Info("snapshot starting", "table", t.id.String(), "resume_after_rows", rows, "estimate", t.est)
	// limitAfter is the LIMIT of the chunk after w: chunk_bytes over the
	// average row size w saw (limit if w saw none).
	limitAfter := func(w *window, limit int) int {
		if n := int64(w.n); n > 0 && w.bytes > 0 {
			return int(min(int64(chunkRows), max(1, sn.c.opts.Snapshot.ChunkBytes*n/w.bytes+1)))
		}
		return limit
	}
	// Chunks are pipelined one deep: while the stream reconciles and
	// writes chunk n, chunk n+1 is read (its window registered, its own
	// consistent snapshot, its own low and high watermarks). Chunks cover
	// disjoint key ranges, so their windows may overlap: each chunk is
	// reconciled against the changes its own window noted. Chunk n+1 is
	// handed to the stream only once chunk n is written, so the progress
	// each chunk commits with its rows (LastKey) never passes a chunk that
	// was not written; if chunk n must be read again (a truncate in its
	// window) or its table's snapshot ends or restarts, chunk n+1, read
	// after n's last key, is dropped unwritten. Memory: two chunks, the
	// one being written and the one being read.
	var ahead *window // the next chunk, read, not yet handed to the stream
	hint := &colHint{limit: sn.c.opts.Snapshot.ChunkBytes}
	defer func() {
		if ahead != nil {
			sn.windows.remove(ahead)
			ahead.release()
		}
	}()
	newWindow := func() *window {
		w := &window{table: t.id, t: t, changed: map[string]uint64{}, done: make(chan error, 1), gen: gen}
		sn.windows.add(w)
		return w
	}
	gone := func() error {
		// Dropped or renamed at the source since the snapshot began: the
		// stream ends its capture at that statement.
		sn.c.log.Info("table dropped or renamed while its snapshot ran: snapshot ended", "table", t.id.String())
		return nil
	}
	for {
		w := ahead
		ahead = nil
		if w == nil {
			w = newWindow()
			if err := sn.read(ctx, conn, w, lastKey, limit, hint); err != nil {
				sn.windows.remove(w)
				w.release()
				if noSuchTable(err) {
					return gone()
				}
				return err
			}
		}
		// The chunk is read, its high watermark taken, and the stream does
		// not have it yet: tests write here so that the stream reads and
		// writes changes past high before it reconciles the chunk.
		failpoint.Inject("mysql-snapshot-before-handover")
		select {
		case sn.ready <- w:
		case <-ctx.Done():
			sn.windows.remove(w)
			w.release()
			return nil
		}
		var next *window
		var nextErr error
		if !w.last {
			// A chunk is handed over and the next one not yet read (nor
			// its window registered): tests run writes, DDL or a kill
			// here instead of hoping for a race.
			failpoint.Inject("mysql-snapshot-between-chunks")
			next = newWindow()
			if nextErr = sn.read(ctx, conn, next, w.lastKey, limitAfter(w, limit), hint); nextErr != nil {
				sn.windows.remove(next)
				next.release()
				next = nil
			}
		}
		var err error
		select {
		case <-ctx.Done():
			if next != nil {
				sn.windows.remove(next)
				next.release()
			}
			return nil
		case err = <-w.done:
		}
		sn.windows.remove(w)
		w.release() // (written: bronze holds its own references)
		if err != nil && next != nil {
			// Read after a chunk that is not written: dropped.
			sn.windows.remove(next)
			next.release()
			next = nil
		}
		if errors.Is(err, errTableGone) {
			sn.c.log.Info("table dropped while its snapshot ran: snapshot ended", "table", t.id.String())
			return nil
		}
		if errors.Is(err, errTruncatedInWindow) {
			sn.c.log.Info("table truncated while a snapshot chunk was read: reading the chunk again", "table", t.id.String())
			continue
		}
		if err != nil {
			return err
		}
		rows += int64(w.n)
		lastKey = w.lastKey
		limit = limitAfter(w, limit)
		if now := time.Now(); now.Sub(lastLog) >= 5*time.Second || w.last {
			rate := 0.0
			if el := now.Sub(start).Seconds(); el > 0 {
				rate = float64(rows-startRows) / el
			}
			sn.c.log.Info("snapshot progress", "table", t.id.String(), "rows", rows, "estimate", t.est,
				"rows_per_sec", int64(rate), "done", w.last)
			lastLog = now
		}
		if w.last {
			return nil
		}
		if nextErr != nil {
			if noSuchTable(nextErr) {
				return gone()
			}
			return nextErr
		}
		ahead = next
	}
}

// read reads the chunk of w: the rows after key `after`, at most limit,
// with its low and high watermarks.
func (sn *snapshotter) read(ctx context.Context, conn *sql.Conn, w *window, after []string, limit int, hint *colHint) (err error) {
	t := w.t
	c := sn.c
	low, end, err := sn.openWindow(ctx, conn, w)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := end(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	w.low = low
	cols := make([]string, len(t.cols))
	for i, m := range t.maps {
		cols[i] = m.SelectExpr()
	}
	keys := make([]string, len(t.keyIdx))
	for i, k := range t.keyIdx {
		keys[i] = quoteIdent(t.cols[k].Name)
	}
	var q strings.Builder
	q.WriteString("SELECT " + strings.Join(cols, ", ") + " FROM " + quoteTable(t.id))
	var args []any
	if len(after) == len(keys) && len(after) > 0 {
		q.WriteString(" WHERE (" + strings.Join(keys, ", ") + ") > (" + strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ") + ")")
		for _, a := range after {
			args = append(args, a)
		}
	}
	fmt.Fprintf(&q, " ORDER BY %s LIMIT %d", strings.Join(keys, ", "), limit)
	// Per row, nothing but its values is allocated: the rows' value slices
	// are cut from blocks of valueBlock rows, the last key is kept in
	// reused buffers (made strings once, for the chunk's last row), and
	// the key string the reconciliation compares is built only for a
	// chunk whose window saw changes (emitChunk).
	//
	// A Sink that takes chunks in columnar form gets them decoded straight
	// into Arrow builders (snapcols.go).
	var cc *colChunk
	if _, ok := c.sink.(pipeline.ChunkSink); ok {
		cc = newColChunk(t, min(limit, maxRowsPrealloc), hint)
		defer func() {
			if err != nil {
				cc.release()
			}
		}()
	} else if w.rows == nil {
		w.rows = make([]snapRow, 0, min(limit, maxRowsPrealloc))
	}
	lastKey := make([][]byte, len(t.keyIdx))
	var block []any
	err = scanRows(ctx, conn, t, "read snapshot chunk", q.String(), args, func(raw []sql.RawBytes) error {
		for _, b := range raw {
			w.bytes += int64(len(b)) + 8
		}
		if cc != nil {
			if err := cc.add(raw, c.opts.MaxValueBytes); err != nil {
				return fmt.Errorf("table %s: decode a snapshot row: %w", t.id, err)
			}
			for i, k := range t.keyIdx {
				lastKey[i] = append(lastKey[i][:0], raw[k]...)
			}
			return nil
		}
		if len(block) < len(raw) {
			block = make([]any, len(raw)*valueBlock)
		}
		vals := block[:len(raw):len(raw)]
		block = block[len(raw):]
		w.rows = append(w.rows, decodeSnapRowInto(t, raw, vals, c.opts.MaxValueBytes))
		for i, k := range t.keyIdx {
			lastKey[i] = append(lastKey[i][:0], raw[k]...)
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.n = len(w.rows)
	if cc != nil {
		w.n, w.cc = cc.rows, cc
		w.cols = cc.finish(hint)
	}
	if w.n == 0 {
		w.lastKey = after
	} else {
		w.lastKey = make([]string, len(lastKey))
		for i, b := range lastKey {
			w.lastKey[i] = string(b)
		}
	}
	w.last = w.n < limit
	// Between the SELECT and the high watermark: tests widen the window
	// here (sleep) so that concurrent writes land inside it.
	failpoint.Inject("mysql-snapshot-after-select")
	hp, err := c.binlogEnd(ctx, conn)
	if err != nil {
		return err
	}
	w.high = hp.LSN()
	return nil
}

// openWindow opens the consistent snapshot of window w's read (see
// openSnapshot), once it sees every transaction the stream had noted a
// change of when w was registered (w.regPos), and returns its position.
//
// The server writes a transaction to the binlog, and sends it to the
// stream, before the transaction is visible to other sessions (its engine
// commit comes after: group commit, a semi-synchronous replica's ack). So
// the stream may have read, and written, a change that a snapshot opened
// just after cannot see: MariaDB's Binlog_snapshot_position is then below
// that change, which the window did not note (it was registered after),
// and the chunk's older row of the key would be written at high, after
// the change (in the lake, a stale row folded last; for a keyless table,
// a change lost). Such a snapshot is given up and opened again, until it
// sees the transaction (until its position reaches regPos).
//
// MariaDB's position is the snapshot's own, so this is exact there. On
// MySQL low is SHOW MASTER STATUS read before the snapshot opens, which
// can be past a transaction not yet visible: that case is not caught
// (MySQL sources are not tested against a server here).
func (sn *snapshotter) openWindow(ctx context.Context, conn *sql.Conn, w *window) (uint64, func() error, error) {
	wait := time.Millisecond
	start := time.Now()
	logged := false
	for {
		low, end, err := sn.c.openSnapshot(ctx, conn, w.table)
		if err != nil || low >= w.regPos {
			return low, end, err
		}
		if err := end(); err != nil {
			return 0, nil, err
		}
		if !logged && time.Since(start) > 5*time.Second {
			sn.c.log.Info("a snapshot chunk waits for a transaction the binlog already holds to become visible",
				"table", w.table.String(), "position", FormatPosition(sn.c.basename, w.regPos))
			logged = true
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// openSnapshot opens a consistent snapshot on conn and returns the binlog
// position (LSN) it is consistent with (see the top of this file), and
// the function that ends it.
func (c *Capture) openSnapshot(ctx context.Context, conn *sql.Conn, id change.TableID) (uint64, func() error, error) {
	var low uint64
	if c.flavor == MySQL {
		p, err := c.binlogEnd(ctx, conn)
		if err != nil {
			return 0, nil, err
		}
		low = p.LSN()
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return 0, nil, Classify(fmt.Errorf("table %s: open the snapshot: %w", id, err))
	}
	end := func() error {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
			return Classify(fmt.Errorf("table %s: end the snapshot: %w", id, err))
		}
		return nil
	}
	if c.flavor == MariaDB {
		p, err := snapshotPos(ctx, conn)
		if err != nil {
			end()
			return 0, nil, fmt.Errorf("table %s: %w", id, err)
		}
		low = p.LSN()
	}
	return low, end, nil
}

// decodeSnapRow decodes the text of a row the snapshot read; a row that
// cannot be decoded keeps its text, for the dead-letter table.
// valueBlock is the number of rows whose value slices a snapshot read
// allocates at once; maxRowsPrealloc caps the row list a chunk read
// allocates before it has read a row.
const (
	valueBlock      = 256
	maxRowsPrealloc = 100_000
)

func decodeSnapRow(t *table, raw []sql.RawBytes, maxValue int64) snapRow {
	return decodeSnapRowInto(t, raw, make([]any, len(raw)), maxValue)
}

// decodeSnapRowInto is decodeSnapRow into vals (len(raw) values). A value
// longer than maxValue (0: no maximum) makes the row a dead letter
// (value_too_large) whose raw text leaves it out.
func decodeSnapRowInto(t *table, raw []sql.RawBytes, vals []any, maxValue int64) snapRow {
	r := snapRow{values: vals}
	for i, b := range raw {
		if b == nil {
			continue
		}
		m := t.maps[i]
		if err := m.overRaw([]byte(b), true, maxValue); err != nil {
			r.err = err
			break
		}
		v, err := m.DecodeText(b)
		if err != nil {
			r.err = fmt.Errorf("column %q: %w", t.cols[i].Name, err)
			break
		}
		if err := m.overDecoded(v, true, maxValue); err != nil {
			r.err = err
			break
		}
		r.values[i] = v
	}
	if r.err != nil {
		r.raw = rawTextJSON(t, rawBytes(raw), maxValue)
	}
	return r
}

// rawBytes is raw as plain byte slices.
func rawBytes(raw []sql.RawBytes) [][]byte {
	out := make([][]byte, len(raw))
	for i, b := range raw {
		out[i] = b
	}
	return out
}

// snapshotPos reads MariaDB's binlog position of the consistent snapshot
// the connection's transaction holds.
func snapshotPos(ctx context.Context, conn *sql.Conn) (binlogPos, error) {
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return binlogPos{}, Classify(fmt.Errorf("read the snapshot's binlog position: %w", err))
	}
	defer rows.Close()
	var p binlogPos
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return p, Classify(err)
		}
		switch strings.ToLower(k) {
		case "binlog_snapshot_file":
			p.File = v
		case "binlog_snapshot_position":
			var n uint64
			fmt.Sscan(v, &n)
			p.Pos = uint32(n)
		}
	}
	if p.File == "" {
		return p, fault.With(fault.ErrServerConfig, "the server reports no binlog snapshot position (Binlog_snapshot_file): is log_bin on?", rows.Err())
	}
	return p, Classify(rows.Err())
}

// reconcileReady writes the chunks whose high watermark the stream has
// passed.
func (s *stream) reconcileReady(ctx context.Context) error {
	if len(s.waiting) == 0 || s.tx.open {
		return nil
	}
	rest := s.waiting[:0]
	for _, w := range s.waiting {
		if w.high > s.readPos {
			rest = append(rest, w)
			continue
		}
		err := s.emitChunk(ctx, w)
		w.done <- err
		if err != nil && !errors.Is(err, errTruncatedInWindow) && !errors.Is(err, errTableGone) && !errors.Is(err, errSnapshotRestarted) {
			return err
		}
	}
	s.waiting = rest
	return nil
}

// emitChunk writes a reconciled chunk at its high watermark.
func (s *stream) emitChunk(ctx context.Context, w *window) error {
	if w.kl != nil {
		return s.emitKeyless(ctx, w)
	}
	// Every truncate and change the window noted was read by the stream and
	// written before this chunk: one after low, even past high, is newer
	// than what the chunk read (see the top of this file).
	for _, p := range w.truncated {
		if p > w.low {
			return errTruncatedInWindow
		}
	}
	t := s.tables[w.table]
	if t == nil {
		return errTableGone
	}
	if w.gen != t.ctl.gen.Load() {
		return errSnapshotRestarted // the key changed: read again on the new one
	}
	now := time.Now().UTC()
	var dls []change.DeadLetter
	dropped := 0
	// The chunk's rows as a columnar chunk (chunk) or as changes (cs).
	var chunk *change.Chunk
	var cs []*change.Change
	if w.cols != nil {
		// Read in columnar form: the rows dropped, and the dead letters,
		// are cut out of the columns.
		var drop []int
		bad := w.cc.bad
		for i := 0; i < w.n; i++ {
			if len(bad) > 0 && bad[0].index == i {
				pos := change.Position{LSN: w.high, Seq: snapSeqBase + t.snap.Rows + int64(i) + 1}
				dls = append(dls, change.DeadLetter{Table: w.table, Op: change.OpRead, Pos: pos, CommitTime: now, Raw: bad[0].raw, Error: bad[0].err.Error()})
				bad = bad[1:]
				drop = append(drop, i)
				continue
			}
			if len(w.changed) > 0 {
				if p, ok := w.changed[string(w.cc.key(i))]; ok && p > w.low {
					dropped++
					drop = append(drop, i)
				}
			}
		}
		seq := chunkSeq(t.snap.Rows, w.n, drop)
		cols, err := cut(w.cols, w.n, drop)
		w.cols = nil
		if err != nil {
			return fmt.Errorf("table %s: drop the snapshot rows the stream superseded: %w", w.table, err)
		}
		chunk = chunkOf(w, cols, seq, w.cc.size, now)
		defer chunk.Release()
	} else {
		cs = make([]*change.Change, 0, len(w.rows))
	}
	slab := make([]change.Change, len(w.rows))
	for i, r := range w.rows {
		if len(w.changed) > 0 {
			if p, ok := w.changed[keyOf(w.t, r.values)]; ok && p > w.low {
				dropped++
				continue
			}
		}
		// Unique positions: chunks and transactions share commit positions
		// (the high watermark is a position in the binlog, not a
		// transaction of its own), so a snapshot row's seq is snapSeqBase
		// plus its number in the table's snapshot, which its progress
		// persists. Keys changed at the same position were dropped above,
		// so the order against those changes does not matter.
		pos := change.Position{LSN: w.high, Seq: snapSeqBase + t.snap.Rows + int64(i) + 1}
		if r.err != nil {
			dls = append(dls, change.DeadLetter{Table: w.table, Op: change.OpRead, Pos: pos, CommitTime: now, Raw: r.raw, Error: r.err.Error()})
			continue
		}
		slab[i] = change.Change{Table: w.table, Op: change.OpRead, Values: r.values, Schema: w.t.schema, Pos: pos, CommitTime: now}
		cs = append(cs, &slab[i])
	}
	st := t.snap
	st.Status = snapRunning
	st.LastKey = w.lastKey
	st.Rows += int64(w.n)
	if st.StartedAt == "" {
		st.StartedAt = now.Format(time.RFC3339)
	}
	if w.last {
		st.Status = snapDone
		st.FinishedAt = now.Format(time.RFC3339)
	}
	props := map[string]string{PropSnapshot: st.Encode()}
	if chunk != nil {
		if err := s.c.sink.(pipeline.ChunkSink).WriteChunk(ctx, chunk, props); err != nil {
			return err
		}
	} else if err := s.c.sink.WriteBatch(ctx, w.table, cs, props); err != nil {
		return err
	}
	for _, dl := range dls {
		if err := s.c.sink.DeadLetter(ctx, dl); err != nil {
			return err
		}
	}
	t.snap = st
	if dropped > 0 {
		s.c.log.Debug("snapshot chunk reconciled", "table", w.table.String(), "rows", w.n, "superseded", dropped)
	}
	// The chunk's rows sit at high: the checkpoint must reach it (the stream
	// has read up to readPos >= high, between transactions).
	s.between(time.Time{})
	if w.last {
		s.eng.FlushSoon()
	}
	if s.eng.Full() {
		s.publish()
		return s.eng.Flush(ctx)
	}
	return nil
}

// SnapshotPosition is the commit position (fileIndex<<32 | pos) covered by
// the consistent snapshot that conn's transaction holds (START TRANSACTION
// WITH CONSISTENT SNAPSHOT), for tidemark verify: every transaction
// visible in it committed at or below the position. MariaDB: exact, the
// snapshot's own Binlog_snapshot_file/position (as the capture's chunks
// read it); MySQL: SHOW MASTER STATUS read inside the transaction, at or
// past the snapshot.
func SnapshotPosition(ctx context.Context, conn *sql.Conn, f Flavor) (uint64, error) {
	if f == MariaDB {
		p, err := snapshotPos(ctx, conn)
		return p.LSN(), err
	}
	p, _, err := (*Capture)(nil).masterStatus(ctx, conn)
	return p.LSN(), err
}

// scanRows runs query on conn and hands each row to fn as raw text, in one
// set of buffers reused from row to row (fn copies what it keeps); an
// error of the read names table t and what was being read.
func scanRows(ctx context.Context, conn *sql.Conn, t *table, what, query string, args []any, fn func(raw []sql.RawBytes) error) error {
	rs, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		return Classify(fmt.Errorf("table %s: %s: %w", t.id, what, err))
	}
	defer rs.Close()
	raw := make([]sql.RawBytes, len(t.cols))
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			return Classify(fmt.Errorf("table %s: %s: %w", t.id, what, err))
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return Classify(fmt.Errorf("table %s: %s: %w", t.id, what, err))
	}
	return nil
}
