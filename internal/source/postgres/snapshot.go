package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Snapshot statuses (pipeline.SnapshotState).
const (
	snapPending = pipeline.SnapshotPending
	snapRunning = pipeline.SnapshotRunning
	snapDone    = pipeline.SnapshotDone
	snapSkipped = pipeline.SnapshotSkipped
)

// snapState is a table's snapshot progress, persisted with the commit that
// holds the chunk it describes (pipeline.PropSnapshot): a crash resumes
// after LastKey.
type snapState = pipeline.SnapshotState

// snapRow is one row read by a chunk.
type snapRow struct {
	values []any
	raw    string // JSON, only kept for rows that failed to decode
	err    error
}

// window is one chunk between its low and high watermark.
type window struct {
	id        string
	table     change.TableID
	gen       int64 // the table's snapshot generation the chunk belongs to (table.gen)
	open      bool
	lowLSN    uint64 // commit LSN of the low watermark
	lowTx     int64
	lowTime   time.Time
	opened    chan struct{} // closed when the stream has passed the low watermark
	truncated bool

	rows   []snapRow
	bytes  int64 // size of the rows as read (text), for the next chunk's LIMIT
	schema *change.Schema
	rel    *Relation // the columns schema was built from
	// A chunk read in columnar form (the Sink is a pipeline.ChunkSink) has no
	// rows but cols, its nrows decoded rows (seq: their sequence numbers,
	// nil for 1..nrows), bad, the rows that failed to decode, and size,
	// their estimated buffered size.
	cols    []arrow.Array
	nrows   int
	seq     []int64
	bad     []badRow
	size    int64
	read    int // rows read, decoded or not
	lastKey []string
	last    bool
	// blocks is, for a keyless table's chunk, how many heap blocks it
	// covered (0 when it stopped at its LIMIT or chunk_bytes first).
	blocks int64

	// changed holds the keys (keyString) the stream changed inside the
	// window, with SnapshotOptions.DropChanged; guarded by windows.mu.
	changed map[string]bool

	done chan error
}

func (w *window) finish(err error) {
	select {
	case w.done <- err:
	default:
	}
}

// windows is the registry shared by snapshot workers and the stream. It
// also remembers the commit LSN of recent transactions (see visibleSnapshot).
type windows struct {
	mu     sync.Mutex
	m      map[string]*window
	recent map[uint32]uint64 // xid -> commit LSN
	order  []uint32          // FIFO of recent, bounded
}

// recentTxns bounds the memory of recently committed transactions: racing
// commits are at most a few transactions older than a low watermark.
const recentTxns = 1 << 16

func newWindows() *windows { return &windows{m: map[string]*window{}, recent: map[uint32]uint64{}} }

// committed records that the stream decoded the commit of xid at lsn.
func (ws *windows) committed(xid uint32, lsn uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := ws.recent[xid]; !ok {
		ws.order = append(ws.order, xid)
	}
	ws.recent[xid] = lsn
	if len(ws.order) > recentTxns {
		delete(ws.recent, ws.order[0])
		ws.order = ws.order[1:]
	}
}

// committedBefore reports whether the stream saw xid commit below lsn.
func (ws *windows) committedBefore(xid uint32, lsn uint64) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	l, ok := ws.recent[xid]
	return ok && l < lsn
}

func (ws *windows) add(w *window) {
	ws.mu.Lock()
	ws.m[w.id] = w
	ws.mu.Unlock()
}

func (ws *windows) remove(id string) {
	ws.mu.Lock()
	delete(ws.m, id)
	ws.mu.Unlock()
}

func (ws *windows) open(id string, lsn uint64, tx int64, at time.Time) {
	ws.mu.Lock()
	if w := ws.m[id]; w != nil && !w.open {
		w.open, w.lowLSN, w.lowTx, w.lowTime = true, lsn, tx, at
		close(w.opened)
	}
	ws.mu.Unlock()
}

// close removes and returns the window, or nil if unknown.
func (ws *windows) close(id string) *window {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[id]
	if w == nil || !w.open {
		return nil
	}
	delete(ws.m, id)
	return w
}

