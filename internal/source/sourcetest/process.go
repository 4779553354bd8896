package sourcetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// ProcessHarness is one source's side of the process-level suite
// (RunProcess): the real tidemark binary, run as a subprocess against the
// source's real server, killed with SIGKILL at random moments.
type ProcessHarness interface {
	// NewSource creates an empty database on the source's server for one
	// test, removed when the test ends.
	NewSource(t *testing.T) Source
}

// Source is a database of the source's server that tidemark run captures.
type Source interface {
	// Exec runs the statements in one transaction of one session (a SET
	// holds for the statements after it), returning the first error. Safe
	// for concurrent use: the suite's writer calls it from its goroutine.
	Exec(stmts ...string) error
	// DB is a connection pool to the database, for reading it.
	DB() *sql.DB
	// Table names table name of this database as the source does.
	Table(name string) change.TableID
	// URL is the --source of tidemark run and tidemark verify.
	URL() string
	// Name is the pipeline name tidemark derives from URL (its lake
	// tables are bronze.<Name>... and silver.<Name>...).
	Name() string
	// End is the server's current end position (PostgreSQL: the WAL
	// insert position; MySQL: the binlog end): once the checkpoint's
	// acknowledged position (Acked) reaches it, every change committed
	// before End was called is in bronze.
	End(t *testing.T) uint64
	// Acked is the acknowledged source position of a checkpoint, in End's
	// terms.
	Acked(cp pipeline.Checkpoint) uint64
	// SnapshotPause is the environment of a tidemark session whose
	// snapshot pauses d after each chunk (a failpoint), so that a kill can
	// land inside it.
	SnapshotPause(d time.Duration) []string
	// Types is the every-type table: a column of every type the source's
	// mapping names (docs/type-mapping.md).
	Types(t *testing.T) TypeTable
}

// TypeTable is a table with a column of every mapped type, its rows, and
// how its values must read in silver.
type TypeTable struct {
	// Name is the table's name; its key is an integer column id.
	Name string
	// Create are the statements creating it (and the types it uses), each
	// passed alone to Exec.
	Create []string
	// Rows inserts its rows, in one Exec. The suite moves the rows of even
	// id to id + 1000 while the stream runs, so that silver holds values
	// of both the snapshot's and the stream's decoding.
	Rows []string
	// Want is the table's rows as silver must hold them, in a canonical
	// form (column -> text) by id, computed without tidemark's decoder:
	// at the source, or from the source's golden expectations.
	Want func(t *testing.T) map[string]map[string]string
	// Lake renders rows PyIceberg read (testenv.PyIcebergRead) in Want's
	// canonical form, by id.
	Lake func(t *testing.T, rows []map[string]any) map[string]map[string]string
}

// Sizes of the process suite's tables and transactions.
const (
	procRowsA  = 20000 // table a, read by the snapshot (chunks of 500)
	procRowsB  = 2000  // table b
	procBigTxn = 10000 // rows inserted by the big transaction
	procChunk  = 500
	typesShift = 1000 // the type table's even ids move by this much
)

