package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// The MySQL/MariaDB source end to end: tidemark run as a process against a
// real MariaDB, under a concurrent writer, killed with SIGKILL during the
// snapshot and during the stream, and silver compared with the source row
// by row.

// myTable is a captured table of the tests: its name, key and columns, in
// the order they are compared.
type myTable struct {
	name string
	key  []string
	cols []string
}

var myTables = []myTable{
	{"items", []string{"id"}, []string{"id", "version", "payload", "amount", "updated"}},
	{"accounts", []string{"tenant", "id"}, []string{"tenant", "id", "balance", "note"}},
}

// myRows reads a table of the source as text, by key.
func myRows(t *testing.T, db *sql.DB, tb myTable) map[string][]string {
	t.Helper()
	q := "SELECT " + strings.Join(tb.cols, ", ") + " FROM " + tb.name
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		raw := make([]sql.RawBytes, len(tb.cols))
		ptrs := make([]any, len(raw))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		vals := make([]string, len(raw))
		for i, b := range raw {
			if b == nil {
				vals[i] = "NULL"
			} else {
				vals[i] = string(b)
			}
		}
		out[strings.Join(vals[:len(tb.key)], ",")] = vals
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// lakeText renders a value read from the lake as MySQL prints it.
func lakeText(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.000000")
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// checkMySQLSilver compares every silver table with the source, row by row.
func checkMySQLSilver(t *testing.T, db *sql.DB, wh, source, dbname string, tables []myTable) {
	t.Helper()
	for _, tb := range tables {
		want := myRows(t, db, tb)
		got := map[string][]string{}
		for _, r := range bronzetest.Read(t, wh, "silver", source, dbname, tb.name) {
			vals := make([]string, len(tb.cols))
			for i, c := range tb.cols {
				vals[i] = lakeText(r[c])
			}
			k := strings.Join(vals[:len(tb.key)], ",")
			if _, dup := got[k]; dup {
				t.Errorf("silver %s: key %s twice", tb.name, k)
			}
			got[k] = vals
		}
		bad := 0
		for k, w := range want {
			g, ok := got[k]
			switch {
			case !ok:
				t.Errorf("silver %s: key %s missing (source %v)", tb.name, k, w)
				bad++
			case strings.Join(g, "|") != strings.Join(w, "|"):
				t.Errorf("silver %s: key %s is %v, source %v", tb.name, k, g, w)
				bad++
			}
			if bad > 10 {
				t.Fatalf("silver %s: too many differences", tb.name)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("silver %s: key %s not in the source (silver %v)", tb.name, k, g)
			}
		}
		t.Logf("silver %s: %d rows, source %d", tb.name, len(got), len(want))
	}
}

// myLake reads the lake's checkpoint and snapshot progress while tidemark runs.
type myLake struct {
	t      *testing.T
	wh     string
	source string
	dbname string
}

func (l myLake) read(fn func(cat *lake.Catalog)) {
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: l.wh, ReadOnly: true})
	if err != nil {
		return // not created yet
	}
	defer cat.Close()
	fn(cat)
}

// position is the checkpoint's commit position (0: none).
func (l myLake) position() uint64 {
	var p uint64
	l.read(func(cat *lake.Catalog) {
		if cp, ok, err := bronze.LoadCheckpoint(context.Background(), cat, l.source); err == nil && ok {
			p = cp.Pos
		}
	})
	return p
}

// watermark is the checkpoint's watermark (zero: none).
func (l myLake) watermark() time.Time {
	var w time.Time
	l.read(func(cat *lake.Catalog) {
		if cp, ok, err := bronze.LoadCheckpoint(context.Background(), cat, l.source); err == nil && ok {
			w = cp.Watermark
		}
	})
	return w
}

// snapshot is a table's snapshot status and rows so far.
func (l myLake) snapshot(table string) (string, int64) {
	var st struct {
		Status string `json:"status"`
		Rows   int64  `json:"rows"`
	}
	l.read(func(cat *lake.Catalog) {
		tbl, err := cat.LoadTable(context.Background(), bronze.Ident(l.source, change.TableID{Schema: l.dbname, Name: table}))
		if err == nil {
			json.Unmarshal([]byte(tbl.Summary()["tidemark.snapshot"]), &st)
		}
	})
	return st.Status, st.Rows
}

