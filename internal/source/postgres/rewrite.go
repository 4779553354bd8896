package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file detects table rewrites that emit no change events (issue 12):
// ALTER TABLE … ADD COLUMN with a volatile default, ALTER COLUMN … TYPE …
// USING, VACUUM FULL, CLUSTER. PostgreSQL writes the rewritten rows to a
// new file and decodes nothing for them, so the lake would keep the values
// from before. What every rewrite changes is the table's pg_class.relfilenode.
//
// So the capture records, in the bronze table's props (committed with the
// data, carried forward in every commit), the relfilenode the bronze rows
// stand for (PropFilenode). The publication poll, and each start, read the
// current relfilenode with pg_class.xmin (the transaction that last updated
// the table's pg_class row) and the WAL insert position B. The stream
// decides once it has decoded every transaction up to B (the change is
// then behind it):
//
//   - the same relfilenode: nothing happened;
//   - a new one whose xmin is the transaction of a TRUNCATE of the table the
//     stream decoded (PropTruncateXids keeps the recent ones, so a restart
//     knows those of the previous session): the truncate, which bronze
//     already holds, changed it; the new relfilenode is recorded;
//   - otherwise the table was rewritten (or truncated and then rewritten,
//     or some other DDL updated pg_class after a truncate): it is read
//     again. A VACUUM FULL or CLUSTER changes no value, so that re-read
//     costs a snapshot of the table and changes nothing.
//
// A re-read is a re-snapshot request of the capture's own: a bronze marker
// commit (its own commit, after everything decoded before it is committed)
// with the table's snapshot progress back to pending for a new request id,
// PropResnapshot = that id, and PropResnapshotReason saying why; the
// chunked snapshot then reads the table again while the stream runs, and
// silver applies it as it applies `tidemark resnapshot` (internal/silver,
// resnapshot.go). A snapshot of the table already running restarts from
// the first key (its chunks read before the rewrite are older than the
// marker). A kill at any point is safe: until the marker is committed,
// bronze still records the old relfilenode, and the next start finds the
// difference again.

// Bronze table props of rewrite detection.
const (
	// PropFilenode is the pg_class.relfilenode the table's bronze rows
	// stand for.
	PropFilenode = "tidemark.relfilenode"
	// PropTruncateXids lists (comma-separated, newest last) the
	// transaction ids of the last TRUNCATEs of the table the stream wrote.
	PropTruncateXids = "tidemark.truncate-xids"
)

// keptTruncateXids bounds PropTruncateXids.
const keptTruncateXids = 8

// filenodeObs is one reading of a table's relfilenode.
type filenodeObs struct {
	table    change.TableID
	filenode uint32
	xmin     uint32 // pg_class.xmin of the table's row
	lsn      uint64 // WAL insert position when read: the change, if any, is below it
	// The table's key as the catalog gives it (rekey.go): its primary key
	// and replica identity index columns, and pg_class.relreplident.
	pk, ri []string
	replid string
}

// readFilenodes reads the relfilenode of each table of ids (tables that no
// longer exist, and partitioned tables, which have no file, are left out).
func readFilenodes(ctx context.Context, conn *pgx.Conn, ids []change.TableID) ([]filenodeObs, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	schemas := make([]string, len(ids))
	names := make([]string, len(ids))
	for i, id := range ids {
		schemas[i], names[i] = id.Schema, id.Name
	}
	rows, err := conn.Query(ctx, `
		SELECT n.nspname, c.relname, c.relfilenode::bigint, c.xmin::text::bigint,
		       ((SELECT pg_current_wal_insert_lsn()) - '0/0'::pg_lsn)::text,
		       c.relreplident::text,
		       ARRAY(SELECT a.attname::text FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
		             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		             WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord),
		       ARRAY(SELECT a.attname::text FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
		             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		             WHERE i.indrelid = c.oid AND i.indisreplident ORDER BY k.ord)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN unnest($1::text[], $2::text[]) AS t(s, r) ON t.s = n.nspname AND t.r = c.relname
		WHERE c.relfilenode <> 0`, schemas, names)
	if err != nil {
		return nil, classify(fmt.Errorf("read the relfilenode of the captured tables: %w", err))
	}
	defer rows.Close()
	var out []filenodeObs
	for rows.Next() {
		var o filenodeObs
		var fn, xmin int64
		var lsn string
		if err := rows.Scan(&o.table.Schema, &o.table.Name, &fn, &xmin, &lsn, &o.replid, &o.pk, &o.ri); err != nil {
			return nil, classify(fmt.Errorf("read the relfilenode of the captured tables: %w", err))
		}
		l, err := strconv.ParseUint(lsn, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read the relfilenode of the captured tables: WAL position %q: %w", lsn, err)
		}
		o.filenode, o.xmin, o.lsn = uint32(fn), uint32(xmin), l
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("read the relfilenode of the captured tables: %w", err))
	}
	return out, nil
}

