package mysql

// Tables without a key (docs/bronze.md, "Tables without a key"): a table
// with no primary key (nor a unique index on NOT NULL columns) is captured
// into bronze only: its bronze table records tidemark.key = [] and silver
// skips it. It has no key to read in chunks by, nor to tell a snapshot row
// from a change of the same row, so its snapshot is one consistent read
// instead of key-ordered chunks:
//
//   - a window is registered for the table first: from then on the stream
//     holds the table's changes in it instead of writing them; before it,
//     while the table's snapshot is pending, the stream drops them (they
//     committed before the read to come, which sees them: openWindow
//     waits until it does);
//   - the whole table is read in one transaction, START TRANSACTION WITH
//     CONSISTENT SNAPSHOT on a REPEATABLE READ connection; MariaDB's
//     Binlog_snapshot_file/position give the binlog position P the read
//     is consistent with (@@gtid_binlog_pos, read in the same transaction,
//     is the server's current position, not the snapshot's). The rows go
//     to a spool file in the spool directory, so the read costs a bounded
//     amount of memory however large the table;
//   - once the stream has read up to the position after the read (and is
//     between transactions), it writes the spooled rows as `r` rows at P
//     (seq 2^40 + row number), then the held changes committed after P, in
//     order, with the snapshot progress `done`, all before the next flush:
//     one bronze commit. Held changes at or before P are in the read.
//
// So a kill during the read leaves nothing of the table in bronze, and the
// next session reads it again from scratch: bronze holds each row of the
// table at P once, and each change after P once.
//
// A keyless table that gains a primary key (ALTER TABLE ... ADD PRIMARY
// KEY) is read again in chunks on that key from the statement's position
// on, and gets a silver table built from that read (rekey.go); a captured
// table whose primary key is dropped keeps its old key.

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// keylessRead is the state of a keyless table's snapshot window.
type keylessRead struct {
	// spool holds the rows read (their text, as the SELECT returned it);
	// rows counts them.
	spool *rowSpool
	rows  int64
	// held are the table's changes the stream read since the window was
	// registered (stream goroutine only).
	held []*change.Change
}

// keylessReason is why table id is captured into bronze only.
func keylessReason(id change.TableID) error {
	return fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
		"table %s has no primary key (nor a unique index on NOT NULL columns), so it is captured into bronze only, with no silver table: tidemark cannot merge its changes by key. "+
			"Add one (ALTER TABLE %s ADD PRIMARY KEY (...)): the table is then read again on it and gets a silver table",
		id, quoteTable(id)), nil)
}

// noteKeyless records whether t is captured into bronze only, for
// recordRefused.
func (c *Capture) noteKeyless(t *table) {
	if c.keyless == nil {
		c.keyless = map[change.TableID]error{}
	}
	if t.keyless {
		c.keyless[t.id] = keylessReason(t.id)
	} else {
		delete(c.keyless, t.id)
	}
}

// recordBronzeOnly logs and records the tables captured into bronze only
// (the whole set, so a table gone since is no longer named).
func (c *Capture) recordBronzeOnly(ctx context.Context) error {
	return pipeline.RecordBronzeOnly(ctx, c.sink, c.log, c.keyless, func(id change.TableID) string { return id.String() })
}

// redescribe describes table t again after a schema change. The table
// keeps t's key: a key change is followed at its statement, in stream
// order (rekey.go), not at the next row event. So a keyed table whose
// primary key was dropped with none replacing it stays keyed by its old
// key while the key's columns are there (as a PostgreSQL table does); a
// keyless table stays keyless until a statement gives it a primary key.
func (s *stream) redescribe(ctx context.Context, t *table) (*table, error) {
	nt, err := s.c.describe(ctx, t.id)
	if err != nil || slices.Equal(nt.schema.Key, t.schema.Key) {
		return nt, err
	}
	kt, err := s.c.tableOf(nil, t.id, nt.cols, t.schema.Key)
	if err != nil {
		return nil, fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"table %s: a column of the key it is captured by (%s) is gone: its changes can no longer be merged into its silver table by that key. "+
				"Give it a primary key (ALTER TABLE %s ADD PRIMARY KEY (...)): silver is rebuilt on it; or rebuild the table (tidemark resnapshot --replace %s)",
			t.id, strings.Join(t.schema.Key, ", "), quoteTable(t.id), t.id), err)
	}
	kt.est = nt.est
	return kt, nil
}

