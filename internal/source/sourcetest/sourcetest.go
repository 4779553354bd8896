// Package sourcetest is the conformance suite every source runs against a
// real server (like iceberg-go's catalogtest.RunCatalogTests): a source's
// test brings a Harness (its server, its SQL, its capture) and calls Run.
//
// The suite owns the sink: a real bronze.Writer on a warehouse of the
// test's, wrapped in a recorder that notes, in the order the source calls
// them, every change written, every flush with its checkpoint and every
// flush the writer reports durable. It checks what a user relies on:
//
//   - Snapshot: the rows a table holds at start arrive as snapshot reads,
//     each once, and the table's snapshot state ends done;
//   - Stream: inserts, updates and deletes arrive in commit order, with
//     positions that grow (equal commit position within a transaction,
//     growing seq), and bronze replayed by (cdc_source_lsn, cdc_seq)
//     equals the source;
//   - TransactionBoundaries: a checkpoint handed to a flush covers only
//     transactions whose changes were all written before it;
//   - Resume: after a clean stop, and after a session whose flush failed
//     (a crash: nothing buffered reached the lake), the next session
//     carries on from the checkpoint: nothing lost, no change twice in
//     bronze;
//   - LostPosition: a resume position the server no longer has is the
//     source's named fatal error, never a silent jump;
//   - Truncate: TRUNCATE arrives in stream order and empties the table;
//   - AddColumn: ALTER TABLE ADD COLUMN in stream order, later rows carry
//     the new column, in the change and in bronze;
//   - RenameAndDropColumn: ALTER TABLE RENAME COLUMN renames the lake
//     column (rows written before it read under the new name: nothing
//     NULL), and DROP COLUMN keeps the column in bronze, NULL in later
//     rows;
//   - NewTable: a table created while the capture runs is picked up, its
//     snapshot runs (pipeline.SnapshotScheduler) and ends done, and its
//     rows, read or streamed, replay to the source's.
//
// The SQL is the portable subset both dialects take (CREATE TABLE t (id
// integer PRIMARY KEY, v varchar(100)), INSERT, UPDATE, DELETE, TRUNCATE
// TABLE, ALTER TABLE ADD / RENAME / DROP COLUMN); the Harness runs it.
//
// RunProcess is the suite's process-level part (process.go): a source's
// test brings a ProcessHarness (its server, its SQL, its positions, its
// every-type table) and the suite drives the real tidemark binary against
// it (testenv.Runner) under a concurrent writer, with SIGKILL during the
// snapshot and the stream, a big transaction, TRUNCATE and ADD COLUMN, and
// checks silver the way a user would: tidemark verify equal for every
// table, and a PyIceberg read of silver equal to the source.
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Harness is one source's side of the suite.
type Harness interface {
	// NewDatabase creates an empty database (PostgreSQL: a database;
	// MySQL: a schema) on the source's server for one test, removed when
	// the test ends.
	NewDatabase(t *testing.T) Database
}

// Database is a database of the source's server that one test captures.
type Database interface {
	// Exec runs the statements in one transaction of the source, failing
	// t on error. A DDL statement is passed alone.
	Exec(t *testing.T, stmts ...string)
	// Table names table name of this database as the source does.
	Table(name string) change.TableID
	// Open returns a capture session of this database writing into sink,
	// with snapshots on, a short commit interval, and the same identity
	// (slot, server id) for every session of the test, logging to log.
	Open(t *testing.T, sink pipeline.Sink, log *slog.Logger) Capture
	// LosePosition makes the server drop what the last session's
	// checkpoint resumes from (PostgreSQL: drop the slot; MySQL: purge the
	// binary logs). Called with no session running, after changes past
	// the checkpoint.
	LosePosition(t *testing.T)
	// LostPosition is the named error a session must end with after
	// LosePosition (fault.ErrSlotLost, fault.ErrBinlogPurged).
	LostPosition() *fault.Error
}

