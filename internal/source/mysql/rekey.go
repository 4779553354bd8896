package mysql

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file follows a captured table's primary key when a statement of
// the binlog changes it (issue 13), as the PostgreSQL source does
// (internal/source/postgres/rekey.go): ALTER TABLE t DROP PRIMARY KEY,
// ADD PRIMARY KEY (a, b), or a keyless table (captured into bronze only)
// that gets one.
//
// Rows of the binlog after the statement are keyed by the new key, and a
// replica keyed by the old one cannot be re-keyed in place. So, at the
// statement's binlog position, in stream order: everything read before it
// is committed; then one marker commit of the table's bronze table
// requests a re-read (tidemark.snapshot back to pending under a new
// request id, tidemark.resnapshot and its reason) and records the new key
// (pipeline.PropKey); then the table is read again in chunks on the new
// key while the stream goes on. Silver, seeing bronze keyed otherwise than
// its table, builds the table anew on the new key from what bronze holds
// after the marker, and swaps it in once the re-read is complete
// (internal/silver, rekey.go); a keyless table's first silver table is
// built from the marker on the same way. Nothing here is MySQL-specific on
// silver's side.
//
// The new key is the one the server gives the table now, when it has the
// columns the statement names (it was read after the statement; a session
// that resumes behind later key changes follows each at its own statement
// and skips those the server no longer agrees with). A primary key dropped
// with nothing replacing it leaves the table keyed by its old key, as a
// PostgreSQL table whose key was dropped (its row events carry whole rows,
// so the old key's columns still identify them).
//
// A snapshot of the table still running (its first, or an earlier
// re-read) is restarted: the generation moves (tableCtl), its chunks of
// the old key are not written, and it reads again from the first key of
// the new one.
//
// A kill at any point is safe: until the marker is committed, bronze
// records the old key and the checkpoint is before the statement, so the
// next session opens the table by the old key (lakeKey) and meets the
// statement again; after it, bronze records the new key, the next session
// opens the table by it, and the statement read again changes nothing.