// RunProcess is the process-level conformance suite. On a source database
// holding tables a (id integer PRIMARY KEY, v varchar(100), n integer), b
// (id integer PRIMARY KEY, v varchar(100)) and the every-type table, it
// runs tidemark sessions (testenv.Runner) under a concurrent writer of
// inserts, updates, deletes and small transactions, and:
//
//   - SIGKILLs the first session while the snapshot of a runs, and the
//     second at a random moment (snapshot or stream);
//   - once the snapshots are done, moves the type table's even ids, runs a
//     big transaction (procBigTxn inserts of 100-byte rows, a third of
//     them updated, a seventh deleted: about 15,000 changes, over the
//     --commit-bytes of 1 MiB), and SIGKILLs at a random moment after it;
//   - TRUNCATEs b while tidemark is down; once the next session has
//     streamed past it, adds a column w to b, creates a table c with rows,
//     and SIGKILLs at a random moment after;
//   - stops the writer, runs a clean session until its checkpoint reaches
//     the server's end, SIGTERM.
//
// Then bronze holds no change twice and no dead letter, `tidemark verify`
// reports every table equal, and a PyIceberg read of each silver table
// equals the source (the type table: its TypeTable.Want). The random
// moments come from a seed, logged; TIDEMARK_E2E_SEED reuses one.
func RunProcess(t *testing.T, h ProcessHarness) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (TIDEMARK_E2E_SEED=%d reuses the kill moments and the writer's choices)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	began := time.Now()

	src := h.NewSource(t)
	tt := src.Types(t)
	must(t, src, "CREATE TABLE a (id integer PRIMARY KEY, v varchar(100), n integer)")
	must(t, src, "CREATE TABLE b (id integer PRIMARY KEY, v varchar(100))")
	must(t, src, insertRows("a", 1, procRowsA, "(%d, 'a%d', 0)")...)
	must(t, src, insertRows("b", 1, procRowsB, "(%d, 'b%d')")...)
	for _, q := range tt.Create {
		must(t, src, q)
	}
	must(t, src, tt.Rows...)
	tables := []string{"a", "b", tt.Name}

	bin := testenv.Tidemark(t)
	r, wh := testenv.NewRunner(t, bin, src.URL(), "--snapshot-chunk-rows", strconv.Itoa(procChunk),
		"--commit-bytes", "1MiB", "--silver-every", "1s")
	lv := &lakeView{t: t, wh: wh, src: src}
	w := startWriter(t, src, seed)
	defer w.stop()

	// 1. Killed during the snapshot of a (40 chunks, 100 ms apart).
	r.Env = src.SnapshotPause(100 * time.Millisecond)
	s := r.Start()
	lv.waitFor(s, 2*time.Minute, "the snapshot of a to be under way", func() bool { return lv.snapshot("a") == "running" })
	time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
	st := lv.snapshot("a")
	s.Kill(t)
	if st == "done" {
		t.Fatalf("the snapshot of a was done before the first kill: nothing tested")
	}
	t.Logf("kill 1 during the snapshot (a: %s, writer ops so far %d)", st, w.ops.Load())

	// 2. A random moment of the second session.
	s = r.Start()
	d := time.Duration(300+rng.IntN(3000)) * time.Millisecond
	time.Sleep(d)
	st = lv.states(tables)
	s.Kill(t)
	r.Env = nil
	t.Logf("kill 2 after %s (snapshots %s)", d, st)

	// 3. In the stream: the type table's even ids move, and a big
	// transaction, killed at a random moment after it is committed.
	s = r.Start()
	lv.waitFor(s, 3*time.Minute, "the snapshots to finish", func() bool { return lv.states(tables) == "done/done/done" })
	must(t, src, fmt.Sprintf("UPDATE %s SET id = id + %d WHERE id %% 2 = 0", tt.Name, typesShift))
	big := insertRows("a", 100001, procBigTxn, "(%d, '"+strings.Repeat("x", 90)+"%d', 1)")
	big = append(big, "UPDATE a SET n = n + 1, v = 'big' WHERE id > 100000 AND id % 3 = 0",
		"DELETE FROM a WHERE id > 100000 AND id % 7 = 0")
	must(t, src, big...)
	d = time.Duration(rng.IntN(2500)) * time.Millisecond
	time.Sleep(d)
	s.Kill(t)
	t.Logf("kill 3 in the stream, %s after the big transaction's commit", d)

	// 4. TRUNCATE while stopped; once the next session has streamed past
	// it, ADD COLUMN and a new table, killed at a random moment after them.
	must(t, src, "TRUNCATE TABLE b")
	s = r.Start()
	target := src.End(t)
	lv.waitFor(s, 2*time.Minute, "the stream to pass the TRUNCATE", func() bool { return lv.acked() >= target })
	must(t, src, "ALTER TABLE b ADD COLUMN w integer")
	w.addedW.Store(true)
	must(t, src, "CREATE TABLE c (id integer PRIMARY KEY, v varchar(100), n integer)")
	must(t, src, insertRows("c", 1, 500, "(%d, 'c%d', 0)")...)
	must(t, src, "UPDATE c SET n = 1 WHERE id <= 10", "DELETE FROM c WHERE id > 490")
	tables = append(tables, "c")
	d = time.Duration(200+rng.IntN(2500)) * time.Millisecond
	time.Sleep(d)
	s.Kill(t)
	t.Logf("kill 4 in the stream, %s after ADD COLUMN and CREATE TABLE (snapshots %s)", d, lv.states(tables))

	// 5. The writer stops; a clean session catches up.
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
	w.stop()
	if err := w.failed(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	t.Logf("writer stopped after %d operations", w.ops.Load())
	s = r.Start()
	target = src.End(t)
	lv.waitFor(s, 3*time.Minute, "the checkpoint to reach the server's end and every snapshot to finish", func() bool {
		return lv.acked() >= target && lv.states(tables) == "done/done/done/done"
	})
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM, want 0", code)
	}
	t.Logf("caught up %s after the start", time.Since(began).Round(time.Millisecond))

	// The oracle: bronze, verify, PyIceberg.
	for _, name := range tables {
		rows := bronzetest.Read(t, wh, bronze.Ident(src.Name(), src.Table(name))...)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s holds changes twice: %v", name, d[:min(len(d), 5)])
		}
	}
	lv.checkNoDeadLetters()
	lv.checkVerify(r, tables)
	lv.checkPyIceberg(tables, tt)
	t.Logf("total %s", time.Since(began).Round(time.Millisecond))
}