// changedKeys records, for every open window of table t, that the stream
// changed the rows of the given values' keys (SnapshotOptions.DropChanged).
// With no open window of t (the snapshot is done, or between chunks) it
// encodes nothing.
func (ws *windows) changedKeys(t change.TableID, schema *change.Schema, rows ...[]any) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	var idx []int
	for _, w := range ws.m {
		if !w.open || w.table != t {
			continue
		}
		if idx == nil {
			if idx = keyIndex(schema); idx == nil {
				return
			}
		}
		if w.changed == nil {
			w.changed = map[string]bool{}
		}
		for _, v := range rows {
			if k, ok := keyString(idx, v); ok {
				w.changed[k] = true
			}
		}
	}
}

// keyIndex returns the positions of schema's key columns in its fields,
// or nil when it has no key or names a column it does not hold.
func keyIndex(schema *change.Schema) []int {
	if len(schema.Key) == 0 {
		return nil
	}
	idx := make([]int, len(schema.Key))
	for n, k := range schema.Key {
		idx[n] = slices.IndexFunc(schema.Fields, func(f change.Field) bool { return f.Name == k })
		if idx[n] < 0 {
			return nil
		}
	}
	return idx
}

// keyString renders the key columns of values (at the positions idx, from
// keyIndex) as one comparable string of their decoded values, so that a
// chunk row and a streamed change of one key give the same string; ok is
// false for nil values or a row too short to hold the key.
func keyString(idx []int, values []any) (string, bool) {
	if values == nil || len(idx) == 0 {
		return "", false
	}
	var b strings.Builder
	for _, i := range idx {
		if i >= len(values) {
			return "", false
		}
		fmt.Fprintf(&b, "%T:%v\x00", values[i], values[i])
	}
	return b.String(), true
}

func (ws *windows) truncate(t change.TableID) {
	ws.mu.Lock()
	for _, w := range ws.m {
		if w.open && w.table == t {
			w.truncated = true
		}
	}
	ws.mu.Unlock()
}

// errTruncatedInWindow asks the worker to read a chunk again: the table was
// truncated between its watermarks, so the rows it read may predate the
// truncate or follow it, and cannot be placed.
var errTruncatedInWindow = errors.New("table truncated inside the snapshot window")

// errSnapshotRestarted asks the worker to read the table again from its
// first key: it was rewritten (rewrite.go), and the chunks read so far
// may hold values from before.
var errSnapshotRestarted = errors.New("table rewritten: snapshot restarted")

// firstChunkRows bounds the first chunk of a table, read before its row
// size is known.
const firstChunkRows = 64

// snapshotter reads tables in key-ordered chunks, several tables at a time:
// the scheduler (shared with every source) decides which tables and runs
// the workers, table reads one.
type snapshotter struct {
	c       *Capture
	windows *windows
	sched   *pipeline.SnapshotScheduler[*table]
}

func newSnapshotter(c *Capture, ws *windows) *snapshotter {
	return &snapshotter{c: c, windows: ws,
		sched: pipeline.NewSnapshotScheduler[*table](c.w, c.opts.Snapshot.Enabled)}
}

func (sn *snapshotter) run(ctx context.Context) error {
	return sn.sched.Run(ctx, sn.c.opts.Snapshot.Parallelism, "snapshot worker", func() pipeline.SnapshotWorker[*table] {
		return &snapshotWorker{sn: sn}
	})
}

// snapshotWorker keeps one connection from one table to the next.
type snapshotWorker struct {
	sn   *snapshotter
	conn *pgx.Conn
}

func (w *snapshotWorker) Snapshot(ctx context.Context, t *table) error {
	if w.conn == nil || w.conn.IsClosed() {
		var err error
		if w.conn, err = w.sn.c.d.Connect(ctx); err != nil {
			return err
		}
	}
	return w.sn.table(ctx, w.conn, t)
}

func (w *snapshotWorker) Close() {
	if w.conn != nil {
		w.conn.Close(context.Background())
	}
}

// finished reports whether t's snapshot of generation gen is its last
// one, and if so lets t be queued again (a rewrite detected later starts a
// new one); false: a rewrite restarted it meanwhile.
func (sn *snapshotter) finished(t *table, gen int64) bool {
	return sn.sched.Finish(t.id, func() bool { return t.gen.Load() == gen })
}

