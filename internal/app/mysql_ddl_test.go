package app_test

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	osexec "os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// ddlWriter writes to the tables of TestMySQLRenameDropMidStream by the
// names and columns they have now. mu is held for each statement or
// transaction; the test takes it to run a DDL statement and switch the
// names, so every write succeeds and the binlog holds writes right before
// and right after each statement.
type ddlWriter struct {
	mu       sync.Mutex
	body     string // items' text column: payload, then body
	note     string // accounts' note column: note, then remark
	orders   string // orders, then orders_v2
	goneLive bool   // gone not dropped yet
	nextItem int64
	nextOrd  int64
	nextGone int64
	ops      int
	err      error
	stop     chan struct{}
	done     chan struct{}
}

// stmts is one write: a statement, or several for one transaction.
func (w *ddlWriter) stmts(rng *rand.Rand) []string {
	var out []string
	for n := 1 + rng.IntN(3); n > 0; n-- {
		switch rng.IntN(8) {
		case 0:
			w.nextItem++
			out = append(out, fmt.Sprintf("INSERT INTO items (id, version, %s, amount, updated) VALUES (%d, 1, 'new-%d', %d.25, NOW(6))", w.body, w.nextItem, w.nextItem, rng.IntN(1000)))
		case 1:
			out = append(out, fmt.Sprintf("UPDATE items SET version = version + 1, %s = 'v%d' WHERE id = %d", w.body, rng.IntN(1e6), 1+rng.Int64N(w.nextItem)))
		case 2:
			out = append(out, fmt.Sprintf("DELETE FROM items WHERE id = %d", 1+rng.Int64N(w.nextItem)))
		case 3:
			out = append(out, fmt.Sprintf("UPDATE accounts SET balance = balance + %d, %s = 'n%d' WHERE tenant = %d AND id = %d", rng.IntN(100)-50, w.note, rng.IntN(1000), rng.IntN(5), rng.IntN(10)))
		case 4:
			w.nextOrd++
			out = append(out, fmt.Sprintf("INSERT INTO %s VALUES (%d, %d, 'o%d')", w.orders, w.nextOrd, rng.IntN(50), w.nextOrd))
		case 5:
			out = append(out, fmt.Sprintf("UPDATE %s SET qty = qty + 1, label = 'u%d' WHERE id = %d", w.orders, rng.IntN(1e6), 1+rng.Int64N(w.nextOrd)))
		case 6:
			out = append(out, fmt.Sprintf("DELETE FROM %s WHERE id = %d", w.orders, 1+rng.Int64N(w.nextOrd)))
		case 7:
			if w.goneLive {
				w.nextGone++
				out = append(out, fmt.Sprintf("INSERT INTO gone VALUES (%d, %d)", w.nextGone, rng.IntN(100)),
					fmt.Sprintf("UPDATE gone SET v = v + 1 WHERE id = %d", 1+rng.Int64N(w.nextGone)))
			}
		}
	}
	return out
}

