package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file follows a captured table's key when it changes (issue 12): a
// primary key added to a table keyed on its whole row (REPLICA IDENTITY
// FULL), or a primary key (or replica identity index) replaced by another,
// as in ALTER TABLE t DROP CONSTRAINT t_pkey, ADD PRIMARY KEY (a, b).
//
// Bronze records the key its rows are keyed by (tidemark.key). Changes
// decoded after the DDL identify rows by the new key (a delete's old row
// carries the new replica identity's columns), so they cannot be merged
// into a replica keyed by the old one, and the old replica cannot be
// re-keyed in place. So the table is read again, as after a rewrite
// (rewrite.go), and its key switched at the re-read's marker: the marker
// commit carries the new key (pipeline.PropKey) beside the re-read
// request, and silver, seeing bronze keyed otherwise than its table,
// builds the table anew on the new key from the re-read and the changes
// after the marker, and swaps it in once complete (internal/silver,
// rekey.go). Rows before the marker stay keyed by the old key; a replay of
// bronze takes the key of each range from the marker that starts it.
//
// The change is seen two ways:
//
//   - in the stream, a Relation message whose key columns (pgoutput flags
//     those of the replica identity) are not the table's key: followed
//     right there, before the first change by the new key is written, so
//     every row before the marker is keyed by the old key
//     (rekeyAtRelation);
//   - at the publication poll and each start, the key the catalog gives
//     now (primary key, or replica identity index) is compared with the
//     key bronze records, and decided like a rewrite once the stream has
//     decoded every transaction up to where it was read. This is how a
//     REPLICA IDENTITY FULL table's change is seen (its Relation messages
//     flag every column), and one whose table has no change after it.
//
// Then the table is described again (chooseKey: the new key must be fit to
// key it), and the marker committed. A table with a declared merge key
// keeps it (the config decides its key), and a table whose key was
// dropped (no primary key any more) keeps the old one: neither is
// re-keyed. A kill at any point is safe: until the marker is committed,
// bronze records the old key, the next start opens the table by it and
// finds the difference again; after it, bronze records the new key.

// keyObs is a key a table was seen to have that differs from the one it
// is keyed by, and the WAL position it was seen at (the change is below it).
type keyObs struct {
	table change.TableID
	key   []string
	lsn   uint64
}

// identKey is the key the catalog reading o gives the table (as tableKey
// does: the replica identity index when set, else the primary key), nil
// when none.
func (o filenodeObs) identKey() []string {
	switch {
	case o.replid == "n":
		return nil
	case o.replid == "i" && len(o.ri) > 0:
		return o.ri
	}
	return o.pk
}

// noteKey queues a key seen for t, when it differs from t's and the
// table's key may follow it (no declared merge key).
func (s *stream) noteKey(t *table, key []string, lsn uint64) {
	if len(key) == 0 || len(s.c.opts.MergeKeys[t.id]) > 0 || slices.Equal(key, t.info.Load().Relation.KeyNames) {
		return
	}
	if d, ok := s.declinedKeys[t.id]; ok && sameColumns(d, key) {
		return // found unfit already (rekeyTo)
	}
	if i := slices.IndexFunc(s.pendingKey, func(p keyObs) bool { return p.table == t.id }); i >= 0 {
		// The earlier reading's position is kept while the key is the
		// same: a poll that keeps finding it does not put it off.
		if !slices.Equal(s.pendingKey[i].key, key) {
			s.pendingKey[i].key = key
			s.pendingKey[i].lsn = max(s.pendingKey[i].lsn, lsn)
		}
		return
	}
	s.pendingKey = append(s.pendingKey, keyObs{table: t.id, key: key, lsn: lsn})
}

// checkKeys decides the queued key readings the stream has passed.
// Called by the stream goroutine between transactions.
func (s *stream) checkKeys(ctx context.Context) error {
	var due, keep []keyObs
	for _, o := range s.pendingKey {
		if o.lsn > s.completedEnd {
			keep = append(keep, o)
		} else if s.tables[o.table] != nil {
			due = append(due, o)
		}
	}
	s.pendingKey = keep
	if len(due) == 0 {
		return nil
	}
	meta, err := s.c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer meta.Close(context.Background())
	for _, o := range due {
		if _, err := s.rekeyTo(ctx, meta, s.tables[o.table], o.key, nil, o.lsn); err != nil {
			return err
		}
	}
	return nil
}