// keyChanged follows a primary-key change of captured table t by ALTER
// TABLE statement d (see the file comment). Stream goroutine, between
// transactions.
func (s *stream) keyChanged(ctx context.Context, t *table, d DDL) error {
	if d.KeyDropped && len(d.NewKey) == 0 {
		if !t.keyless {
			s.c.log.Warn("the primary key of a captured table was dropped with no key replacing it: the table stays keyed by its old key",
				"warning", "mysql_key_dropped", "table", t.id.String(), "key", strings.Join(t.schema.Key, ", "))
		}
		return nil
	}
	nt, err := s.c.describe(ctx, t.id)
	if s.c.refusable(t.id, err) {
		s.c.log.Warn("the primary key of a captured table changed, but the table cannot be described now: it keeps its key",
			"table", t.id.String(), "reason", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	key := nt.schema.Key
	switch {
	case len(key) == 0 || slices.Equal(key, t.schema.Key):
		return nil // no key now, or the key already (a statement read again)
	case !sameColumns(key, d.NewKey):
		// The key changed again since: followed at the statement that
		// gave it.
		s.c.log.Info("a primary key change of a captured table is superseded by a later one", "table", t.id.String(),
			"statement_key", strings.Join(d.NewKey, ", "), "key_now", strings.Join(key, ", "))
		return nil
	}
	return s.rekey(ctx, t, nt)
}

// rekey switches t to nt's key at the current binlog position: the
// commit of everything before, the marker, the re-read (file comment).
func (s *stream) rekey(ctx context.Context, t, nt *table) error {
	was, key := t.schema.Key, nt.schema.Key
	at := FormatPosition(s.c.basename, s.readPos)
	id := rekeyRequestID(time.Now())
	var reason string
	if t.keyless {
		reason = fmt.Sprintf("the table got a primary key (%s) (at %s): its silver table is built from a re-read on that key",
			strings.Join(key, ", "), at)
		s.c.log.Warn("keyless table got a primary key: re-reading it on the key and building its silver table", "table", t.id.String(),
			"key", strings.Join(key, ", "), "seen_at", at, "request", id)
	} else {
		reason = fmt.Sprintf("the table's primary key changed from (%s) to (%s) (at %s): silver is rebuilt on the new key",
			strings.Join(was, ", "), strings.Join(key, ", "), at)
		s.c.log.Warn("table's key changed: re-reading it and rebuilding silver on the new key", "table", t.id.String(),
			"key_was", strings.Join(was, ", "), "key", strings.Join(key, ", "), "seen_at", at, "request", id)
	}
	s.publish()
	if err := s.eng.Sync(ctx); err != nil {
		return err
	}
	// Everything before the statement is committed, the marker not yet:
	// the next start must find the change again (armed by the tests).
	failpoint.Inject("mysql-rekey-before-marker")
	t.ctl.ids.stamp(nt.schema)
	s.c.withDefaults(t.schema, nt)
	if missing := slices.ContainsFunc(key, func(k string) bool {
		return !slices.ContainsFunc(t.schema.Fields, func(f change.Field) bool { return f.Name == k })
	}); missing {
		// A key column the same statement added: bronze has it before
		// its key names it (still keyed by the old key).
		if _, err := s.c.sink.OpenTable(ctx, t.id, &change.Schema{Key: was, Fields: nt.schema.Fields}); err != nil {
			return err
		}
	}
	js, err := json.Marshal(key)
	if err != nil {
		return err
	}
	st := pipeline.SnapshotState{Status: snapPending, Request: id, Estimate: nt.est}
	nt.snap, nt.ctl, nt.after = st, t.ctl, t.after
	// The table value the re-read reads with before the generation moves
	// (snapshotter.table loads them in the other order).
	t.ctl.snap.Store(nt)
	t.ctl.gen.Add(1)
	if err := s.c.sink.WriteBatch(ctx, t.id, nil, map[string]string{
		pipeline.PropKey:              string(js),
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
	// The marker is committed: bronze is keyed by the new key from it on
	// (OpenTable records it as the table's property).
	if _, err := s.c.sink.OpenTable(ctx, t.id, nt.schema); err != nil {
		return err
	}
	s.tables[t.id] = nt
	s.stale[t.id] = true // the next row event's layout is checked again
	if t.keyless {
		s.c.noteKeyless(nt)
		if err := s.c.recordRefused(ctx); err != nil {
			return err
		}
	}
	_, err = s.snap.sched.Admit(ctx, t.id, &nt.snap, nt)
	return err
}

// rekeyRequestID names the re-read a key change starts (the shape of the
// PostgreSQL source's).
func rekeyRequestID(now time.Time) string {
	return now.UTC().Format("20060102T150405Z") + "-rekey-" + requestTag()
}

// requestTag is the random part of a re-read request id: 6 hex digits.
func requestTag() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sameColumns reports whether a and b name the same columns, in any order
// (MySQL column names are case-insensitive).
func sameColumns(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	norm := func(x []string) []string {
		out := make([]string, len(x))
		for i, n := range x {
			out[i] = strings.ToLower(n)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(norm(a), norm(b))
}

// keyRecorder is the Sink side of key changes: bronze.Writer tells the
// key a table's bronze rows are keyed by. Optional: a Sink without it (a
// test's) is opened with the server's key.
type keyRecorder interface {
	// KeyRecorded returns the key the bronze table of id records from
	// its latest commit on ([] for a table captured keyless); false if
	// there is no bronze table of id, or it records none.
	KeyRecorded(ctx context.Context, id change.TableID) ([]string, bool, error)
}

// lakeKey returns t keyed by the key its bronze table records, when the
// server gives it another one now and the recorded key's columns are all
// there: a key change the stream has not reached yet (its statement is
// after the checkpoint; followed when read), or a primary key dropped
// with none replacing it (the old key is kept). Otherwise t as it is (a
// key column gone: bronze names the difference).
func (c *Capture) lakeKey(ctx context.Context, t *table) (*table, error) {
	kr, ok := c.sink.(keyRecorder)
	if !ok {
		return t, nil
	}
	key, ok, err := kr.KeyRecorded(ctx, t.id)
	if err != nil || !ok || slices.Equal(key, t.schema.Key) {
		return t, err
	}
	kt, err := c.tableOf(nil, t.id, t.cols, key)
	if err != nil {
		return t, nil
	}
	kt.est = t.est
	c.log.Info("table's key differs from the one its bronze table records: kept on the recorded key until the statement that changed it is read",
		"table", t.id.String(), "key_recorded", strings.Join(key, ", "), "key", strings.Join(t.schema.Key, ", "))
	return kt, nil
}