// must runs stmts in one transaction, failing t on error.
func must(t *testing.T, src Source, stmts ...string) {
	t.Helper()
	if err := src.Exec(stmts...); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(stmts, ";\n"))
	}
}

// insertRows is INSERT statements of n rows from id first on, 1000 rows a
// statement, each row format(id, id).
func insertRows(table string, first, n int, format string) []string {
	var out []string
	for lo := first; lo < first+n; lo += 1000 {
		var vals []string
		for id := lo; id < min(lo+1000, first+n); id++ {
			vals = append(vals, fmt.Sprintf(format, id, id))
		}
		out = append(out, "INSERT INTO "+table+" VALUES "+strings.Join(vals, ", "))
	}
	return out
}

// writer writes random inserts, updates and deletes to a and b (single
// statements and small transactions, some rolled back by an error) until
// stopped.
type writer struct {
	src    Source
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ops    atomic.Int64
	addedW atomic.Bool // b has its column w
	mu     sync.Mutex
	err    error
	once   sync.Once
}

func startWriter(t *testing.T, src Source, seed uint64) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{src: src, cancel: cancel}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		nextA, nextB := procRowsA, procRowsB
		for ctx.Err() == nil {
			n := 1
			if rng.IntN(4) == 0 {
				n = 2 + rng.IntN(6)
			}
			var stmts []string
			for range n {
				var q string
				switch k := rng.IntN(10); {
				case k < 3:
					nextA++
					q = fmt.Sprintf("INSERT INTO a VALUES (%d, 'new%d', 0)", nextA, rng.IntN(1e6))
				case k < 4:
					q = fmt.Sprintf("DELETE FROM a WHERE id = %d", 1+rng.IntN(nextA))
				case k < 7:
					q = fmt.Sprintf("UPDATE a SET v = 'u%d', n = n + 1 WHERE id = %d", rng.IntN(1e6), 1+rng.IntN(nextA))
				case k < 8:
					nextB++
					if w.addedW.Load() {
						q = fmt.Sprintf("INSERT INTO b (id, v, w) VALUES (%d, 'new', %d)", nextB, rng.IntN(100))
					} else {
						q = fmt.Sprintf("INSERT INTO b (id, v) VALUES (%d, 'new')", nextB)
					}
				case k < 9:
					if w.addedW.Load() {
						q = fmt.Sprintf("UPDATE b SET v = 'u%d', w = %d WHERE id = %d", rng.IntN(1e6), rng.IntN(100), 1+rng.IntN(nextB))
					} else {
						q = fmt.Sprintf("UPDATE b SET v = 'u%d' WHERE id = %d", rng.IntN(1e6), 1+rng.IntN(nextB))
					}
				default:
					q = fmt.Sprintf("DELETE FROM b WHERE id = %d", 1+rng.IntN(nextB))
				}
				stmts = append(stmts, q)
			}
			if n > 1 && rng.IntN(8) == 0 {
				// A duplicate key: the transaction fails and rolls back.
				stmts = append(stmts, "INSERT INTO a VALUES (1, 'dup', 0)", "INSERT INTO a VALUES (1, 'dup', 0)")
				if err := w.src.Exec(stmts...); err == nil {
					w.fail(errors.New("a transaction inserting one key twice committed"))
					return
				}
				continue
			}
			if err := w.src.Exec(stmts...); err != nil {
				if ctx.Err() == nil {
					w.fail(err)
				}
				return
			}
			w.ops.Add(1)
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *writer) stop() {
	w.once.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// lakeView reads the lake's checkpoint and snapshot progress while
// tidemark runs.
type lakeView struct {
	t   *testing.T
	wh  string
	src Source
}

func (l *lakeView) read(fn func(cat *lake.Catalog)) {
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: l.wh, ReadOnly: true})
	if err != nil {
		return // not created yet
	}
	defer cat.Close()
	fn(cat)
}