// sameColumns reports whether a and b name the same columns, in any order.
func sameColumns(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// rekeyTo re-keys t to the key the catalog gives it now, if that is not
// t's key and t may follow it; with flagged (the key columns of the
// Relation message being applied), only when the catalog's key has the
// same columns, and done reports whether t was re-keyed (or keeps its
// key for good: the new one, seen as seen, cannot key it). lsn is where
// the change was seen.
func (s *stream) rekeyTo(ctx context.Context, meta *pgx.Conn, t *table, seen, flagged []string, lsn uint64) (done bool, err error) {
	info, err := s.c.describe(ctx, meta, t.id)
	if err != nil {
		if isRefusal(err) {
			// The table's new key cannot key it (chooseKey says why): it
			// keeps the old one, as it keeps its changes; said once.
			s.c.log.Warn("table's key changed to one that cannot key it: kept on its old key", "table", t.id.String(), "reason", err.Error())
			s.declinedKeys[t.id] = slices.Clone(seen)
			return true, nil
		}
		return false, err
	}
	key := info.Relation.KeyNames
	if !info.IdentKey || slices.Equal(key, t.info.Load().Relation.KeyNames) {
		return false, nil // changed back, or no key any more
	}
	if flagged != nil && !sameColumns(key, flagged) {
		return false, nil // the catalog moved on since: decided later
	}
	return true, s.rekey(ctx, t, info, lsn)
}

// rekeyAtRelation follows a key change the stream meets at a Relation
// message (flagged: its key columns) right there, before the first change
// by the new key is written: the marker is then a commit of its own in the
// middle of the transaction (bronze may commit a transaction in parts; the
// per-table cursor makes the replay of a partly committed one safe), and
// every row before it is keyed by the old key. When the catalog no longer
// agrees, the change is decided once the transaction is decoded.
func (s *stream) rekeyAtRelation(ctx context.Context, t *table, flagged []string) error {
	lsn := max(s.tx.commitLSN, s.completedEnd)
	if d, ok := s.declinedKeys[t.id]; ok && sameColumns(d, flagged) {
		return nil
	}
	meta, err := s.c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer meta.Close(context.Background())
	done, err := s.rekeyTo(ctx, meta, t, flagged, flagged, lsn)
	if err == nil && !done {
		s.noteKey(t, flagged, lsn)
	}
	return err
}

// rekey switches t to the key info gives (see the file comment): one
// marker commit that requests a re-read and records the new key; the
// table's relations, snapshot and lake schema take the new key from it.
func (s *stream) rekey(ctx context.Context, t *table, info *TableInfo, seenAt uint64) error {
	was := t.info.Load().Relation.KeyNames
	key := info.Relation.KeyNames
	js, err := json.Marshal(key)
	if err != nil {
		return err
	}
	id := rekeyRequestID(time.Now())
	reason := fmt.Sprintf("the table's primary key changed from (%s) to (%s) (seen at %s): silver is rebuilt on the new key",
		strings.Join(was, ", "), strings.Join(key, ", "), FormatLSN(seenAt))
	s.c.log.Warn("table's key changed: re-reading it and rebuilding silver on the new key", "table", t.id.String(),
		"key_was", strings.Join(was, ", "), "key", strings.Join(key, ", "), "seen_at", FormatLSN(seenAt), "request", id)
	// The new key before the generation moves (reread): a snapshot worker
	// that restarts reads the key after the generation (snapshotKey).
	ni := *info
	ni.Estimate = t.info.Load().Estimate
	t.info.Store(&ni)
	if err := s.reread(ctx, t, id, reason, map[string]string{pipeline.PropKey: string(js)}); err != nil {
		return err
	}
	// The marker is committed: bronze is keyed by the new key from it on.
	sch := &change.Schema{Key: key, Fields: t.schema.Fields}
	if _, err := s.c.w.OpenTable(ctx, t.id, sch); err != nil {
		return err
	}
	t.schema = sch
	for _, rel := range s.rels {
		if rel != nil && rel.Table == t.id {
			rel.setKeys(key)
			rel.schema = sch
		}
	}
	return nil
}

// rekeyRequestID names the re-read a key change starts (the shape of the
// other re-read ids).
func rekeyRequestID(now time.Time) string {
	return now.UTC().Format(requestTimeLayout) + "-rekey-" + requestTag()
}

// keyReader is the Sink side of key changes: bronze.Writer tells the key
// a table's bronze rows are keyed by. Optional: a Sink without it (a
// test's) is opened with the catalog's key.
type keyReader interface {
	// TableKey returns the key the table's lake rows are keyed by from
	// its latest commit on; false if the table has none yet.
	TableKey(ctx context.Context, id change.TableID) ([]string, bool, error)
}

// lakeKey keys rel by the key the lake holds the table by, when the
// catalog now gives another one that the table may be re-keyed to
// (identKey: a primary key or replica identity index, no declared merge
// key): its rows are written by the old key until the change's marker
// (the start's readings find the difference). Otherwise rel keeps the
// catalog's key (and the lake refuses it if it differs).
func (c *Capture) lakeKey(ctx context.Context, id change.TableID, info *TableInfo) error {
	kr, ok := c.w.(keyReader)
	if !ok || !info.IdentKey {
		return nil
	}
	key, ok, err := kr.TableKey(ctx, id)
	if err != nil || !ok || slices.Equal(key, info.Relation.KeyNames) {
		return err
	}
	for _, k := range key {
		if info.Relation.Index(k) < 0 {
			return nil // a column of the old key is gone: the lake names the change
		}
	}
	c.log.Info("table's key changed since its last commit: kept on the old key until the change's marker",
		"table", id.String(), "key_was", strings.Join(key, ", "), "key", strings.Join(info.Relation.KeyNames, ", "))
	info.Relation.setKeys(key)
	return nil
}