// table snapshots one table from where its persisted progress left off.
func (sn *snapshotter) table(ctx context.Context, conn *pgx.Conn, t *table) error {
	gen := t.gen.Load() // before the progress: a rewrite after it restarts
	// The key the chunks are ordered by: the table's, or for a keyless
	// table none (chunks are ctid ranges).
	keyCols, keyTypes, err := snapshotKey(t)
	if err != nil {
		return err
	}
	lastKey := t.snapshot.LastKey
	if len(keyCols) == 0 && len(lastKey) > 0 {
		if _, _, _, err := tidProgress(lastKey); err != nil {
			// Progress recorded by key, the table keyless since: read it
			// again from its first block.
			sn.c.log.Warn("snapshot progress is not a row position of a keyless table: reading it from its first block", "table", t.id.String(), "last_key", lastKey)
			lastKey = nil
		}
	}
	rows := t.snapshot.Rows
	est := t.info.Load().Estimate
	start := time.Now()
	lastLog := start
	startRows := rows
	chunkRows := sn.c.opts.Snapshot.ChunkRows
	// The LIMIT of a chunk is also its cost when the chunk stops early at
	// chunk_bytes: the rest of the result is still sent and discarded. So
	// the first chunk is small and the next ones are sized from the rows
	// seen: chunk_bytes / average row size (a table of 16 MiB values would
	// otherwise send itself whole for every chunk of two rows).
	limit := min(chunkRows, firstChunkRows)
	// sizeAfter is the LIMIT of the chunk after w (limit if w tells nothing).
	sizeAfter := func(w *window, limit int) int {
		if n := int64(w.read); n > 0 && w.bytes > 0 {
			return int(min(int64(chunkRows), max(1, sn.c.opts.Snapshot.ChunkBytes*n/w.bytes+1)))
		}
		return limit
	}
	sn.c.log.Info("snapshot starting", "table", t.id.String(), "resume_after_rows", rows, "estimate", est)
	// Chunks are pipelined one deep: the next chunk's window is opened
	// (its low watermark emitted) before this chunk's high watermark, so
	// the stream opens it before it reconciles this chunk, and the next
	// chunk is read while the stream writes this one. Each chunk keeps its
	// own low watermark, is still read under a snapshot taken after the
	// stream passed that watermark (visibleSnapshot), and is still placed
	// at it; chunks cover disjoint key ranges, so their windows may
	// overlap. The next chunk's high watermark is only emitted once this
	// chunk is reconciled: if this one must be read again (a truncate in
	// its window), the next one, read after this one's last key, is
	// dropped unwritten and its window closed, so progress (LastKey, which
	// each reconciled chunk persists with its rows) never passes a chunk
	// that was not written.
	var ahead *window // the next chunk: read, its high watermark not yet emitted
	defer func() {
		if ahead != nil {
			sn.windows.remove(ahead.id)
			ahead.release()
		}
	}()
	hint := &sizeHint{limit: sn.c.opts.Snapshot.ChunkBytes}
	// A keyless table's chunk is a range of span heap blocks (read),
	// sized from the rows per block seen so far so that it holds about a
	// LIMIT of rows; the LIMIT and chunk_bytes still bound it.
	span := int64(1)
	spanAfter := func(w *window, span int64) int64 {
		switch {
		case w.blocks <= 0:
			return span
		case w.read == 0:
			return min(2*span, maxSpan)
		}
		return max(1, min(maxSpan, int64(sizeAfter(w, limit))*w.blocks/int64(w.read)))
	}
	for {
		w := ahead
		ahead = nil
		if w == nil {
			var err error
			if w, err = sn.openWindow(ctx, conn, t, gen); err != nil {
				return err
			}
			if err := sn.read(ctx, conn, t, w, keyCols, keyTypes, lastKey, limit, span, hint); err != nil {
				sn.windows.remove(w.id)
				return err
			}
		}
		next, err := sn.reconcile(ctx, conn, t, w, func(next *window) error {
			return sn.read(ctx, conn, t, next, keyCols, keyTypes, w.lastKey, sizeAfter(w, limit), spanAfter(w, span), hint)
		})
		ahead = next
		if errors.Is(err, errTruncatedInWindow) {
			if ahead != nil {
				sn.windows.remove(ahead.id)
				ahead.release()
				ahead = nil
			}
			sn.c.log.Info("table truncated while a snapshot chunk was read: reading the chunk again", "table", t.id.String())
			continue
		}
		if errors.Is(err, errSnapshotRestarted) {
			if ahead != nil {
				sn.windows.remove(ahead.id)
				ahead.release()
				ahead = nil
			}
			gen, lastKey, rows, startRows = t.gen.Load(), nil, 0, 0
			limit, span = min(chunkRows, firstChunkRows), 1
			// A key change (or a keyless table that got a key,
			// stream.keyGained) restarts it too.
			if keyCols, keyTypes, err = snapshotKey(t); err != nil {
				return err
			}
			sn.c.log.Info("table rewritten while its snapshot ran: reading it again from its first key", "table", t.id.String())
			continue
		}
		if err != nil {
			return err
		}
		rows += int64(w.read)
		lastKey = w.lastKey
		span = spanAfter(w, span)
		limit = sizeAfter(w, limit)
		if now := time.Now(); now.Sub(lastLog) >= 5*time.Second || w.last {
			el := now.Sub(start).Seconds()
			rate := 0.0
			if el > 0 {
				rate = float64(rows-startRows) / el
			}
			sn.c.log.Info("snapshot progress", "table", t.id.String(), "rows", rows, "estimate", est,
				"rows_per_sec", int64(rate), "done", w.last)
			lastLog = now
		}
		if w.last {
			if sn.finished(t, gen) {
				return nil
			}
			gen, lastKey, rows, startRows = t.gen.Load(), nil, 0, 0
			limit, span = min(chunkRows, firstChunkRows), 1
			if keyCols, keyTypes, err = snapshotKey(t); err != nil {
				return err
			}
			sn.c.log.Info("table rewritten as its snapshot ended: reading it again from its first key", "table", t.id.String())
			continue
		}
		// A chunk is written and the next one read, its window still
		// open (its high watermark not emitted): tests run writes, DDL
		// or a truncate here, inside a window, instead of hoping for it.
		failpoint.Inject("snapshot-between-chunks")
	}
}