// Capture is a source's capture session (postgres.Capture, mysql.Capture).
type Capture interface {
	// Run captures until ctx is done (nil) or an error.
	Run(ctx context.Context) error
	// Close releases what the session holds.
	Close()
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("Snapshot", func(t *testing.T) { testSnapshotAndStream(t, h) })
	t.Run("Resume", func(t *testing.T) { testResume(t, h) })
	t.Run("LostPosition", func(t *testing.T) { testLostPosition(t, h) })
	t.Run("Truncate", func(t *testing.T) { testTruncate(t, h) })
	t.Run("AddColumn", func(t *testing.T) { testAddColumn(t, h) })
	t.Run("RenameAndDropColumn", func(t *testing.T) { testRenameAndDropColumn(t, h) })
	t.Run("NewTable", func(t *testing.T) { testNewTable(t, h) })
}

// setUp creates table t (id integer PRIMARY KEY, v varchar(100)) in a new
// database, runs rows (one transaction), starts a session and waits until
// t's snapshot is done, so that what the test writes next comes through
// the stream.
func setUp(t *testing.T, h Harness, rows ...string) (Database, *testLake, *session, change.TableID) {
	t.Helper()
	db := h.NewDatabase(t)
	db.Exec(t, "CREATE TABLE t (id integer PRIMARY KEY, v varchar(100))")
	if len(rows) > 0 {
		db.Exec(t, rows...)
	}
	l := newLake(t)
	s := l.start(t, db)
	tid := db.Table("t")
	s.waitSnapshotDone(t, tid)
	return db, l, s, tid
}

// testSnapshotAndStream covers Snapshot, Stream and TransactionBoundaries.
func testSnapshotAndStream(t *testing.T, h Harness) {
	var rows []string
	m := model{}
	for i := 1; i <= 150; i++ {
		rows = append(rows, fmt.Sprintf("(%d, 'v%d')", i, i))
		m[fmt.Sprint(i)] = fmt.Sprintf("v%d", i)
	}
	db, l, s, tid := setUp(t, h, "INSERT INTO t VALUES "+strings.Join(rows, ", "))

	db.Exec(t, "INSERT INTO t VALUES (151, 'a')", "INSERT INTO t VALUES (152, 'b')")
	db.Exec(t, "UPDATE t SET v = 'u' WHERE id = 1")
	db.Exec(t, "DELETE FROM t WHERE id = 2")
	db.Exec(t, "INSERT INTO t VALUES (153, 'c')", "UPDATE t SET v = 'cc' WHERE id = 153", "DELETE FROM t WHERE id = 153",
		"INSERT INTO t VALUES (154, 'd')")
	m["151"], m["152"], m["1"], m["154"] = "a", "b", "u", "d"
	delete(m, "2")
	last := s.waitChange(t, tid, change.OpInsert, "154")
	s.waitDurable(t, last.Pos.LSN)
	s.stop(t)

	// Snapshot: every row once, as a read, and the state done.
	reads := map[string]int{}
	for _, c := range s.rec.changes(tid) {
		if c.Op == change.OpRead {
			reads[c.Key]++
		}
	}
	if len(reads) != 150 {
		t.Errorf("snapshot read %d distinct rows, want 150", len(reads))
	}
	for k, n := range reads {
		if n != 1 {
			t.Errorf("snapshot read row id=%s %d times", k, n)
		}
	}
	// Stream: commit order, transactions whole, positions growing.
	want := []string{"c 151", "c 152", "u 1", "d 2", "c 153", "u 153", "d 153", "c 154"}
	got := streamed(s.rec.changes(tid))
	var gotOps []string
	for _, c := range got {
		gotOps = append(gotOps, c.Op.String()+" "+c.Key)
	}
	if strings.Join(gotOps, ", ") != strings.Join(want, ", ") {
		t.Errorf("streamed changes\n got %v\nwant %v", gotOps, want)
	}
	if len(got) == len(want) {
		tx := [][]int{{0, 1}, {2}, {3}, {4, 5, 6, 7}}
		for _, g := range tx {
			for _, i := range g[1:] {
				if got[i].Pos.LSN != got[g[0]].Pos.LSN {
					t.Errorf("%s and %s of one transaction have commit positions %d and %d", gotOps[g[0]], gotOps[i], got[g[0]].Pos.LSN, got[i].Pos.LSN)
				}
			}
		}
	}
	checkOrder(t, s.rec)
	checkBoundaries(t, s.rec)
	l.checkBronze(t, tid, m)
}