// acked is the checkpoint's acknowledged position (0: none yet).
func (l *lakeView) acked() uint64 {
	var p uint64
	l.read(func(cat *lake.Catalog) {
		if cp, ok, err := bronze.LoadCheckpoint(context.Background(), cat, l.src.Name()); err == nil && ok {
			p = l.src.Acked(cp)
		}
	})
	return p
}

// snapshot is the status of table's snapshot ("" before its first commit).
func (l *lakeView) snapshot(table string) string {
	var st struct {
		Status string `json:"status"`
	}
	l.read(func(cat *lake.Catalog) {
		tbl, err := cat.LoadTable(context.Background(), bronze.Ident(l.src.Name(), l.src.Table(table)))
		if err == nil {
			_ = json.Unmarshal([]byte(tbl.Summary()[pipeline.PropSnapshot]), &st)
		}
	})
	return st.Status
}

// states is the snapshot status of tables, joined by "/".
func (l *lakeView) states(tables []string) string {
	var out []string
	for _, tb := range tables {
		out = append(out, l.snapshot(tb))
	}
	return strings.Join(out, "/")
}

// waitFor polls cond until it holds, failing after timeout or when the
// session exits.
func (l *lakeView) waitFor(s *testenv.Session, timeout time.Duration, what string, cond func() bool) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if s.Exited() {
			l.t.Fatalf("tidemark session %d exited while waiting for %s: %v", s.N, what, s.Err)
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNoDeadLetters: no value of any table became a dead letter.
func (l *lakeView) checkNoDeadLetters() {
	l.t.Helper()
	l.read(func(cat *lake.Catalog) {
		tbl, err := cat.LoadTable(context.Background(), append(bronze.SourceNamespace(l.src.Name()), bronze.DeadLetterTable))
		if err != nil {
			return // none written
		}
		rows, err := bronzetest.ReadTable(context.Background(), tbl)
		if err != nil {
			l.t.Fatal(err)
		}
		for i, row := range rows {
			if i < 10 {
				l.t.Errorf("dead letter: table %v op %v at %s: %v", row[bronze.ColTable], row.Op(), row.Pos(), row[bronze.ColError])
			}
		}
	})
}

// checkVerify runs `tidemark verify` while a session carries silver to the
// position it compares at: every table equal.
func (l *lakeView) checkVerify(r *testenv.Runner, tables []string) {
	t := l.t
	t.Helper()
	s := r.Start()
	cmd := exec.Command(r.Bin, "verify", "--source", l.src.URL(), "--warehouse", l.wh, "--name", l.src.Name(), "--wait", "2m", "--format", "json")
	out, err := cmd.Output()
	code := s.Stop(t, time.Minute)
	var rep struct {
		Tables []verifyTable `json:"tables"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("tidemark verify (%v) printed no JSON report (%v):\n%s", err, jerr, out)
	}
	for _, name := range tables {
		id := l.src.Table(name)
		i := slices.IndexFunc(rep.Tables, func(tr verifyTable) bool { return tr.Source == id.Schema+"."+id.Name })
		switch {
		case i < 0:
			t.Errorf("tidemark verify does not report %s:\n%s", id, out)
		case rep.Tables[i].Status != "equal":
			t.Errorf("tidemark verify: %s is %s (%s), %d differences, e.g. %+v", id, rep.Tables[i].Status, rep.Tables[i].Reason,
				rep.Tables[i].DifferencesTotal, rep.Tables[i].Differences[:min(3, len(rep.Tables[i].Differences))])
		default:
			t.Logf("tidemark verify: %s equal (%d rows, %d chunks)", id, rep.Tables[i].SourceRows, rep.Tables[i].Chunks)
		}
	}
	if err != nil {
		t.Errorf("tidemark verify: %v", err)
	}
	if code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM, want 0", code)
	}
}

// verifyTable is a table of verify's JSON report (verify.TableReport; not
// imported: verify imports the sources, whose tests import this package).
type verifyTable struct {
	Source, Status, Reason string
	SourceRows             int64 `json:"source_rows"`
	Chunks                 int
	DifferencesTotal       int   `json:"differences_total"`
	Differences            []any `json:"differences"`
}

// checkPyIceberg reads every silver table with PyIceberg: equal to the
// source, value for value.
func (l *lakeView) checkPyIceberg(tables []string, tt TypeTable) {
	t := l.t
	t.Helper()
	for _, name := range tables {
		id := l.src.Table(name)
		rows, ok := testenv.PyIcebergRead(t, l.wh, silver.Ident(l.src.Name(), id.Schema, id.Name))
		if !ok {
			t.Log("TIDEMARK_PYTHON is not set: silver not read with PyIceberg")
			return
		}
		var want, got map[string]map[string]string
		if name == tt.Name {
			want, got = tt.Want(t), tt.Lake(t, rows)
		} else {
			cols := []string{"id", "v", "n"} // a, c
			if name == "b" {
				cols = []string{"id", "v", "w"}
			}
			want, got = l.sourceText(name, cols), lakeText(t, rows, cols)
		}
		testenv.CompareRows(t, "PyIceberg read of silver "+id.String(), want, got)
	}
}

// sourceText reads cols of a source table as text by id (NULL: "NULL").
func (l *lakeView) sourceText(table string, cols []string) map[string]map[string]string {
	t := l.t
	t.Helper()
	rs, err := l.src.DB().Query("SELECT " + strings.Join(cols, ", ") + " FROM " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]map[string]string{}
	for rs.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = "NULL"
			if vals[i].Valid {
				row[c] = vals[i].String
			}
		}
		out[row["id"]] = row
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// lakeText renders PyIceberg rows of integer and string columns as text
// by id, failing on an id read twice.
func lakeText(t *testing.T, rows []map[string]any, cols []string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, r := range rows {
		row := map[string]string{}
		for _, c := range cols {
			v, ok := r[c]
			switch {
			case !ok:
				row[c] = "(no such column)"
			case v == nil:
				row[c] = "NULL"
			default:
				row[c] = fmt.Sprint(v)
			}
		}
		if _, dup := out[row["id"]]; dup {
			t.Errorf("PyIceberg reads id %s twice", row["id"])
		}
		out[row["id"]] = row
	}
	return out
}