// write hands a streamed change to the sink, unless it is a change of a
// keyless table whose snapshot is to come (dropped: the read sees it) or
// under way (held in its window until the rows read are written).
func (s *stream) write(ctx context.Context, c *change.Change) error {
	if t := s.tables[c.Table]; t != nil && t.keyless {
		if w := s.windows.keylessWindow(c.Table); w != nil {
			w.kl.held = append(w.kl.held, c)
			return nil
		}
		if t.snap.Status == snapPending || t.snap.Status == snapRunning {
			return nil
		}
	}
	return s.c.sink.Write(ctx, c)
}

// keylessWindow is the open snapshot window of keyless table id, or nil.
func (ws *windows) keylessWindow(id change.TableID) *window {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.m[id] {
		if w.kl != nil {
			return w
		}
	}
	return nil
}

// keylessTable snapshots keyless table t in one consistent read (see the
// top of this file).
func (sn *snapshotter) keylessTable(ctx context.Context, t *table, gen int64) error {
	c := sn.c
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return Classify(fmt.Errorf("table %s: connect for the snapshot: %w", t.id, err))
	}
	defer conn.Close()
	if err := CheckSession(ctx, conn); err != nil {
		return err
	}
	c.log.Info("snapshot starting (no key: one consistent read)", "table", t.id.String(), "estimate", t.est)
	w := &window{table: t.id, t: t, changed: map[string]uint64{}, done: make(chan error, 1), kl: &keylessRead{}, gen: gen}
	sn.windows.add(w)
	defer sn.windows.remove(w)
	if err := sn.readWhole(ctx, conn, w); err != nil {
		if w.kl.spool != nil {
			w.kl.spool.remove()
		}
		if noSuchTable(err) {
			c.log.Info("table dropped or renamed while its snapshot ran: snapshot ended", "table", t.id.String())
			return nil
		}
		return err
	}
	// The whole table is read and nothing of it is in bronze: tests kill
	// the process here.
	failpoint.Inject("mysql-keyless-snapshot-read")
	select {
	case sn.ready <- w: // the stream removes the spool once written
	case <-ctx.Done():
		w.kl.spool.remove()
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case err = <-w.done:
	}
	if errors.Is(err, errTableGone) {
		c.log.Info("table dropped while its snapshot ran: snapshot ended", "table", t.id.String())
		return nil
	}
	if err != nil {
		return err
	}
	c.log.Info("snapshot progress", "table", t.id.String(), "rows", w.kl.rows, "estimate", t.est, "done", true)
	return nil
}

// readWhole reads every row of w's table into a spool, with the binlog
// position the read is consistent with (w.low) and the position after it
// (w.high).
func (sn *snapshotter) readWhole(ctx context.Context, conn *sql.Conn, w *window) (err error) {
	t, c := w.t, sn.c
	// A consistent snapshot is one only under REPEATABLE READ.
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return Classify(fmt.Errorf("table %s: set the snapshot's isolation level: %w", t.id, err))
	}
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
	if w.kl.spool, err = newRowSpool(c.opts.SpoolDir); err != nil {
		return fmt.Errorf("table %s: %w", t.id, err)
	}
	cols := make([]string, len(t.cols))
	for i, m := range t.maps {
		cols[i] = m.SelectExpr()
	}
	err = scanRows(ctx, conn, t, "read the snapshot", "SELECT "+strings.Join(cols, ", ")+" FROM "+quoteTable(t.id), nil, func(raw []sql.RawBytes) error {
		if err := w.kl.spool.append(raw); err != nil {
			return fmt.Errorf("table %s: %w", t.id, err)
		}
		w.kl.rows++
		return nil
	})
	if err != nil {
		return err
	}
	hp, err := c.binlogEnd(ctx, conn)
	if err != nil {
		return err
	}
	w.high = max(hp.LSN(), w.low)
	return w.kl.spool.finish()
}