// testResume: a clean stop, then a session whose flush fails (a crash
// before the commit), then one that completes.
func testResume(t *testing.T, h Harness) {
	db, l, s, tid := setUp(t, h)
	m := model{}
	db.Exec(t, "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')", "INSERT INTO t VALUES (3, 'c')")
	m["1"], m["2"], m["3"] = "a", "b", "c"
	s.waitDurable(t, s.waitChange(t, tid, change.OpInsert, "3").Pos.LSN)
	s.stop(t)

	// Changes while no session runs.
	db.Exec(t, "INSERT INTO t VALUES (4, 'd')", "UPDATE t SET v = 'aa' WHERE id = 1")
	db.Exec(t, "DELETE FROM t WHERE id = 3")
	m["4"], m["1"] = "d", "aa"
	delete(m, "3")

	// A session that crashes: its flushes fail, so what it buffered never
	// reaches the lake and nothing past the first session is acknowledged.
	s = l.start(t, db)
	s.rec.failFlushes(errCrash)
	db.Exec(t, "INSERT INTO t VALUES (5, 'e')", "INSERT INTO t VALUES (6, 'f')")
	m["5"], m["6"] = "e", "f"
	if err := s.wait(t); !errors.Is(err, errCrash) {
		t.Fatalf("session with failing flushes ended with %v, want the flush's error", err)
	}
	if n := len(s.rec.durables()); n != 0 {
		t.Fatalf("a session whose every flush failed reported %d flushes durable", n)
	}

	db.Exec(t, "UPDATE t SET v = 'ee' WHERE id = 5")
	m["5"] = "ee"
	s = l.start(t, db)
	db.Exec(t, "INSERT INTO t VALUES (7, 'g')")
	m["7"] = "g"
	s.waitDurable(t, s.waitChange(t, tid, change.OpInsert, "7").Pos.LSN)
	s.stop(t)
	checkOrder(t, s.rec)
	checkBoundaries(t, s.rec)
	l.checkBronze(t, tid, m)
}

var errCrash = errors.New("sourcetest: flush failed (a simulated crash)")

func testLostPosition(t *testing.T, h Harness) {
	db, l, s, tid := setUp(t, h)
	db.Exec(t, "INSERT INTO t VALUES (1, 'a')")
	s.waitDurable(t, s.waitChange(t, tid, change.OpInsert, "1").Pos.LSN)
	s.stop(t)
	db.Exec(t, "INSERT INTO t VALUES (2, 'b')")
	db.LosePosition(t)
	s = l.start(t, db)
	err := s.wait(t)
	want := db.LostPosition()
	if !errors.Is(err, want) || fault.ExitCode(err) != fault.ExitFatal {
		t.Fatalf("resume from a lost position: %v, want [%s] (fatal)", err, want.Code)
	}
	for _, c := range s.rec.changes(tid) {
		t.Errorf("a session without its position wrote %s %s", c.Op, c.Key)
	}
}

func testTruncate(t *testing.T, h Harness) {
	db, l, s, tid := setUp(t, h, "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')")
	db.Exec(t, "INSERT INTO t VALUES (3, 'c')")
	db.Exec(t, "TRUNCATE TABLE t")
	db.Exec(t, "INSERT INTO t VALUES (4, 'd')")
	s.waitDurable(t, s.waitChange(t, tid, change.OpInsert, "4").Pos.LSN)
	s.stop(t)
	var ops []string
	for _, c := range streamed(s.rec.changes(tid)) {
		ops = append(ops, strings.TrimSpace(c.Op.String()+" "+c.Key))
	}
	if want := "c 3, t, c 4"; strings.Join(ops, ", ") != want {
		t.Errorf("streamed %v, want %s", ops, want)
	}
	checkOrder(t, s.rec)
	l.checkBronze(t, tid, model{"4": "d"})
}