// snapshotKey returns the quoted key columns of t the snapshot orders
// and pages by, and their types: t's key as of the generation loaded
// before (a key change stores the new key before it moves the generation).
func snapshotKey(t *table) (cols, types []string, err error) {
	rel := t.info.Load().Relation
	cols = make([]string, len(rel.KeyNames))
	types = make([]string, len(rel.KeyNames))
	for i, k := range rel.KeyNames {
		cols[i] = quoteIdent(k)
		idx := rel.Index(k)
		if idx < 0 {
			return nil, nil, fmt.Errorf("table %s: key column %q not found", t.id, k)
		}
		types[i] = rel.Columns[idx].TypeName
	}
	return cols, types, nil
}

// visibleSnapshot opens the transaction the chunk is read in, with a
// snapshot that sees every transaction whose commit sorts below the low
// watermark. The transaction is left open on conn: the caller commits or
// rolls it back.
//
// PostgreSQL writes a commit record before the transaction becomes visible
// to other snapshots (and, under synchronous replication, waits for the
// standby in between). A transaction can therefore commit below the low
// watermark yet be invisible to a snapshot taken after it; the chunk, placed
// at the low watermark, would then overwrite that newer change with an older
// row. So: wait until the stream has passed the low watermark (it then knows
// every transaction that committed below it), take a REPEATABLE READ
// snapshot, and if any transaction the snapshot still sees as running is one
// the stream saw commit below the watermark, take it again.
func (sn *snapshotter) visibleSnapshot(ctx context.Context, conn *pgx.Conn, w *window) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.opened:
	}
	// Lock the table before the snapshot is taken (LOCK takes none):
	// a table rewrite (ALTER COLUMN TYPE, CLUSTER, VACUUM FULL) that
	// commits after our snapshot leaves a rewritten table that snapshot
	// sees as empty, which would end the table's snapshot early and lose
	// every row after this chunk. With the lock first, a rewrite either
	// committed before the snapshot or waits for the chunk. The three
	// statements go in one round trip.
	begin := "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; LOCK TABLE " + quoteTable(w.table) +
		" IN ACCESS SHARE MODE; SELECT pg_current_snapshot()::text"
	deadline := time.Now().Add(10 * time.Minute)
	for wait := time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		res, err := conn.PgConn().Exec(ctx, begin).ReadAll()
		if err != nil {
			rollback(conn)
			return classify(fmt.Errorf("table %s: begin snapshot chunk: %w", w.table, err))
		}
		last := res[len(res)-1]
		if len(last.Rows) != 1 || len(last.Rows[0]) != 1 {
			rollback(conn)
			return fmt.Errorf("table %s: read snapshot: unexpected result", w.table)
		}
		racing := false
		for _, xid := range snapshotXip(string(last.Rows[0][0])) {
			if sn.windows.committedBefore(uint32(xid), w.lowLSN) {
				racing = true
				break
			}
		}
		if !racing {
			return nil
		}
		rollback(conn)
		if time.Now().After(deadline) {
			return fault.MarkTransient(fmt.Errorf("table %s: a transaction committed before the snapshot watermark stayed invisible for 10 minutes (synchronous standby down?)", w.table))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// snapshotXip returns the in-progress xids of a pg_snapshot text
// ("xmin:xmax:xip,xip,...").
func snapshotXip(s string) []uint64 {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) < 3 || parts[2] == "" {
		return nil
	}
	var out []uint64
	for _, x := range strings.Split(parts[2], ",") {
		if v, err := strconv.ParseUint(x, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	return out
}

func newWindowID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newWindow registers a new window for a chunk of t; its low watermark is
// not emitted yet.
func (sn *snapshotter) newWindow(t *table, gen int64) *window {
	w := &window{id: newWindowID(), table: t.id, gen: gen, done: make(chan error, 1), opened: make(chan struct{})}
	sn.windows.add(w)
	return w
}

// openWindow registers a new window for a chunk of t and emits its low
// watermark.
func (sn *snapshotter) openWindow(ctx context.Context, conn *pgx.Conn, t *table, gen int64) (*window, error) {
	w := sn.newWindow(t, gen)
	if err := sn.emitWatermarks(ctx, conn, "low:"+w.id); err != nil {
		sn.windows.remove(w.id)
		return nil, err
	}
	return w, nil
}

// emitWatermarks writes watermark messages, in this order, in one
// transaction forced to disk as Capture.emitWatermark does, in one round
// trip (a chunk's next low and its own high watermark would otherwise take
// two transactions of four round trips each). The stream sees them at one
// commit position, in order: exactly as two transactions with nothing
// committed in between.
func (sn *snapshotter) emitWatermarks(ctx context.Context, conn *pgx.Conn, contents ...string) error {
	pc := conn.PgConn()
	lit := func(s string) (string, error) {
		e, err := pc.EscapeString(s)
		return "'" + e + "'", err
	}
	prefix, err := lit(sn.c.prefix + "wm")
	if err != nil {
		return fmt.Errorf("emit snapshot watermark: %w", err)
	}
	var q strings.Builder
	q.WriteString("BEGIN; SET LOCAL synchronous_commit TO on;")
	for _, c := range contents {
		l, err := lit(c)
		if err != nil {
			return fmt.Errorf("emit snapshot watermark: %w", err)
		}
		q.WriteString(" SELECT pg_logical_emit_message(true, " + prefix + ", " + l + ");")
	}
	q.WriteString(" COMMIT")
	if _, err := pc.Exec(ctx, q.String()).ReadAll(); err != nil {
		rollback(conn)
		return classify(fmt.Errorf("emit snapshot watermark: %w", err))
	}
	return nil
}

// rollback ends the transaction a failed multi-statement query may have
// left open (an error skips the rest of the statements, COMMIT included).
func rollback(conn *pgx.Conn) {
	if !conn.IsClosed() {
		conn.PgConn().Exec(context.Background(), "ROLLBACK").ReadAll()
	}
}

// reconcile emits the high watermark of w, a chunk read, and waits until
// the stream has written it. Unless w is the table's last chunk, it first
// opens the next chunk's window and, while the stream writes w, reads the
// next chunk with readNext; it returns that window (read, or nil if
// opening it failed) whatever w's outcome, for the caller to use or
// remove.
func (sn *snapshotter) reconcile(ctx context.Context, conn *pgx.Conn, t *table, w *window, readNext func(*window) error) (next *window, err error) {
	defer sn.windows.remove(w.id)
	marks := []string{"high:" + w.id}
	if !w.last {
		next = sn.newWindow(t, w.gen)
		marks = []string{"low:" + next.id, "high:" + w.id}
	}
	if err := sn.emitWatermarks(ctx, conn, marks...); err != nil {
		if next != nil {
			sn.windows.remove(next.id)
		}
		return nil, err
	}
	var nextErr error
	if next != nil {
		nextErr = readNext(next)
	}
	select {
	case <-ctx.Done():
		return next, ctx.Err()
	case err := <-w.done:
		if err != nil {
			return next, err
		}
	}
	return next, nextErr
}

// read reads the chunk of window w: the rows after key `after`, at most
// limit of them (or chunk_bytes), under a snapshot taken once the stream
// has passed w's low watermark.
//
// A keyless table (keyCols empty) is read by row position instead: the
// rows after ctid after[0] (nil: from the first) and before block
// after[0]+span, in ctid order. PostgreSQL (14 and later) reads such a
// range with a TID Range Scan, so a chunk costs its own blocks, not the
// table's. w.lastKey is then [the ctid of the last row read, or
// "(block,0)" once the range is read through; the end block; the row's
// tableoid, or "0"] (tidProgress). The end block is the table's size at
// the first chunk; the chunk that reaches it is the last.
func (sn *snapshotter) read(ctx context.Context, conn *pgx.Conn, t *table, w *window, keyCols, keyTypes []string, after []string, limit int, span int64, hint *sizeHint) error {
	if err := sn.visibleSnapshot(ctx, conn, w); err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			rollback(conn)
		}
	}()
	keyless := len(keyCols) == 0
	var endBlock, nblocks int64
	if keyless {
		from, end, oid, err := tidProgress(after)
		if err != nil {
			return fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: snapshot progress %v is not a row position", t.id, after), err)
		}
		if end < 0 {
			// The first chunk: the table's size now bounds the snapshot.
			// Every row the chunk's snapshot sees, so every row committed
			// below its low watermark, is in a block below it; a row in a
			// block past it was written later, and the stream has it.
			// (A partitioned table's rows are its leaves': each has
			// its own ctids, so the range is read in each, up to the
			// largest.)
			reg := quoteLiteral(quoteTable(t.id)) + "::regclass"
			res, err := conn.PgConn().Exec(ctx, "SELECT greatest(pg_relation_size("+reg+"), (SELECT coalesce(max(pg_relation_size(relid)), 0) FROM pg_partition_tree("+
				reg+") WHERE isleaf)) / current_setting('block_size')::bigint").ReadAll()
			if err == nil && (len(res) != 1 || len(res[0].Rows) != 1) {
				err = errors.New("unexpected result")
			}
			if err != nil {
				return classify(fmt.Errorf("table %s: read the table's size: %w", t.id, err))
			}
			if end, err = strconv.ParseInt(string(res[0].Rows[0][0]), 10, 64); err != nil {
				return fmt.Errorf("table %s: read the table's size: %w", t.id, err)
			}
		}
		nblocks, endBlock = end, min(from+span, end)
		if len(after) == 0 {
			after = []string{"(0,0)"}
		}
		after = []string{after[0], strconv.FormatInt(nblocks, 10), oid}
	}
	var sql strings.Builder
	if keyless {
		// ctid and tableoid last: the table's own columns keep their
		// positions.
		sql.WriteString("SELECT *, ctid, tableoid::int8 FROM " + quoteTable(t.id))
	} else {
		sql.WriteString("SELECT * FROM " + quoteTable(t.id))
	}
	// Text results (one decoder for stream and snapshot) from an unnamed
	// statement (a cached plan would fail after ALTER TABLE changes SELECT
	// *), text parameters, in one round trip.
	var params [][]byte
	if keyless {
		// Rows of a partitioned table's leaves share ctids: the order,
		// and where a chunk stops, is (ctid, tableoid).
		sql.WriteString(" WHERE ctid >= $1::tid AND ctid < $2::tid AND (ctid, tableoid::int8) > ($1::tid, $3::int8) ORDER BY ctid, tableoid")
		params = append(params, []byte(after[0]), []byte(fmt.Sprintf("(%d,0)", endBlock)), []byte(after[2]))
	} else if len(after) == len(keyCols) && len(after) > 0 {
		sql.WriteString(" WHERE (" + strings.Join(keyCols, ", ") + ") > (")
		for i := range after {
			if i > 0 {
				sql.WriteString(", ")
			}
			fmt.Fprintf(&sql, "$%d::text::%s", i+1, keyTypes[i])
			params = append(params, []byte(after[i]))
		}
		sql.WriteString(")")
	}
	if !keyless {
		sql.WriteString(" ORDER BY " + strings.Join(keyCols, ", "))
	}
	fmt.Fprintf(&sql, " LIMIT %d", limit)
	rows := conn.PgConn().ExecParams(ctx, sql.String(), params, nil, nil, nil)
	fds := rows.FieldDescriptions()
	if fds == nil {
		_, err := rows.Close()
		if err == nil {
			err = errors.New("no result")
		}
		return classify(fmt.Errorf("table %s: read snapshot chunk: %w", t.id, err))
	}
	tidCol := -1
	if keyless {
		tidCol = len(fds) - 2
		fds = fds[:tidCol]
	}
	rel := &Relation{Table: t.id}
	for _, fd := range fds {
		rel.Columns = append(rel.Columns, Column{Name: fd.Name, TypeOID: fd.DataTypeOID, TypeMod: fd.TypeModifier, AttNum: int16(fd.TableAttributeNumber)})
	}
	if err := mapColumns(t.id, rel.Columns, sn.c.types.Lookup, sn.c.opts.Types); err != nil {
		rows.Close()
		return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: a column's type cannot be mapped", t.id), err)
	}
	if keyless {
		// (Still keyless for this chunk, if the table has just got a
		// key: the chunk is dropped, and the snapshot read again by it.)
		rel.setKeys(nil)
	} else {
		rel.setKeys(t.info.Load().Relation.KeyNames)
	}
	w.schema, w.rel = schemaOf(rel), rel
	var bytes int64
	n := 0
	ncol := len(fds)
	// A pipeline.ChunkSink takes the chunk as Arrow arrays, decoded here; any
	// other Sink takes one Change per row.
	var cc *colChunk
	if _, ok := sn.c.w.(pipeline.ChunkSink); ok {
		cc = newColChunk(rel, limit, hint)
		defer cc.release()
	}
	// The rows' values are carved out of blocks of slabRows rows: one
	// allocation per block rather than one per row. Each row's slice is
	// capped at its own columns, so an append to it reallocates.
	const slabRows = 256
	var slab []any
	// lastKey is the key text of the last row read, kept in one reused
	// buffer (RawValues are only valid until the next row) and turned into
	// strings once, after the loop.
	var keyBuf []byte
	keyEnd := make([]int, len(rel.KeyIdx))
	if keyless {
		keyEnd = make([]int, 2) // ctid, tableoid
	}
	if cc == nil {
		w.rows = make([]snapRow, 0, min(limit, 1<<16))
	}
	for rows.NextRow() {
		raw := rows.Values()
		var tid, oid []byte
		if tidCol >= 0 && len(raw) == tidCol+2 {
			raw, tid, oid = raw[:tidCol], raw[tidCol], raw[tidCol+1]
		}
		for _, v := range raw {
			bytes += int64(len(v)) + 8
		}
		if cc != nil {
			if err := cc.add(raw, sn.c.opts.MaxValueBytes); err != nil {
				rows.Close()
				return fmt.Errorf("table %s: decode snapshot chunk: %w", t.id, err)
			}
		} else {
			if len(slab) < ncol {
				slab = make([]any, ncol*min(max(limit-n, 1), slabRows))
			}
			r := snapRow{values: slab[:ncol:ncol]}
			slab = slab[ncol:]
			for i, v := range raw {
				if v == nil || r.err != nil {
					continue
				}
				err := tooLarge(rel, i, v, sn.c.opts.MaxValueBytes)
				var val any
				if err == nil {
					val, err = rel.Columns[i].Map.Decode(v)
				}
				if err != nil {
					r.err = err
					r.raw = rawJSON(rel, raw, sn.c.opts.MaxValueBytes) // copies the text
					continue
				}
				r.values[i] = val
			}
			w.rows = append(w.rows, r)
		}
		n++
		keyBuf = keyBuf[:0]
		if keyless {
			keyBuf = append(keyBuf, tid...)
			keyEnd[0] = len(keyBuf)
			keyBuf = append(keyBuf, oid...)
			keyEnd[1] = len(keyBuf)
		}
		for i, k := range rel.KeyIdx {
			keyBuf = append(keyBuf, raw[k]...)
			keyEnd[i] = len(keyBuf)
		}
		if bytes >= sn.c.opts.Snapshot.ChunkBytes {
			break
		}
	}
	if n > 0 {
		w.lastKey = make([]string, len(keyEnd))
		start := 0
		for i, end := range keyEnd {
			w.lastKey[i] = string(keyBuf[start:end])
			start = end
		}
		if keyless {
			w.lastKey = []string{w.lastKey[0], after[1], w.lastKey[1]}
		}
	}
	full := n >= limit || bytes >= sn.c.opts.Snapshot.ChunkBytes
	w.bytes = bytes
	w.read = n
	if _, err := rows.Close(); err != nil {
		return classify(fmt.Errorf("table %s: read snapshot chunk: %w", t.id, err))
	}
	if _, err := conn.PgConn().Exec(ctx, "COMMIT").ReadAll(); err != nil {
		return classify(fmt.Errorf("table %s: read snapshot chunk: %w", t.id, err))
	}
	committed = true
	if cc != nil {
		cols, seq, err := cc.finish(hint)
		if err != nil {
			return fmt.Errorf("table %s: snapshot chunk: %w", t.id, err)
		}
		w.cols, w.seq, w.bad, w.size = cols, seq, cc.bad, cc.size
		w.nrows = n - len(cc.bad)
	}
	if n == 0 {
		w.lastKey = after
	}
	w.last = !full
	if keyless && !full {
		// The range is read through: go on at its end block.
		w.lastKey, w.blocks = []string{fmt.Sprintf("(%d,0)", endBlock), after[1], "0"}, span
		w.last = endBlock >= nblocks
	}
	return nil
}