// parseFilenodeProps reads a table's rewrite-detection state from its
// bronze props (an absent or unreadable value reads as none: the current
// relfilenode is then recorded, and a rewrite before it goes unseen, as
// for a lake written before this detection existed).
func parseFilenodeProps(props map[string]string) (filenode uint32, truncs []uint32) {
	if v, err := strconv.ParseUint(props[PropFilenode], 10, 32); err == nil {
		filenode = uint32(v)
	}
	for _, f := range strings.Split(props[PropTruncateXids], ",") {
		if v, err := strconv.ParseUint(f, 10, 32); err == nil {
			truncs = append(truncs, uint32(v))
		}
	}
	return filenode, truncs
}

func formatXids(xids []uint32) string {
	s := make([]string, len(xids))
	for i, x := range xids {
		s[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(s, ",")
}

// noteTruncate records that the stream wrote a TRUNCATE of t in
// transaction xid (in the same bronze commit as its `t` row).
func (s *stream) noteTruncate(ctx context.Context, t *table, xid uint32) error {
	t.truncXids = append(t.truncXids, xid)
	if len(t.truncXids) > keptTruncateXids {
		t.truncXids = t.truncXids[len(t.truncXids)-keptTruncateXids:]
	}
	return s.c.w.WriteBatch(ctx, t.id, nil, map[string]string{PropTruncateXids: formatXids(t.truncXids)})
}

// offerFilenodes hands readings of the poll to the stream goroutine
// (non-blocking; a newer set replaces an unread one).
func (s *stream) offerFilenodes(obs []filenodeObs) {
	select {
	case s.filenodes <- obs:
	default:
		select {
		case <-s.filenodes:
		default:
		}
		select {
		case s.filenodes <- obs:
		default:
		}
	}
}

// addObservations queues readings that differ from what bronze records,
// for a decision once the stream has passed their position.
func (s *stream) addObservations(obs []filenodeObs) {
	for _, o := range obs {
		t := s.tables[o.table]
		if t != nil {
			s.noteKey(t, o.identKey(), o.lsn)
		}
		if t == nil || o.filenode == t.filenode {
			continue
		}
		if i := slices.IndexFunc(s.pendingFn, func(p filenodeObs) bool { return p.table == o.table }); i >= 0 {
			// The earlier reading's position is kept: a decision is then
			// not put off by a poll that keeps finding the same change.
			if s.pendingFn[i].filenode != o.filenode {
				s.pendingFn[i].filenode, s.pendingFn[i].xmin = o.filenode, o.xmin
				s.pendingFn[i].lsn = max(s.pendingFn[i].lsn, o.lsn)
			}
			continue
		}
		s.pendingFn = append(s.pendingFn, o)
	}
}

// checkRewrites decides the queued readings the stream has passed. Called
// by the stream goroutine between transactions.
func (s *stream) checkRewrites(ctx context.Context) error {
	var keep []filenodeObs
	for _, o := range s.pendingFn {
		if o.lsn > s.completedEnd {
			keep = append(keep, o)
			continue
		}
		t := s.tables[o.table]
		if t == nil || o.filenode == t.filenode {
			continue
		}
		if t.filenode == 0 || slices.Contains(t.truncXids, o.xmin) {
			// No earlier reading to compare with, or the table's TRUNCATE
			// (which bronze holds) changed it: record the new one.
			if t.filenode != 0 {
				s.c.log.Debug("relfilenode changed by a truncate", "table", t.id.String(), "relfilenode", o.filenode)
			}
			t.filenode = o.filenode
			if err := s.c.w.WriteBatch(ctx, t.id, nil, map[string]string{PropFilenode: strconv.FormatUint(uint64(o.filenode), 10)}); err != nil {
				return err
			}
			continue
		}
		if err := s.rewritten(ctx, t, o); err != nil {
			return err
		}
	}
	s.pendingFn = keep
	return nil
}

// rewritten starts reading t again after a rewrite the stream has no
// change events for (see the file comment).
func (s *stream) rewritten(ctx context.Context, t *table, o filenodeObs) error {
	id := rewriteRequestID(time.Now())
	reason := fmt.Sprintf("the table was rewritten at the source without change events (relfilenode %d → %d, seen at %s: "+
		"ALTER TABLE … TYPE … USING, ADD COLUMN with a volatile default, VACUUM FULL or CLUSTER)",
		t.filenode, o.filenode, FormatLSN(o.lsn))
	s.c.log.Warn("table rewritten without change events: re-reading it", "table", t.id.String(),
		"relfilenode_was", t.filenode, "relfilenode", o.filenode, "seen_at", FormatLSN(o.lsn), "request", id)
	t.filenode = o.filenode
	return s.reread(ctx, t, id, reason, map[string]string{PropFilenode: strconv.FormatUint(uint64(o.filenode), 10)})
}

// reread requests an online re-read of t under request id, for reason
// (shown by status): a rewrite (above), or partitions attached or detached
// (partition.go). Stream goroutine.
//
// Everything decoded before it is committed first, so the marker (t's
// snapshot back to pending under the request, reason and props) is a
// commit of its own: silver folds what bronze appends after it (the
// re-read's rows and the changes streamed meanwhile), and nothing after
// the marker may share its commit. A snapshot of t still running (its
// first, or an earlier re-read) drops the chunks it has not written and
// starts again from t's first key (the generation moved:
// snapshotter.table); one that has finished is queued again.
func (s *stream) reread(ctx context.Context, t *table, id, reason string, props map[string]string) error {
	if err := s.engine.Sync(ctx); err != nil {
		return err
	}
	// Everything before the marker is committed and acknowledged, the
	// marker not yet: the next start must find the cause again (armed by
	// the rewrite tests).
	failpoint.Inject("rewrite-before-marker")
	st := pipeline.SnapshotState{Status: pipeline.SnapshotPending, Request: id, Estimate: t.snapshot.Estimate}
	t.gen.Add(1)
	t.snapshot = st
	if props == nil {
		props = map[string]string{}
	}
	props[pipeline.PropSnapshot] = st.Encode()
	props[pipeline.PropResnapshot] = id
	props[pipeline.PropResnapshotReason] = reason
	if err := s.c.w.WriteBatch(ctx, t.id, nil, props); err != nil {
		return err
	}
	if err := s.engine.Sync(ctx); err != nil {
		return err
	}
	_, err := s.snap.sched.Admit(ctx, t.id, &t.snapshot, t)
	return err
}

// rewriteRequestID names the re-snapshot request of a detected rewrite
// (the shape of `tidemark resnapshot`'s ids, marked as tidemark's own).
func rewriteRequestID(now time.Time) string {
	return now.UTC().Format(requestTimeLayout) + "-rewrite-" + requestTag()
}

// partitionRequestID names the re-read a partition change starts. The
// format is persisted in the lake (existing lakes resume on it): keep it.
func partitionRequestID(now time.Time) string {
	return "reread-" + now.UTC().Format(requestTimeLayout) + "-" + requestTag()
}

// requestTimeLayout is the time stamp in re-read request ids.
const requestTimeLayout = "20060102T150405Z"

// requestTag is the random part of a re-read request id: 6 hex digits.
func requestTag() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startFilenodes compares, at start, the relfilenode bronze records for
// each table with the table's current one: a difference is queued like a
// poll's reading (decided once the stream has passed the WAL position it
// was read at, so a TRUNCATE replayed from before it is recognised). A
// table with none recorded (new, or from a lake written before this
// detection) gets its current one recorded.
func (c *Capture) startFilenodes(ctx context.Context, meta *pgx.Conn, s *stream) error {
	ids := make([]change.TableID, 0, len(s.tables))
	for id := range s.tables {
		ids = append(ids, id)
	}
	obs, err := readFilenodes(ctx, meta, ids)
	if err != nil {
		return err
	}
	for _, o := range obs {
		t := s.tables[o.table]
		if t.filenode == 0 {
			t.filenode = o.filenode
			if err := c.w.WriteBatch(ctx, t.id, nil, map[string]string{PropFilenode: strconv.FormatUint(uint64(o.filenode), 10)}); err != nil {
				return err
			}
		}
	}
	s.addObservations(obs)
	return nil
}