func testAddColumn(t *testing.T, h Harness) {
	db, l, s, tid := setUp(t, h)
	db.Exec(t, "INSERT INTO t VALUES (1, 'a')")
	db.Exec(t, "ALTER TABLE t ADD COLUMN w integer")
	db.Exec(t, "INSERT INTO t VALUES (2, 'b', 7)")
	db.Exec(t, "UPDATE t SET w = 8 WHERE id = 1")
	c := s.waitChange(t, tid, change.OpUpdate, "1")
	s.waitDurable(t, c.Pos.LSN)
	s.stop(t)
	for _, c := range streamed(s.rec.changes(tid)) {
		w, ok := c.Values["w"]
		switch c.Key {
		case "1":
			if c.Op == change.OpInsert && ok && w != "<nil>" {
				t.Errorf("insert before ADD COLUMN carries w = %s", w)
			}
			if c.Op == change.OpUpdate && w != "8" {
				t.Errorf("update after ADD COLUMN: w = %q (present %v), want 8", w, ok)
			}
		case "2":
			if w != "7" {
				t.Errorf("insert after ADD COLUMN: w = %q (present %v), want 7", w, ok)
			}
		}
	}
	checkOrder(t, s.rec)
	l.checkBronzeColumn(t, tid, "w", map[string]string{"1": "8", "2": "7"})
}

func testRenameAndDropColumn(t *testing.T, h Harness) {
	db, l, s, tid := setUp(t, h, "INSERT INTO t VALUES (1, 'a')")
	db.Exec(t, "ALTER TABLE t ADD COLUMN w integer")
	db.Exec(t, "INSERT INTO t VALUES (2, 'b', 7)")
	db.Exec(t, "ALTER TABLE t RENAME COLUMN v TO v2")
	db.Exec(t, "INSERT INTO t VALUES (3, 'c', 8)")
	db.Exec(t, "ALTER TABLE t DROP COLUMN w")
	db.Exec(t, "INSERT INTO t VALUES (4, 'd')")
	db.Exec(t, "UPDATE t SET v2 = 'a2' WHERE id = 1")
	c := s.waitChange(t, tid, change.OpUpdate, "1")
	s.waitDurable(t, c.Pos.LSN)
	s.stop(t)
	for _, c := range streamed(s.rec.changes(tid)) {
		if w, ok := c.Values["w"]; ok && (c.Key == "4" || c.Op == change.OpUpdate) && w != "<nil>" {
			t.Errorf("%s %s after DROP COLUMN carries w = %s", c.Op, c.Key, w)
		}
	}
	checkOrder(t, s.rec)
	// Renamed, not added: the rows written under v read under v2.
	l.checkBronzeColumn(t, tid, "v2", map[string]string{"1": "a2", "2": "b", "3": "c", "4": "d"})
	// Dropped at the source, kept in bronze: NULL from the drop on.
	l.checkBronzeColumn(t, tid, "w", map[string]string{"2": "7", "3": "8", "4": "<nil>"})
}

// model is the source table as the test wrote it: id -> v.
type model map[string]string

// streamed returns the changes that came through the stream (not
// snapshot reads), in the order written.
func streamed(cs []noted) []noted {
	var out []noted
	for _, c := range cs {
		if c.Op != change.OpRead {
			out = append(out, c)
		}
	}
	return out
}

// checkOrder: within each session, streamed changes are written in
// strictly growing position order (a replay of what a checkpoint covers is
// allowed: the sink drops it).
func checkOrder(t *testing.T, r *recorder) {
	t.Helper()
	var prev *noted
	for _, e := range r.log() {
		if e.change == nil || e.change.Op == change.OpRead {
			continue
		}
		c := e.change
		if prev != nil && !prev.Pos.Less(c.Pos) {
			t.Errorf("%s %s %s at %s written after %s %s at %s: positions must grow",
				c.Table, c.Op, c.Key, c.Pos, prev.Op, prev.Key, prev.Pos)
		}
		prev = c
	}
}