// maxSpan bounds the blocks of a keyless table's chunk (1 GiB of 8 KiB
// blocks): a range of empty blocks doubles the next one.
const maxSpan = 1 << 17

// tidProgress reads a keyless table's snapshot progress (LastKey):
// ["(block,offset)", "end", "tableoid"], the ctid (and, for a partitioned
// table, the leaf) of the last row read and the block the snapshot ends
// at (the table's size at its first chunk). from is that block; end is
// -1 for no progress; oid is "0" before the range's first row.
func tidProgress(key []string) (from, end int64, oid string, err error) {
	if len(key) == 0 {
		return 0, -1, "0", nil
	}
	if len(key) != 3 {
		return 0, 0, "", fmt.Errorf("%d values, want a row position, an end block and a table oid", len(key))
	}
	b, _, ok := strings.Cut(strings.TrimPrefix(key[0], "("), ",")
	if !ok {
		return 0, 0, "", fmt.Errorf("%q is not a row position (block,offset)", key[0])
	}
	if from, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, "", err
	}
	if end, err = strconv.ParseInt(key[1], 10, 64); err != nil {
		return 0, 0, "", fmt.Errorf("end block %q: %w", key[1], err)
	}
	if _, err := strconv.ParseInt(key[2], 10, 64); err != nil {
		return 0, 0, "", fmt.Errorf("table oid %q: %w", key[2], err)
	}
	return from, end, key[2], nil
}

// quoteLiteral is s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