// waitFor polls cond until it holds, failing after timeout or when the
// session exits.
func myWaitFor(t *testing.T, s *session, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if s != nil && s.Exited() {
			t.Fatalf("tidemark session %d exited while waiting for %s: %v", s.N, what, s.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// binlogLSN is the server's binlog end as a commit position.
func binlogLSN(t *testing.T, db *sql.DB) uint64 {
	t.Helper()
	var f, pos, a, b string
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&f, &pos, &a, &b); err != nil {
		t.Fatal(err)
	}
	idx, _ := strconv.ParseUint(f[strings.LastIndexByte(f, '.')+1:], 10, 32)
	p, _ := strconv.ParseUint(pos, 10, 32)
	return idx<<32 | p
}

// myWorkload writes random inserts, updates and deletes (single statements
// and small transactions) until stopped.
type myWorkload struct {
	db     *sql.DB
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	nextID int64
	ops    int
}

func startMyWorkload(t *testing.T, db *sql.DB, firstID int64, seed uint64) *myWorkload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &myWorkload{db: db, cancel: cancel, nextID: firstID}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		for ctx.Err() == nil {
			if err := w.step(ctx, rng); err != nil && ctx.Err() == nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *myWorkload) stmt(rng *rand.Rand) (string, []any) {
	w.mu.Lock()
	max := w.nextID
	w.mu.Unlock()
	id := rng.Int64N(max) + 1
	switch rng.IntN(10) {
	case 0, 1, 2:
		w.mu.Lock()
		w.nextID++
		id = w.nextID
		w.mu.Unlock()
		return "INSERT INTO items (id, version, payload, amount, updated) VALUES (?, 1, ?, ?, NOW(6))",
			[]any{id, fmt.Sprintf("new-%d", id), fmt.Sprintf("%d.%02d", rng.IntN(10000), rng.IntN(100))}
	case 3:
		return "DELETE FROM items WHERE id = ?", []any{id}
	case 4:
		return "UPDATE accounts SET balance = balance + ?, note = ? WHERE tenant = ? AND id = ?",
			[]any{rng.IntN(100) - 50, fmt.Sprintf("n%d", rng.IntN(1000)), rng.IntN(5), rng.IntN(1000)}
	default:
		return "UPDATE items SET version = version + 1, payload = ?, amount = ?, updated = NOW(6) WHERE id = ?",
			[]any{fmt.Sprintf("v%d", rng.IntN(1e6)), fmt.Sprintf("%d.%02d", rng.IntN(10000), rng.IntN(100)), id}
	}
}

func (w *myWorkload) step(ctx context.Context, rng *rand.Rand) error {
	if rng.IntN(5) == 0 {
		tx, err := w.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i := 0; i < 2+rng.IntN(8); i++ {
			q, args := w.stmt(rng)
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				tx.Rollback()
				return err
			}
		}
		if rng.IntN(10) == 0 {
			return tx.Rollback()
		}
		w.ops++
		return tx.Commit()
	}
	q, args := w.stmt(rng)
	_, err := w.db.ExecContext(ctx, q, args...)
	w.ops++
	return err
}

func (w *myWorkload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *myWorkload) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// newMySQLSource creates a database with the test tables and preloaded
// rows, and returns its URL, a root connection to it and its name.
func newMySQLSource(t *testing.T, items, accounts int) (*testenv.MariaDB, string, *sql.DB, string) {
	t.Helper()
	m := testenv.SharedMariaDB(t)
	dbname := m.CreateDB(t, "mye2e")
	m.ExecIn(t, dbname, `
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload varchar(200), amount decimal(12,2), updated datetime(6));
		CREATE TABLE accounts (tenant int, id int, balance bigint, note text, PRIMARY KEY (tenant, id));`)
	m.ExecIn(t, dbname, fmt.Sprintf(`INSERT INTO items SELECT seq, 1, md5(seq), seq / 7, TIMESTAMP'2024-01-01 00:00:00.123456' + INTERVAL seq SECOND FROM seq_1_to_%d`, items))
	m.ExecIn(t, dbname, fmt.Sprintf(`INSERT INTO accounts SELECT seq %% 5, seq DIV 5, seq * 10, NULL FROM seq_0_to_%d`, accounts-1))
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return m, m.URL(dbname), db, dbname
}

// TestMySQLE2E: snapshot under a concurrent writer, SIGKILL during the
// snapshot and during the stream, a TRUNCATE, a clean restart; then silver
// equals the source row by row, and PyIceberg reads the same rows.
func TestMySQLE2E(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 20000, 5000)
	source := dbname
	r, wh := newRunner(t, bin, srcURL, "--snapshot-chunk-rows", "200", "--silver-every", "1s")
	l := myLake{t: t, wh: wh, source: source, dbname: dbname}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	w := startMyWorkload(t, db, 20000, seed)

	// 1. Killed during the snapshot of items.
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshot of items to be under way", func() bool {
		st, n := l.snapshot("items")
		return st == "running" && n >= 2000
	})
	s.Kill(t)
	st, n := l.snapshot("items")
	if st == "done" {
		t.Fatalf("the snapshot was done before the kill: nothing tested")
	}
	t.Logf("killed during the snapshot (items: %s, %d rows)", st, n)

	// 2. The snapshot resumes, each chunk's window widened so that the
	// writer's changes land inside windows; killed again in the stream.
	r.Env = []string{"TIDEMARK_FAILPOINTS=mysql-snapshot-after-select=sleep(30)"}
	s = r.Start()
	r.Env = nil
	myWaitFor(t, s, 3*time.Minute, "the snapshots to finish", func() bool {
		a, _ := l.snapshot("items")
		b, _ := l.snapshot("accounts")
		return a == "done" && b == "done"
	})
	if _, n2 := l.snapshot("items"); n2 < n {
		t.Errorf("the snapshot restarted from the beginning: %d rows after the restart, %d before", n2, n)
	}
	before := l.position()
	myWaitFor(t, s, time.Minute, "the stream to move", func() bool { return l.position() > before })
	s.Kill(t)

	// 3. A truncate and more writes while stopped, then a clean restart.
	if err := w.failed(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	w.stop()
	if _, err := db.Exec("TRUNCATE TABLE accounts"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO accounts VALUES (1, 1, 100, 'after truncate'), (2, 7, 5, NULL)"); err != nil {
		t.Fatal(err)
	}
	w = startMyWorkload(t, db, w.nextID+1000, seed+1)
	s = r.Start()
	time.Sleep(2 * time.Second)
	w.stop()
	if err := w.failed(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}

	// Bronze holds no change twice, and its tidemark.position never moves
	// back across the sessions and kills.
	l.read(func(cat *lake.Catalog) {
		for _, tb := range myTables {
			tbl, err := cat.LoadTable(context.Background(), bronze.Ident(source, change.TableID{Schema: dbname, Name: tb.name}))
			if err != nil {
				t.Fatal(err)
			}
			cur, _ := tbl.CurrentSnapshot()
			hist, err := tbl.History(lake.NoSnapshot, cur.ID)
			if err != nil {
				t.Fatal(err)
			}
			var last uint64
			for _, sn := range hist {
				p, _ := strconv.ParseUint(sn.Props["tidemark.position"], 10, 64)
				if p < last {
					t.Errorf("bronze %s: tidemark.position moved back from %d to %d in snapshot %d", tb.name, last, p, sn.ID)
				}
				last = max(last, p)
			}
		}
	})
	for _, tb := range myTables {
		rows := bronzetest.Read(t, wh, "bronze", source, dbname, tb.name)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s holds changes twice: %v", tb.name, d[:min(len(d), 5)])
		}
	}
	if logData, err := os.ReadFile(r.LogPath); err == nil {
		t.Logf("%d snapshot chunks dropped rows changed inside their window", strings.Count(string(logData), `msg="snapshot chunk reconciled"`))
	}
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, source, dbname, myTables)
	checkMySQLPyIceberg(t, db, wh, source, dbname)
}