// checkBoundaries: a flush's checkpoint covers no transaction that is
// written in part: no streamed change written after a flush has a commit
// position at or below that flush's checkpoint.
func checkBoundaries(t *testing.T, r *recorder) {
	t.Helper()
	var covered uint64
	for _, e := range r.log() {
		if e.flush != nil && e.flush.Pos > covered {
			covered = e.flush.Pos
		}
		if c := e.change; c != nil && c.Op != change.OpRead && c.Pos.LSN <= covered {
			t.Errorf("%s %s %s at commit position %d written after a flush recorded checkpoint %d: the checkpoint covered a transaction not yet written",
				c.Table, c.Op, c.Key, c.Pos.LSN, covered)
		}
	}
}

// lake is a test's warehouse, shared by its sessions.
type testLake struct {
	wh  string
	log *slog.Logger
}

func newLake(t *testing.T) *testLake {
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	return &testLake{wh: t.TempDir(), log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))}
}

// sourceName is the pipeline name bronze tables are named after.
const sourceName = "src"

// session is one capture session running in the background.
type session struct {
	cancel context.CancelFunc
	done   chan error
	rec    *recorder
	err    error
	ended  bool
}

func (l *testLake) start(t *testing.T, db Database) *session {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := lake.Open(ctx, lake.Config{Warehouse: l.wh})
	if err != nil {
		t.Fatal(err)
	}
	w, err := bronze.NewWriter(ctx, cat, sourceName, "sourcetest", l.log)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(w)
	c := db.Open(t, rec, l.log)
	s := &session{cancel: cancel, done: make(chan error, 1), rec: rec}
	go func() {
		err := c.Run(ctx)
		c.Close()
		w.Close()
		cat.Close()
		s.done <- err
	}()
	t.Cleanup(func() { s.cancel(); s.result(t) })
	return s
}

// result waits (bounded) for the session's end and returns its error.
func (s *session) result(t *testing.T) error {
	if s.ended {
		return s.err
	}
	select {
	case s.err = <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("capture session did not end within 2 minutes")
	}
	s.ended = true
	return s.err
}

// stop ends the session cleanly, failing t if it had failed.
func (s *session) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	if err := s.result(t); err != nil {
		t.Fatalf("capture session: %v", err)
	}
}

// wait waits for the session to end on its own and returns its error.
func (s *session) wait(t *testing.T) error {
	t.Helper()
	return s.result(t)
}

// until polls cond (bounded by a minute) while the session runs.
func (s *session) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		select {
		case err := <-s.done:
			s.err, s.ended = err, true
			t.Fatalf("capture session ended (%v) while waiting for %s", err, what)
		case <-s.rec.changed():
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
	}
}

func (s *session) waitSnapshotDone(t *testing.T, id change.TableID) {
	t.Helper()
	s.until(t, "snapshot of "+id.String()+" done", func() bool { return s.rec.snapshotStatus(id) == pipeline.SnapshotDone })
}

// waitChange waits for a streamed change op of the row with id key.
func (s *session) waitChange(t *testing.T, id change.TableID, op change.Op, key string) noted {
	t.Helper()
	var found noted
	s.until(t, fmt.Sprintf("%s %s id=%s", id, op, key), func() bool {
		for _, c := range s.rec.changes(id) {
			if c.Op == op && c.Key == key {
				found = c
				return true
			}
		}
		return false
	})
	return found
}

// waitDurable waits until a flush covering commit position pos is durable.
func (s *session) waitDurable(t *testing.T, pos uint64) {
	t.Helper()
	s.until(t, fmt.Sprintf("durable checkpoint at commit position %d", pos), func() bool {
		for _, cp := range s.rec.durables() {
			if cp.Pos >= pos {
				return true
			}
		}
		return false
	})
}

