package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// myVerify runs `tidemark verify --format json` on a MySQL source and
// returns its report and exit code.
func myVerify(t *testing.T, srcURL, wh, source string, extra ...string) (*verify.Report, int, string) {
	t.Helper()
	out, code := tidemarkArgs(t, append([]string{"verify", "--source", srcURL, "--warehouse", wh, "--name", source,
		"--wait", "2m", "--format", "json"}, extra...)...)
	js := out[strings.Index(out, "\n{")+1:]
	var rep verify.Report
	if err := json.NewDecoder(strings.NewReader(js)).Decode(&rep); err != nil {
		t.Fatalf("verify output is not a JSON report (%v):\n%s", err, out)
	}
	return &rep, code, out
}

func myTableReport(t *testing.T, rep *verify.Report, table string) verify.TableReport {
	t.Helper()
	for _, tr := range rep.Tables {
		if strings.HasSuffix(tr.Source, "."+table) {
			return tr
		}
	}
	t.Fatalf("no report for table %s: %+v", table, rep)
	return verify.TableReport{}
}

// TestMySQLVerify: tidemark verify on a MariaDB source reports equal after
// a capture (chunk hashes computed in MariaDB's SQL agree with silver's
// for every chunk), and names the differing keys, exit 5, after a silver
// row is deleted behind tidemark's back and after a source row is changed
// without a binlog record (sql_log_bin=0) while tidemark is stopped.
func TestMySQLVerify(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	// A server of its own: the binlog end verify compares at moves with
	// every write to the server, and other tests' writes would leave a
	// stopped pipeline behind it.
	m := testenv.StartMariaDB(t)
	dbname := m.CreateDB(t, "myverify")
	m.ExecIn(t, dbname, `
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload varchar(200), amount decimal(12,2), updated datetime(6));
		CREATE TABLE accounts (tenant int, id int, balance bigint, note text, PRIMARY KEY (tenant, id));
		CREATE TABLE kinds (k varchar(20) PRIMARY KEY, u bigint unsigned, ti tinyint, b bit(5), y year, d date, ts timestamp(3) NULL,
			bin varbinary(10), fb binary(3), e enum('x','y'), s set('a','b','c'), t text CHARACTER SET latin1, big decimal(38,10));
		CREATE TABLE floats (id int PRIMARY KEY, f float, g double, tm time(6));`)
	m.ExecIn(t, dbname, `INSERT INTO items SELECT seq, 1, md5(seq), seq / 7, TIMESTAMP'2024-01-01 00:00:00.123456' + INTERVAL seq SECOND FROM seq_1_to_2000`)
	m.ExecIn(t, dbname, `INSERT INTO accounts SELECT seq % 5, seq DIV 5, seq * 10, IF(seq % 3 = 0, NULL, concat('note ', seq, ' é')) FROM seq_0_to_499`)
	m.ExecIn(t, dbname, `INSERT INTO kinds VALUES
		('a', 18446744073709551615, -128, b'10101', 2024, '2024-02-29', '2024-01-01 12:00:00.125', x'00ff10', x'0102', 'y', 'a,c', 'café', -1234567890123456789012345678.0123456789),
		('B', 0, 127, b'0', 1901, '1000-01-01', '1970-01-01 00:00:01.000', '', x'000000', 'x', '', '', 0),
		('c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		('d é', 1, 0, b'11111', 2155, '9999-12-31', '2038-01-19 03:14:07.999', x'ff', x'ffffff', 'x', 'b', 'x', 0.5)`)
	m.ExecIn(t, dbname, `INSERT INTO floats VALUES (1, 1.5, 0.1, '-838:59:59.000000'), (2, NULL, -2.5e300, '12:34:56.789012'), (3, 16777217, 1e-300, NULL)`)
	srcURL := m.URL(dbname)
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	source := dbname
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "500ms")
	l := myLake{t: t, wh: wh, source: source, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshots to finish", func() bool {
		for _, tb := range []string{"items", "accounts", "kinds", "floats"} {
			if st, _ := l.snapshot(tb); st != "done" {
				return false
			}
		}
		return true
	})
	myWaitFor(t, s, 2*time.Minute, "the silver tables to be published", func() bool {
		n := 0
		l.read(func(cat *lake.Catalog) {
			for _, tb := range []string{"items", "accounts", "kinds", "floats"} {
				if _, err := cat.LoadTable(context.Background(), silver.Ident(source, dbname, tb)); err == nil {
					n++
				}
			}
		})
		return n == 4
	})
	for _, q := range []string{
		"UPDATE items SET version = version + 1, payload = 'updated' WHERE id <= 20",
		"DELETE FROM items WHERE id BETWEEN 30 AND 39",
		"INSERT INTO items VALUES (5000, 1, NULL, NULL, NULL)",
		"UPDATE accounts SET note = 'nöte' WHERE tenant = 1",
		"UPDATE kinds SET u = 42, s = 'a,b,c' WHERE k = 'B'",
		"UPDATE floats SET g = 3.25 WHERE id = 1",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	// 1. While tidemark runs: every table equal, exit 0; the chunk hashes
	// computed in SQL agree with silver's for every chunk (the tables with
	// float, double and time columns are hashed in tidemark).
	rep, code, out := myVerify(t, srcURL, wh, source)
	t.Logf("tidemark verify:\n%s", out)
	if code != 0 {
		t.Fatalf("verify after the capture: exit %d\n%s", code, out)
	}
	for _, tb := range []string{"items", "accounts", "kinds", "floats"} {
		tr := myTableReport(t, rep, tb)
		if tr.Status != verify.StatusEqual || tr.ChunksDiffering != 0 || tr.SourceRows != tr.SilverRows || tr.SourceRows == 0 {
			t.Errorf("%s: %+v", tb, tr)
		}
		if want := tb != "floats"; tr.Pushdown != want {
			t.Errorf("%s: pushdown %v, want %v", tb, tr.Pushdown, want)
		}
		if !strings.HasPrefix(tr.Position, "000001:") {
			t.Errorf("%s: position %q, want a binlog position 000001:…", tb, tr.Position)
		}
	}
	// The same without pushdown.
	if rep, code, out := myVerify(t, srcURL, wh, source, "--no-pushdown"); code != 0 || rep.Tables[0].Pushdown {
		t.Fatalf("verify --no-pushdown: exit %d\n%s", code, out)
	}

	// 2. A silver row deleted behind tidemark's back (silver's cursor kept).
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	tamperMySilver(t, wh, source, dbname, "items", int64(7))
	rep, code, out = myVerify(t, srcURL, wh, source)
	t.Logf("tidemark verify after the silver tamper:\n%s", out)
	tr := myTableReport(t, rep, "items")
	if code != verify.ExitDifferences || tr.Status != verify.StatusDifferent || tr.DifferencesTotal != 1 ||
		tr.Differences[0].Key != "id=7" || tr.Differences[0].Kind != verify.KindMissing {
		t.Fatalf("after deleting id=7 from silver: exit %d, %+v", code, tr)
	}
	if a := myTableReport(t, rep, "accounts"); a.Status != verify.StatusEqual {
		t.Errorf("accounts: %+v", a)
	}

	// 3. Source rows changed with no binlog record while tidemark is
	// stopped: the capture cannot see them, verify does.
	for _, q := range []string{
		"SET SESSION sql_log_bin = 0; UPDATE accounts SET balance = -1 WHERE tenant = 2 AND id = 3; " +
			"UPDATE kinds SET ts = '2001-02-03 04:05:06.789' WHERE k = 'd é'; SET SESSION sql_log_bin = 1",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep, code, out = myVerify(t, srcURL, wh, source)
	t.Logf("tidemark verify after the unlogged source changes:\n%s", out)
	if code != verify.ExitDifferences {
		t.Fatalf("exit %d, want %d\n%s", code, verify.ExitDifferences, out)
	}
	a := myTableReport(t, rep, "accounts")
	if a.Status != verify.StatusDifferent || a.DifferencesTotal != 1 || a.Differences[0].Key != "tenant=2, id=3" ||
		a.Differences[0].Kind != verify.KindValues || len(a.Differences[0].Columns) != 1 || a.Differences[0].Columns[0].Column != "balance" ||
		a.Differences[0].Columns[0].Source != "-1" {
		t.Errorf("accounts: %+v", a)
	}
	k := myTableReport(t, rep, "kinds")
	if k.Status != verify.StatusDifferent || k.DifferencesTotal != 1 || k.Differences[0].Key != `k="d é"` ||
		len(k.Differences[0].Columns) != 1 || k.Differences[0].Columns[0].Column != "ts" {
		t.Errorf("kinds: %+v", k)
	}
	// The table report names them too, and no password.
	out, code = tidemarkArgs(t, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--tables", dbname+".accounts")
	if code != verify.ExitDifferences || !strings.Contains(out, "key tenant=2, id=3: values differ") || strings.Contains(out, m.Password) {
		t.Errorf("tidemark verify --tables %s.accounts: exit %d\n%s", dbname, code, out)
	}
}

// tamperMySilver deletes the silver row of key id, keeping silver's cursor:
// drift no tidemark merge would cause.
func tamperMySilver(t *testing.T, wh, source, schema, table string, id any) {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, err := cat.LoadTable(context.Background(), silver.Ident(source, schema, table))
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for k, v := range s.Summary() {
		if strings.HasPrefix(k, "tidemark.") {
			props[k] = v
		}
	}
	if err := s.Merge(context.Background(), lake.In("id", []any{id}), nil, props); err != nil {
		t.Fatalf("tamper with silver: %v", err)
	}
}

// TestMySQLVerifyLive: verify on a MariaDB source under a concurrent
// writer (inserts, updates, deletes, multi-statement transactions) while
// tidemark runs reports no difference, and equal once the writer stops:
// rows changed while verify runs are rechecked, never reported.
func TestMySQLVerifyLive(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 5000, 1000)
	source := dbname
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "500ms")
	l := myLake{t: t, wh: wh, source: source, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the silver tables to be published", func() bool {
		n := 0
		l.read(func(cat *lake.Catalog) {
			for _, tb := range myTables {
				if _, err := cat.LoadTable(context.Background(), silver.Ident(source, dbname, tb.name)); err == nil {
					n++
				}
			}
		})
		return n == len(myTables)
	})
	w := startMyWorkload(t, db, 5000, uint64(time.Now().UnixNano()))
	for i := 0; i < 2; i++ {
		rep, code, out := myVerify(t, srcURL, wh, source, "--rounds", "10", "--chunk-rows", "64")
		if code != 0 {
			t.Fatalf("verify %d under the writer: exit %d\n%s", i, code, out)
		}
		for _, tr := range rep.Tables {
			t.Logf("live verify %d: %s %s, %d rows, %d of %d chunks differed, %d keys rechecked in %d rounds",
				i, tr.Source, tr.Status, tr.SourceRows, tr.ChunksDiffering, tr.Chunks, tr.Rechecked, tr.Rounds)
		}
	}
	w.stop()
	if err := w.failed(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	if w.ops < 200 {
		t.Fatalf("the writer ran only %d statements", w.ops)
	}
	rep, code, out := myVerify(t, srcURL, wh, source)
	if code != 0 {
		t.Fatalf("verify at rest: exit %d\n%s", code, out)
	}
	for _, tr := range rep.Tables {
		if tr.Status != verify.StatusEqual || tr.ChunksDiffering != 0 || !tr.Pushdown {
			t.Errorf("at rest: %+v", tr)
		}
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
}