// checkMySQLPyIceberg reads each silver table with PyIceberg: the same
// keys and values as the source.
func checkMySQLPyIceberg(t *testing.T, db *sql.DB, wh, source, dbname string) {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		t.Log("TIDEMARK_PYTHON not set: PyIceberg read skipped")
		return
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range myTables {
		want := myRows(t, db, tb)
		ident, _ := json.Marshal([]string{"silver", source, dbname, tb.name})
		out, err := exec.Command(py, filepath.Join(root, "scripts", "pyiceberg_read.py"), "--warehouse", wh, "--ident-json", string(ident)).Output()
		if err != nil {
			t.Fatalf("PyIceberg reading silver %s: %v", tb.name, err)
		}
		var res struct {
			Rows []map[string]any `json:"rows"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Rows) != len(want) {
			t.Errorf("PyIceberg reads %d rows of silver %s, the source has %d", len(res.Rows), tb.name, len(want))
		}
		var diffs []string
		for _, row := range res.Rows {
			vals := make([]string, len(tb.cols))
			for i, c := range tb.cols {
				switch v := row[c].(type) {
				case nil:
					vals[i] = "NULL"
				case float64:
					vals[i] = strconv.FormatInt(int64(v), 10)
				case string:
					vals[i] = v
					if c == "updated" { // ISO 8601: 2024-01-01T00:00:01.123456
						vals[i] = strings.Replace(v, "T", " ", 1)
					}
				default:
					vals[i] = fmt.Sprint(v)
				}
			}
			k := strings.Join(vals[:len(tb.key)], ",")
			if w, ok := want[k]; !ok || strings.Join(w, "|") != strings.Join(vals, "|") {
				diffs = append(diffs, fmt.Sprintf("%s: pyiceberg %v, source %v", k, vals, w))
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 0 {
			t.Errorf("PyIceberg's silver %s differs from the source in %d rows, e.g. %v", tb.name, len(diffs), diffs[:min(5, len(diffs))])
		}
	}
}

// TestMySQLSchemaChangeMidStream: ADD COLUMN, a new table (CREATE TABLE)
// and a DROP COLUMN while tidemark streams; silver follows the source.
func TestMySQLSchemaChangeMidStream(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 500, 50)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "1s")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshots to finish", func() bool {
		a, _ := l.snapshot("items")
		b, _ := l.snapshot("accounts")
		return a == "done" && b == "done"
	})
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("UPDATE items SET version = version + 1 WHERE id <= 10")
	exec("ALTER TABLE items ADD COLUMN color varchar(20)")
	// A constant default: every existing row holds it, with no row event.
	// (One such column: of two, silver gives only the first its default
	// in older rows, also from a PostgreSQL-independent bronze; reported
	// on issue 13.)
	exec("ALTER TABLE items ADD COLUMN grade int NOT NULL DEFAULT 5")
	exec("INSERT INTO items (id, version, payload, amount, updated, color) VALUES (9001, 1, 'with color', 1.25, '2025-01-01 00:00:00.5', 'red')")
	exec("UPDATE items SET color = 'blue', version = version + 1 WHERE id BETWEEN 5 AND 15")
	exec("CREATE TABLE extra (k int PRIMARY KEY, v varchar(10))")
	exec("INSERT INTO extra VALUES (1, 'one'), (2, 'two')")
	exec("ALTER TABLE accounts DROP COLUMN note")
	exec("UPDATE accounts SET balance = balance + 1 WHERE id < 3")
	exec("DELETE FROM extra WHERE k = 2")
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	// Idle: heartbeats move the watermark past the last commit.
	wm := l.watermark()
	myWaitFor(t, s, time.Minute, "the watermark to move on an idle server", func() bool { return l.watermark().After(wm.Add(time.Second)) })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	// While stopped: two ALTERs with rows between them. The next session
	// reads rows of the first layout while information_schema has the
	// second: the event's columns are typed by name.
	exec("ALTER TABLE items ADD COLUMN size int AFTER payload")
	exec("UPDATE items SET size = 7, version = version + 1 WHERE id BETWEEN 20 AND 30")
	exec("ALTER TABLE items ADD COLUMN shape varchar(10) FIRST, MODIFY COLUMN color varchar(40)")
	exec("UPDATE items SET color = 'green', shape = 'round' WHERE id BETWEEN 25 AND 40")
	s = r.Start()
	target = binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	if out, err := osexec.Command(bin, "merge", "--warehouse", wh, "--name", dbname).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, dbname, dbname, []myTable{
		{"items", []string{"id"}, []string{"id", "version", "payload", "size", "amount", "updated", "color", "shape", "grade"}},
		{"accounts", []string{"tenant", "id"}, []string{"tenant", "id", "balance"}},
		{"extra", []string{"k"}, []string{"k", "v"}},
	})
}

// TestMySQLLargeTransaction: a transaction many times commit_bytes is
// spooled to disk until its commit and lands whole, at its commit
// position, once, over several flushes (commit_bytes 1MiB), also when the
// process dies with a part of it committed to bronze.
func TestMySQLLargeTransaction(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 100, 10)
	r, wh := newRunner(t, bin, srcURL, "--commit-bytes", "1MiB", "--silver-every", "1s")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	r.Env = []string{"TIDEMARK_FAILPOINTS=mysql-after-backpressure-flush=2*exit"}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshots to finish", func() bool {
		a, _ := l.snapshot("items")
		return a == "done"
	})
	// About 12 MiB of row events in one transaction.
	if _, err := db.Exec(`INSERT INTO items SELECT 1000 + seq, 1, REPEAT(md5(seq), 6), seq, '2025-01-01 00:00:00' FROM seq_1_to_60000`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE items SET version = 2 WHERE id > 1000 AND id % 3 = 0`); err != nil {
		t.Fatal(err)
	}
	// The session dies (as kill -9 would) after the transaction's first
	// back-pressure flush is durable and the second has started: part of
	// the transaction is in bronze, the checkpoint is before it.
	select {
	case <-s.Done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the failpoint mysql-after-backpressure-flush did not fire")
	}
	partial := 0
	for _, row := range bronzetest.Read(t, wh, "bronze", dbname, dbname, "items") {
		if row.Op() == "c" {
			partial++
		}
	}
	if partial == 0 || partial >= 60000 {
		t.Fatalf("bronze holds %d of the transaction's 60000 inserts after the crash, want a part", partial)
	}
	t.Logf("crashed with %d of 60000 inserts in bronze", partial)
	r.Env = nil
	s = r.Start()
	target := binlogLSN(t, db)
	myWaitFor(t, s, 3*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	logData, _ := os.ReadFile(r.LogPath)
	if !strings.Contains(string(logData), "large transaction spooled to disk") {
		t.Errorf("the transaction was not spooled (no \"large transaction spooled to disk\" in the log)")
	}
	rows := bronzetest.Read(t, wh, "bronze", dbname, dbname, "items")
	var lsn int64
	n := 0
	for _, row := range rows {
		if row.Op() == "c" {
			n++
			if lsn == 0 {
				lsn = row.LSN()
			} else if row.LSN() != lsn {
				t.Fatalf("the transaction's inserts carry two positions: %d and %d", lsn, row.LSN())
			}
		}
	}
	if n != 60000 {
		t.Errorf("bronze holds %d inserts, want 60000", n)
	}
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		t.Errorf("bronze holds changes twice: %v", d[:min(5, len(d))])
	}
	if out, err := osexec.Command(bin, "merge", "--warehouse", wh, "--name", dbname).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, dbname, dbname, myTables[:1])
	spool, _ := filepath.Glob(filepath.Join(wh, "_tidemark", "spool", "mysql-tx-*"))
	if len(spool) > 0 {
		t.Errorf("spool files left behind: %v", spool)
	}
}