// bronzeRows reads table id's bronze table as maps of text.
func (l *testLake) bronzeRows(t *testing.T, id change.TableID) []map[string]string {
	t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: l.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	ident := bronze.Ident(sourceName, id)
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatalf("load %s: %v", strings.Join(ident, "."), err)
	}
	var out []map[string]string
	err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			m := map[string]string{}
			for c, col := range rec.Columns() {
				if col.IsNull(i) {
					m[rec.ColumnName(c)] = "<nil>"
				} else {
					m[rec.ColumnName(c)] = fmt.Sprint(col.GetOneForMarshal(i))
				}
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// replay applies bronze rows in (cdc_source_lsn, cdc_seq) order, failing
// t on a position held twice (a visible duplicate), and returns the rows
// left by id.
func (l *testLake) replay(t *testing.T, id change.TableID) map[string]map[string]string {
	t.Helper()
	rows := l.bronzeRows(t, id)
	num := func(s string) uint64 {
		var n uint64
		fmt.Sscan(s, &n)
		return n
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if x, y := num(a["cdc_source_lsn"]), num(b["cdc_source_lsn"]); x != y {
			return x < y
		}
		return num(a["cdc_seq"]) < num(b["cdc_seq"])
	})
	seen := map[string]bool{}
	state := map[string]map[string]string{}
	for _, r := range rows {
		pos := r["cdc_source_lsn"] + "/" + r["cdc_seq"]
		if seen[pos] {
			t.Errorf("bronze %s holds position %s twice (op %s id %s): a visible duplicate", id, pos, r["cdc_op"], r["id"])
		}
		seen[pos] = true
		switch change.Op(r["cdc_op"][0]) {
		case change.OpTruncate:
			state = map[string]map[string]string{}
		case change.OpDelete:
			delete(state, r["id"])
		default:
			state[r["id"]] = r
		}
	}
	return state
}

// checkBronze: bronze replayed equals m.
func (l *testLake) checkBronze(t *testing.T, id change.TableID, m model) {
	t.Helper()
	state := l.replay(t, id)
	for k, v := range m {
		if r, ok := state[k]; !ok {
			t.Errorf("bronze %s replayed lacks id=%s (v=%s)", id, k, v)
		} else if r["v"] != v {
			t.Errorf("bronze %s replayed: id=%s v=%s, want %s", id, k, r["v"], v)
		}
	}
	for k := range state {
		if _, ok := m[k]; !ok {
			t.Errorf("bronze %s replayed holds id=%s, which the source does not", id, k)
		}
	}
}

// checkBronzeColumn: bronze replayed has column col with want by id.
func (l *testLake) checkBronzeColumn(t *testing.T, id change.TableID, col string, want map[string]string) {
	t.Helper()
	state := l.replay(t, id)
	for k, v := range want {
		if got := state[k][col]; got != v {
			t.Errorf("bronze %s replayed: id=%s %s=%q, want %s", id, k, col, got, v)
		}
	}
}

func testNewTable(t *testing.T, h Harness) {
	db, l, s, _ := setUp(t, h)
	db.Exec(t, "CREATE TABLE u (id integer PRIMARY KEY, v varchar(100))")
	db.Exec(t, "INSERT INTO u VALUES (1, 'a')", "INSERT INTO u VALUES (2, 'b')")
	uid := db.Table("u")
	s.waitSnapshotDone(t, uid)
	db.Exec(t, "INSERT INTO u VALUES (3, 'c')")
	db.Exec(t, "UPDATE u SET v = 'aa' WHERE id = 1")
	s.waitDurable(t, s.waitChange(t, uid, change.OpUpdate, "1").Pos.LSN)
	s.stop(t)
	checkOrder(t, s.rec)
	checkBoundaries(t, s.rec)
	l.checkBronze(t, uid, model{"1": "aa", "2": "b", "3": "c"})
}