// start writes until stopWriter, one write every few milliseconds.
func (w *ddlWriter) start(db *sql.DB) {
	go func() {
		defer close(w.done)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			w.mu.Lock()
			qs := w.stmts(rng)
			var err error
			switch {
			case len(qs) > 1:
				var tx *sql.Tx
				if tx, err = db.Begin(); err != nil {
					break
				}
				for _, q := range qs {
					if _, err = tx.Exec(q); err != nil {
						break
					}
				}
				if err == nil {
					err = tx.Commit()
				} else {
					tx.Rollback()
				}
			case len(qs) == 1:
				_, err = db.Exec(qs[0])
			}
			w.ops++
			if err != nil {
				w.err = fmt.Errorf("%v: %w", qs, err)
			}
			w.mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
}

func (w *ddlWriter) stopWriter() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestMySQLRenameDropMidStream: while tidemark run captures under a
// concurrent writer, the source renames a column (RENAME COLUMN), renames
// and redefines one (MariaDB's CHANGE COLUMN old new type), renames a
// table (RENAME TABLE) and drops one (DROP TABLE). What a user should see,
// as docs/operations.md says:
//   - the renamed columns are in silver under their new names, with every
//     row's value (rows written before the rename included);
//   - the renamed table's new name is a new table, snapshotted, equal to
//     the source; the old name's lake tables stop at the rename, holding
//     the table as it was then (nothing written before the rename lost,
//     nothing after it added);
//   - the dropped table's lake tables stay as the table was when dropped;
//   - a name whose lake tables hold an earlier table (dropped and created
//     again, renamed away and back) is read again: silver is the table
//     the source has now, not the earlier one's rows;
//   - tidemark verify reports the live tables equal and the renamed and
//     dropped ones missing_at_source (exit 5); limited to the live tables
//     with --tables, exit 0.
func TestMySQLRenameDropMidStream(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 300, 50)
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE TABLE orders (id int PRIMARY KEY, qty int NOT NULL, label varchar(20))")
	exec("INSERT INTO orders SELECT seq, seq % 7, concat('o', seq) FROM seq_1_to_200")
	exec("CREATE TABLE gone (id int PRIMARY KEY, v int)")
	exec("INSERT INTO gone SELECT seq, seq FROM seq_1_to_100")
	exec("CREATE TABLE again (id int PRIMARY KEY, v int)")
	exec("INSERT INTO again SELECT seq, seq FROM seq_1_to_50")
	exec("UPDATE accounts SET note = concat('first ', id) WHERE id % 2 = 0")
	source := dbname
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "500ms")
	l := myLake{t: t, wh: wh, source: source, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshots to finish", func() bool {
		for _, tb := range []string{"items", "accounts", "orders", "gone", "again"} {
			if st, _ := l.snapshot(tb); st != "done" {
				return false
			}
		}
		return true
	})

	w := &ddlWriter{body: "payload", note: "note", orders: "orders", goneLive: true,
		nextItem: 300, nextOrd: 200, nextGone: 100, stop: make(chan struct{}), done: make(chan struct{})}
	w.start(db)
	t.Cleanup(w.stopWriter)
	// ddl runs a statement between two of the writer's writes: before and
	// after run in the same pause (after switches the writer's names).
	ddl := func(q string, before, after func()) {
		t.Helper()
		time.Sleep(700 * time.Millisecond)
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.err != nil {
			t.Fatalf("the writer failed: %v", w.err)
		}
		if before != nil {
			before()
		}
		exec(q)
		if after != nil {
			after()
		}
	}
	orders := myTable{"orders", []string{"id"}, []string{"id", "qty", "label"}}
	gone := myTable{"gone", []string{"id"}, []string{"id", "v"}}
	var ordersAtRename, goneAtDrop map[string][]string
	var renamedAt uint64
	ddl("ALTER TABLE items RENAME COLUMN payload TO body", nil, func() { w.body = "body" })
	ddl("ALTER TABLE accounts CHANGE note remark varchar(300)", nil, func() { w.note = "remark" })
	ddl("RENAME TABLE orders TO orders_v2", func() {
		ordersAtRename = myRows(t, db, orders)
	}, func() {
		w.orders = "orders_v2"
		renamedAt = binlogLSN(t, db)
	})
	ddl("DROP TABLE gone", func() { goneAtDrop = myRows(t, db, gone) }, func() { w.goneLive = false })
	// A table dropped and created again under its name, and one renamed
	// away, changed and renamed back: the lake tables of the name hold the
	// earlier table's rows, so the name is read again (a re-snapshot) and
	// silver replaced by the table the source has now.
	ddl("DROP TABLE again", nil, func() {
		exec("CREATE TABLE again (id int PRIMARY KEY, v int)")
		exec("INSERT INTO again VALUES (1, -1), (500, 5)")
	})
	ddl("RENAME TABLE orders_v2 TO orders_tmp", nil, func() {
		exec("UPDATE orders_tmp SET label = 'while away' WHERE id % 3 = 0")
		exec("DELETE FROM orders_tmp WHERE id % 5 = 0")
		exec("RENAME TABLE orders_tmp TO orders_v2")
	})
	time.Sleep(700 * time.Millisecond)
	w.stopWriter()
	if w.err != nil {
		t.Fatalf("the writer failed: %v", w.err)
	}
	t.Logf("the writer made %d writes", w.ops)

	live := []myTable{
		{"items", []string{"id"}, []string{"id", "version", "body", "amount", "updated"}},
		{"accounts", []string{"tenant", "id"}, []string{"tenant", "id", "balance", "remark"}},
		{"orders_v2", []string{"id"}, []string{"id", "qty", "label"}},
		{"again", []string{"id"}, []string{"id", "v"}},
	}
	myWaitFor(t, s, 2*time.Minute, "the snapshots of the renamed and created tables", func() bool {
		a, _ := l.snapshot("orders_v2")
		b, _ := l.snapshot("again")
		return a == "done" && b == "done"
	})
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })

	// What a user checks: tidemark verify, while tidemark runs.
	rep, code, out := myVerify(t, srcURL, wh, source)
	t.Logf("tidemark verify:\n%s", out)
	for _, tb := range live {
		if tr := myTableReport(t, rep, tb.name); tr.Status != verify.StatusEqual || tr.SourceRows == 0 {
			t.Errorf("verify %s: %s (%s), %d source rows, want equal", tb.name, tr.Status, tr.Reason, tr.SourceRows)
		}
	}
	for _, tb := range []string{"orders", "gone"} {
		if tr := myTableReport(t, rep, tb); tr.Status != verify.StatusMissingAtSource {
			t.Errorf("verify %s: %s (%s), want %s", tb, tr.Status, tr.Reason, verify.StatusMissingAtSource)
		}
	}
	if code != verify.ExitDifferences {
		t.Errorf("verify exited with %d, want %d (tables missing at the source)", code, verify.ExitDifferences)
	}
	var names []string
	for _, tb := range live {
		names = append(names, dbname+"."+tb.name)
	}
	if _, code, out := myVerify(t, srcURL, wh, source, "--tables", strings.Join(names, ",")); code != 0 {
		t.Errorf("verify --tables %s: exit %d, want 0\n%s", strings.Join(names, ","), code, out)
	}

	// A restart after the DDL: nothing comes back, nothing is read twice.
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	exec("UPDATE orders_v2 SET qty = qty + 100 WHERE id <= 5")
	exec("UPDATE items SET body = 'after restart' WHERE id <= 5")
	s = r.Start()
	target = binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	if out, err := osexec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, source, dbname, live)
	// The old name's and the dropped table's silver: the table as it was
	// at the rename / the drop.
	checkSilverRows(t, wh, source, dbname, orders, ordersAtRename)
	checkSilverRows(t, wh, source, dbname, gone, goneAtDrop)
	for _, tb := range []string{"items", "accounts", "orders", "orders_v2", "gone"} {
		rows := bronzetest.Read(t, wh, "bronze", source, dbname, tb)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s holds changes twice: %v", tb, d[:min(5, len(d))])
		}
		if tb != "orders" {
			continue
		}
		for _, row := range rows {
			if uint64(row.LSN()) > renamedAt {
				t.Errorf("bronze orders has a change at %d, after the rename at %d: %v", row.LSN(), renamedAt, row)
				break
			}
		}
	}
}

// checkSilverRows compares a silver table with want, rows by key as
// myRows reads them.
func checkSilverRows(t *testing.T, wh, source, dbname string, tb myTable, want map[string][]string) {
	t.Helper()
	got := map[string][]string{}
	for _, r := range bronzetest.Read(t, wh, "silver", source, dbname, tb.name) {
		vals := make([]string, len(tb.cols))
		for i, c := range tb.cols {
			vals[i] = lakeText(r[c])
		}
		got[strings.Join(vals[:len(tb.key)], ",")] = vals
	}
	var diffs []string
	for k, wv := range want {
		if g, ok := got[k]; !ok || strings.Join(g, "|") != strings.Join(wv, "|") {
			diffs = append(diffs, fmt.Sprintf("%s: silver %v, want %v", k, g, wv))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: silver %v, want none", k, g))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("silver %s differs from the table at its last change in %d rows, e.g. %v", tb.name, len(diffs), diffs[:min(5, len(diffs))])
	}
	t.Logf("silver %s: %d rows, want %d", tb.name, len(got), len(want))
}