// TestMySQLBinlogPurged: binlogs purged past the checkpoint while tidemark
// was stopped stop the next start with binlog_purged (exit 3) and the
// recovery command, never a silent jump to what is left; that command,
// `tidemark resnapshot --all`, resets the checkpoint and the table is read
// again, equal to the source.
func TestMySQLBinlogPurged(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	m := testenv.StartMariaDB(t) // its own server: the purge must not touch other tests' binlogs
	dbname := m.CreateDB(t, "mypurge")
	m.ExecIn(t, dbname, "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)")
	r, wh := newRunner(t, bin, m.URL(dbname), "--silver-every", "300ms")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, time.Minute, "the snapshot", func() bool { st, _ := l.snapshot("t"); return st == "done" })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	m.ExecIn(t, dbname, "INSERT INTO t VALUES (2, 2)") // a change only the purged binlog holds
	m.PurgeBinlogs(t)
	m.ExecIn(t, dbname, "INSERT INTO t VALUES (3, 3)")
	out, err := osexec.Command(bin, r.Args...).CombinedOutput()
	code := -1
	if ee, ok := err.(*osexec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 3 || !strings.Contains(string(out), "[binlog_purged]") || !strings.Contains(string(out), "tidemark resnapshot --all") {
		t.Fatalf("tidemark run after the purge: exit %d (want 3, binlog_purged with the recovery command):\n%s", code, out)
	}

	// The recovery it names: one table alone is refused (every table must
	// be read again); --all marks them and resets the checkpoint to the
	// server's position now; the next run reads the table again, the row
	// only the purged binlog held included, and verify finds it equal.
	if out, code := tidemarkArgs(t, r.As("resnapshot", dbname+".t")...); code != fault.ExitConfig || !strings.Contains(out, "tidemark resnapshot --all") {
		t.Errorf("tidemark resnapshot of one table after the purge: exit %d, want %d naming --all:\n%s", code, fault.ExitConfig, out)
	}
	rout, rcode := tidemarkArgs(t, r.As("resnapshot", "--all")...)
	if rcode != 0 || !strings.Contains(rout, "[binlog_purged]") || !strings.Contains(rout, "checkpoint reset to the server's binlog position now") {
		t.Fatalf("tidemark resnapshot --all after the purge: exit %d, want 0 resetting the checkpoint:\n%s", rcode, rout)
	}
	t.Logf("tidemark resnapshot --all:\n%s", rout)
	s = r.Start()
	myWaitFor(t, s, 2*time.Minute, "the re-snapshot", func() bool {
		var sp pipeline.SnapshotState
		l.read(func(cat *lake.Catalog) {
			if tb, err := cat.LoadTable(context.Background(), bronze.Ident(dbname, change.TableID{Schema: dbname, Name: "t"})); err == nil {
				sp, _ = pipeline.ParseSnapshotState(tb.Summary()[pipeline.PropSnapshot])
			}
		})
		return sp.Request != "" && sp.Status == pipeline.SnapshotDone
	})
	m.ExecIn(t, dbname, "INSERT INTO t VALUES (4, 4)")
	myWaitFor(t, s, 2*time.Minute, "silver to apply the re-snapshot", func() bool {
		applied := false
		l.read(func(cat *lake.Catalog) {
			b, err := cat.LoadTable(context.Background(), bronze.Ident(dbname, change.TableID{Schema: dbname, Name: "t"}))
			if err != nil {
				return
			}
			sv, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, "t"))
			applied = err == nil && sv.Summary()[pipeline.PropResnapshot] == b.Summary()[pipeline.PropResnapshot]
		})
		return applied
	})
	rep, vcode, vout := myVerify(t, m.URL(dbname), wh, dbname)
	if vcode != 0 {
		t.Fatalf("verify after resnapshot --all: exit %d\n%s", vcode, vout)
	}
	if tr := myTableReport(t, rep, "t"); tr.SourceRows != 4 || tr.Status != verify.StatusEqual {
		t.Errorf("verify after resnapshot --all: %+v, want 4 rows equal", tr)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
}