// emitKeyless writes a keyless table's snapshot: the rows read, at the
// snapshot's position, then the changes held since, committed after it,
// with the progress done; no flush in between, so one bronze commit holds
// all of it.
func (s *stream) emitKeyless(ctx context.Context, w *window) error {
	s.windows.remove(w) // the stream's changes of the table go to bronze from here
	defer w.kl.spool.remove()
	t := s.tables[w.table]
	if t == nil {
		return errTableGone
	}
	if w.gen != t.ctl.gen.Load() {
		return errSnapshotRestarted // it got a key: read again by it (rekey.go)
	}
	now := time.Now().UTC()
	var n int64
	batch := make([]*change.Change, 0, 1024)
	put := func(raw []sql.RawBytes) error {
		n++
		pos := change.Position{LSN: w.low, Seq: snapSeqBase + n}
		r := decodeSnapRow(w.t, raw, s.c.opts.MaxValueBytes)
		if r.err != nil {
			return s.c.sink.DeadLetter(ctx, change.DeadLetter{Table: w.table, Op: change.OpRead, Pos: pos, CommitTime: now,
				Raw: r.raw, Error: r.err.Error()})
		}
		batch = append(batch, &change.Change{Table: w.table, Op: change.OpRead, Values: r.values, Schema: w.t.schema, Pos: pos, CommitTime: now})
		if len(batch) == cap(batch) {
			if err := s.c.sink.WriteBatch(ctx, w.table, batch, nil); err != nil {
				return err
			}
			batch = batch[:0]
		}
		return nil
	}
	if err := w.kl.spool.replay(put); err != nil {
		return fmt.Errorf("table %s: %w", w.table, err)
	}
	st := t.snap
	st.Status, st.Rows, st.LastKey = snapDone, n, nil
	st.StartedAt, st.FinishedAt = now.Format(time.RFC3339), now.Format(time.RFC3339)
	if err := s.c.sink.WriteBatch(ctx, w.table, batch, map[string]string{PropSnapshot: st.Encode()}); err != nil {
		return err
	}
	t.snap = st
	for _, c := range w.kl.held {
		if c.Pos.LSN <= w.low {
			continue // in the read
		}
		if err := s.c.sink.Write(ctx, c); err != nil {
			return err
		}
	}
	w.kl.held = nil
	s.between(time.Time{})
	s.eng.FlushSoon()
	if s.eng.Full() {
		s.publish()
		return s.eng.Flush(ctx)
	}
	return nil
}

// rowSpool is a keyless table's snapshot rows on disk, a record of the
// spool per row: a 4-byte column count, then per column a 4-byte length
// (0xffffffff: NULL) and the column's text.
type rowSpool struct {
	sp  *txSpool
	buf []byte
}

func newRowSpool(dir string) (*rowSpool, error) {
	sp, err := newSpool(dir, "mysql-snapshot-*.spool")
	if err != nil {
		return nil, fmt.Errorf("spool the snapshot: %w", err)
	}
	return &rowSpool{sp: sp}, nil
}

func (r *rowSpool) append(raw []sql.RawBytes) error {
	b := binary.LittleEndian.AppendUint32(r.buf[:0], uint32(len(raw)))
	for _, v := range raw {
		l := uint32(len(v))
		if v == nil {
			l = 0xffffffff
		}
		b = binary.LittleEndian.AppendUint32(b, l)
		b = append(b, v...)
	}
	r.buf = b
	return r.sp.append(b)
}

func (r *rowSpool) finish() error { return r.sp.w.Flush() }

// replay hands each spooled row to fn, in the order read.
func (r *rowSpool) replay(fn func(raw []sql.RawBytes) error) error {
	return r.sp.each(func(rec []byte) error {
		bad := fault.With(fault.ErrCorruptState, fmt.Sprintf("the spooled snapshot %s is damaged", r.sp.f.Name()), nil)
		if len(rec) < 4 {
			return bad
		}
		row := make([]sql.RawBytes, binary.LittleEndian.Uint32(rec))
		rec = rec[4:]
		for i := range row {
			if len(rec) < 4 {
				return bad
			}
			l := binary.LittleEndian.Uint32(rec)
			rec = rec[4:]
			if l == 0xffffffff {
				continue
			}
			if uint32(len(rec)) < l {
				return bad
			}
			row[i], rec = rec[:l:l], rec[l:]
		}
		return fn(row)
	})
}

func (r *rowSpool) remove() { r.sp.remove() }