// TestMySQLNoTableBlocksTheOthers: a table without a primary key is
// captured into bronze only and a table with a cdc_ column is refused on
// its own: the run starts, the other tables reach silver, status names
// both with the named error and the fix. Listed by name (tables:), the
// refused table refuses the run. A key added later gives the keyless
// table a silver table, built from a re-read on that key.
func TestMySQLNoTableBlocksTheOthers(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	m, srcURL, db, dbname := newMySQLSource(t, 50, 10)
	m.ExecIn(t, dbname, `
		CREATE TABLE logs (id int NOT NULL, msg varchar(20));
		INSERT INTO logs VALUES (1, 'one'), (2, 'two');
		CREATE TABLE clash (id int PRIMARY KEY, cdc_op varchar(5));
		INSERT INTO clash VALUES (1, 'x');`)

	out, err := osexec.Command(bin, "run", "--source", srcURL, "--warehouse", t.TempDir(), "--tables", "items,clash").CombinedOutput() // a bare name: the source's database
	var ee *osexec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitConfig {
		t.Fatalf("tidemark run --tables items,clash: %v, want exit %d; output:\n%s", err, fault.ExitConfig, out)
	}
	if !strings.Contains(string(out), "[column_collision]") || !strings.Contains(string(out), "RENAME COLUMN") {
		t.Errorf("the refusal does not name column_collision and the fix:\n%s", out)
	}
	if strings.Contains(string(out), "PGPASSWORD") || strings.Contains(string(out), "public.") {
		t.Errorf("a MySQL run is told PostgreSQL's ways (PGPASSWORD, public.):\n%s", out)
	}

	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshots to finish", func() bool {
		a, _ := l.snapshot("items")
		b, _ := l.snapshot("accounts")
		return a == "done" && b == "done"
	})
	out, err = osexec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	for _, w := range []string{
		"bronze only, no silver: bronze." + dbname + "." + dbname + ".logs: [no_primary_key]",
		"not captured: " + dbname + ": " + dbname + ".clash: [column_collision]",
		"ADD PRIMARY KEY", "RENAME COLUMN",
	} {
		if !strings.Contains(string(out), w) {
			t.Errorf("tidemark status does not say %q:\n%s", w, out)
		}
	}
	myWaitFor(t, s, 2*time.Minute, "the keyless table's snapshot", func() bool { st, _ := l.snapshot("logs"); return st == "done" })

	// A primary key added later: the table is read again on it and gets
	// a silver table; status no longer names it bronze only.
	for _, q := range []string{"ALTER TABLE logs ADD PRIMARY KEY (id)", "INSERT INTO logs VALUES (3, 'three')", "UPDATE items SET version = version + 1 WHERE id <= 5"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	myWaitFor(t, s, 2*time.Minute, "the re-read of logs on its new key", func() bool { st, _ := l.snapshot("logs"); return st == "done" })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	if out, err := osexec.Command(bin, "merge", "--warehouse", wh, "--name", dbname).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, dbname, dbname, []myTable{
		{"items", []string{"id"}, []string{"id", "version", "payload", "amount", "updated"}},
		{"logs", []string{"id"}, []string{"id", "msg"}},
	})
	out, err = osexec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "bronze only, no silver: bronze."+dbname+"."+dbname+".logs") {
		t.Errorf("tidemark status still names logs bronze only after it got a key:\n%s", out)
	}
	// Bronze: the 2 rows of the first read, keyless, the insert after the
	// ALTER, and the re-read on the key (3 rows, or 2 if it ran before the
	// insert).
	got := map[string]int{}
	for _, row := range bronzetest.Read(t, wh, "bronze", dbname, dbname, "logs") {
		got[row.Op()]++
	}
	if got["r"] < 4 || got["r"] > 5 || got["c"] != 1 || len(got) != 2 {
		t.Errorf("bronze of logs holds %v, want its 2 rows read keyless and 2 or 3 read again on its key as r, the insert after the ALTER as c", got)
	}
}

// TestMySQLKeylessBronzeOnly: a table with no primary key, written to
// while its snapshot runs, lands in bronze only: killed (as kill -9) after
// its whole read and before any of it is written, the next session reads
// it again and bronze holds its rows once; replaying bronze (r rows, then
// the streamed changes) gives the source table; status says bronze only.
func TestMySQLKeylessBronzeOnly(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	m, srcURL, db, dbname := newMySQLSource(t, 20, 5)
	m.ExecIn(t, dbname, `
		CREATE TABLE events (id int NULL, v int, note varchar(40));
		INSERT INTO events SELECT seq, 0, md5(seq) FROM seq_1_to_3000;`)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "500ms")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}

	// A writer: inserts, updates and deletes of events, by id.
	stop := make(chan struct{})
	werr := make(chan error, 1)
	go func() {
		next := 3001
		for i := 0; ; i++ {
			select {
			case <-stop:
				werr <- nil
				return
			default:
			}
			var err error
			switch i % 3 {
			case 0:
				_, err = db.Exec("INSERT INTO events VALUES (?, 0, 'new')", next)
				next++
			case 1:
				_, err = db.Exec("UPDATE events SET v = v + 1 WHERE id = ?", (i*7919)%next+1)
			case 2:
				_, err = db.Exec("DELETE FROM events WHERE id = ?", (i*104729)%next+1)
			}
			if err != nil {
				werr <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()

	r.Env = []string{"TIDEMARK_FAILPOINTS=mysql-keyless-snapshot-read=exit"}
	s := r.Start()
	select {
	case <-s.Done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the failpoint mysql-keyless-snapshot-read did not fire")
	}
	r.Env = nil
	if st, _ := l.snapshot("events"); st == "done" {
		t.Fatalf("the keyless snapshot is done before the kill: nothing tested")
	}
	if rows := bronzetest.Read(t, wh, "bronze", dbname, dbname, "events"); len(rows) != 0 {
		t.Fatalf("bronze holds %d rows of the keyless table after a kill during its snapshot, want none", len(rows))
	}

	s = r.Start()
	myWaitFor(t, s, 2*time.Minute, "the keyless snapshot", func() bool { st, _ := l.snapshot("events"); return st == "done" })
	time.Sleep(500 * time.Millisecond) // a few more changes streamed
	close(stop)
	if err := <-werr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	out, err := osexec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	for _, w := range []string{"bronze only, no silver: bronze." + dbname + "." + dbname + ".events: [no_primary_key]", "none (bronze only)"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("tidemark status does not say %q:\n%s", w, out)
		}
	}
	// verify names the keyless table as having no silver to compare, with
	// why, and compares the others: its exit is theirs.
	rep, code, vout := myVerify(t, srcURL, wh, dbname)
	if code != 0 {
		t.Errorf("tidemark verify with a keyless table: exit %d, want 0 (the keyed tables equal):\n%s", code, vout)
	}
	named := false
	for _, b := range rep.BronzeOnly {
		if strings.Contains(b.Table, "events") && strings.Contains(b.Reason, "no_primary_key") {
			named = true
		}
	}
	if !named {
		t.Errorf("tidemark verify does not name events as bronze only (no_primary_key): %+v", rep.BronzeOnly)
	}
	for _, tr := range rep.Tables {
		if strings.HasSuffix(tr.Source, ".events") {
			t.Errorf("tidemark verify compared the keyless table events: %+v", tr)
		}
	}
	if vtext, _ := tidemarkArgs(t, "verify", "--source", srcURL, "--warehouse", wh, "--name", dbname, "--wait", "2m"); !strings.Contains(vtext, `events": bronze only, no silver to compare: [no_primary_key]`) {
		t.Errorf("tidemark verify's report does not say events is bronze only with no silver to compare:\n%s", vtext)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}

	rows := bronzetest.Read(t, wh, "bronze", dbname, dbname, "events")
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		t.Errorf("bronze holds changes twice: %v", d[:min(5, len(d))])
	}
	seen := map[any]bool{}
	var snapLSN int64
	streamed := 0
	for _, row := range rows {
		if row.Op() != "r" {
			streamed++
			continue
		}
		if seen[row["id"]] {
			t.Errorf("snapshot row id %v twice in bronze", row["id"])
		}
		seen[row["id"]] = true
		if snapLSN == 0 {
			snapLSN = row.LSN()
		} else if row.LSN() != snapLSN {
			t.Errorf("snapshot rows at two positions: %d and %d", snapLSN, row.LSN())
		}
	}
	if len(seen) < 2000 || streamed == 0 {
		t.Fatalf("bronze holds %d snapshot rows and %d streamed changes: want the table's rows and the writer's changes", len(seen), streamed)
	}
	state := bronzetest.Replay(t, rows, []string{"id"})
	src, err := db.Query("SELECT id, v, note FROM events")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n := 0
	for src.Next() {
		var id, v int64
		var note string
		if err := src.Scan(&id, &v, &note); err != nil {
			t.Fatal(err)
		}
		n++
		got, ok := state[fmt.Sprint(id)]
		switch {
		case !ok:
			t.Errorf("source row id %d is not in bronze's replay", id)
		case fmt.Sprint(got["v"]) != fmt.Sprint(v) || fmt.Sprint(got["note"]) != note:
			t.Errorf("id %d: bronze's replay has v=%v note=%v, the source v=%d note=%s", id, got["v"], got["note"], v, note)
		}
	}
	if n != len(state) {
		t.Errorf("bronze's replay holds %d rows, the source %d", len(state), n)
	}
}
