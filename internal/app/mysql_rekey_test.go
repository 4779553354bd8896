package app_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// TestMySQLKeyChange: a primary key changed or added in the binlog of a
// MariaDB source under writes (issue 13). pk_snap's key is replaced while
// its initial snapshot runs (the snapshot starts again on the new key,
// its chunks of the old one not written). pk_live's key is replaced while
// tidemark runs (DROP PRIMARY KEY, ADD PRIMARY KEY (code, id)) and rows
// then move between keys of the new one, then tidemark is killed during
// the re-read; events, captured keyless (bronze only), gets ADD PRIMARY
// KEY (id) while tidemark runs and dies (as kill -9) right after the
// statement, once everything before it is committed and before the
// marker (failpoint mysql-rekey-before-marker); the next session meets
// the statement again. Both are read again on the new key and silver
// rebuilt (events: built) on it: status says why while the re-read runs,
// silver's identifier fields are the new key, and `tidemark verify` and a
// PyIceberg read of silver equal the source.
func TestMySQLKeyChange(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	m := testenv.StartMariaDB(t) // its own server: verify compares at the binlog end
	dbname := m.CreateDB(t, "myrekey")
	m.ExecIn(t, dbname, `
		CREATE TABLE pk_live (id int PRIMARY KEY, code varchar(20) NOT NULL DEFAULT 'c', version int NOT NULL, payload varchar(64));
		INSERT INTO pk_live SELECT seq, CONCAT('c', seq % 3), 1, md5(seq) FROM seq_1_to_3000;
		CREATE TABLE events (id int NOT NULL, v int, note varchar(40));
		INSERT INTO events SELECT seq, 0, md5(seq) FROM seq_1_to_1000;
		CREATE TABLE pk_snap (id int PRIMARY KEY, grp int NOT NULL, v varchar(40));
		INSERT INTO pk_snap SELECT seq, seq % 5, md5(seq) FROM seq_1_to_8000;`)
	srcURL := m.URL(dbname)
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Small chunks, each followed by a pause: a re-read of pk_live takes
	// 30 chunks of at least 50 ms, so status and a kill land inside it.
	pause := failpoint.EnvVar + "=mysql-snapshot-between-chunks=sleep(50)"
	r, wh := newRunner(t, bin, srcURL, "--snapshot-chunk-rows", "100", "--silver-every", "300ms")
	r.Env = []string{pause}
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	summary := func(table string) map[string]string {
		var sum map[string]string
		l.read(func(cat *lake.Catalog) {
			if tb, err := cat.LoadTable(context.Background(), bronze.Ident(dbname, change.TableID{Schema: dbname, Name: table})); err == nil {
				sum = tb.Summary()
			}
		})
		return sum
	}
	silverKey := func(table string) string {
		var names []string
		l.read(func(cat *lake.Catalog) {
			tb, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, table))
			if err != nil {
				return
			}
			sch := tb.Schema()
			for _, id := range sch.IdentifierFieldIDs {
				n, _ := sch.FindColumnName(id)
				names = append(names, n)
			}
		})
		return strings.Join(names, ", ")
	}

	s := r.Start()
	// pk_snap: the key changed while its initial snapshot runs; the
	// snapshot starts again on the new key, its chunks of the old one not
	// written.
	myWaitFor(t, s, 2*time.Minute, "the snapshot of pk_snap to be under way", func() bool {
		st, n := l.snapshot("pk_snap")
		return st == "running" && n >= 300 || st == "done"
	})
	if st, n := l.snapshot("pk_snap"); st == "done" {
		t.Errorf("pk_snap's initial snapshot was done (%d rows) before its key changed: the restart on the new key is not tested", n)
	}
	if _, err := db.Exec("ALTER TABLE pk_snap DROP PRIMARY KEY, ADD PRIMARY KEY (grp, id)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("UPDATE pk_snap SET grp = 9, v = 'moved' WHERE id % 11 = 0"); err != nil {
		t.Fatal(err)
	}
	myWaitFor(t, s, 3*time.Minute, "the snapshots to finish", func() bool {
		a, _ := l.snapshot("pk_live")
		b, _ := l.snapshot("events")
		c, _ := l.snapshot("pk_snap")
		return a == "done" && b == "done" && c == "done" && summary("pk_snap")[bronze.PropKey] == `["grp","id"]`
	})
	if sp, _ := pipeline.ParseSnapshotState(summary("pk_snap")[pipeline.PropSnapshot]); sp.Rows != 8000 {
		t.Errorf("pk_snap's snapshot on the new key counts %d rows, want 8000 (read again from its first key)", sp.Rows)
	}
	myWaitFor(t, s, 2*time.Minute, "silver pk_live keyed by (id)", func() bool { return silverKey("pk_live") == "id" })

	// A writer on both tables, by id, all along.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
		next := 10000
		for i := 0; ctx.Err() == nil; i++ {
			var q string
			var args []any
			switch rng.IntN(6) {
			case 0:
				next++
				q, args = "INSERT INTO pk_live (id, code, version, payload) VALUES (?, ?, 1, 'new')", []any{next, fmt.Sprintf("c%d", next%3)}
			case 1:
				q, args = "DELETE FROM pk_live WHERE id = ?", []any{rng.IntN(3000) + 1}
			case 2:
				next++
				q, args = "INSERT INTO events VALUES (?, 0, 'new')", []any{next}
			case 3:
				q, args = "UPDATE events SET v = v + 1 WHERE id = ?", []any{rng.IntN(1000) + 1}
			default:
				q, args = "UPDATE pk_live SET version = version + 1, payload = ? WHERE id = ?", []any{fmt.Sprintf("v%d", i), rng.IntN(3000) + 1}
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil && ctx.Err() == nil {
				werr = err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	stopWriter := func() {
		cancel()
		wg.Wait()
		if werr != nil {
			t.Fatalf("writer: %v", werr)
		}
	}
	defer stopWriter()
	exec1 := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	statusSays := func(table, want string) {
		t.Helper()
		myWaitFor(t, s, time.Minute, "bronze to record the re-read of "+table, func() bool {
			return strings.Contains(summary(table)[pipeline.PropResnapshotReason], want)
		})
		out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
		if err != nil {
			t.Fatalf("tidemark status: %v\n%s", err, out)
		}
		sp, _ := pipeline.ParseSnapshotState(summary(table)[pipeline.PropSnapshot])
		if sp.Status != pipeline.SnapshotDone && !strings.Contains(string(out), "being read again: "+want) {
			t.Errorf("tidemark status during the re-read of %s (snapshot %s) does not say %q:\n%s", table, sp.Status, want, out)
		}
	}

	// pk_live: the key replaced while running, rows moved between keys of
	// the new one, then a kill during the re-read.
	time.Sleep(300 * time.Millisecond)
	exec1("ALTER TABLE pk_live DROP PRIMARY KEY, ADD PRIMARY KEY (code, id)")
	exec1("UPDATE pk_live SET code = 'changed' WHERE id % 7 = 0")
	statusSays("pk_live", "the table's primary key changed from (id) to (code, id)")
	myWaitFor(t, s, time.Minute, "the re-read of pk_live to be under way", func() bool {
		st, n := l.snapshot("pk_live")
		return st == "running" && n >= 500 || st == "done"
	})
	if st, n := l.snapshot("pk_live"); st == "done" {
		t.Logf("the re-read of pk_live was done (%d rows) before the kill", n)
	}
	if k := summary("pk_live")[bronze.PropKey]; k != `["code","id"]` {
		t.Errorf("bronze pk_live records key %s after the change, want [\"code\",\"id\"]", k)
	}
	s.Kill(t)

	// events: a key added while running; the session dies right after
	// the statement, before the marker.
	r.Env = []string{pause + ";mysql-rekey-before-marker=exit"}
	s = r.Start()
	myWaitFor(t, s, 2*time.Minute, "the re-read of pk_live to resume", func() bool { st, _ := l.snapshot("pk_live"); return st == "done" })
	exec1("ALTER TABLE events ADD PRIMARY KEY (id)")
	select {
	case <-s.Done:
	case <-time.After(time.Minute):
		t.Fatal("tidemark did not reach failpoint mysql-rekey-before-marker within a minute")
	}
	if code := s.Cmd.ProcessState.ExitCode(); code != failpoint.ExitCode {
		t.Fatalf("tidemark exited with %d, want %d (failpoint mysql-rekey-before-marker): %v", code, failpoint.ExitCode, s.Err)
	}
	if k := summary("events")[bronze.PropKey]; k == `["id"]` {
		t.Fatalf("bronze records key %s for events before the marker was committed", k)
	}
	r.Env = []string{pause}
	s = r.Start()
	statusSays("events", "the table got a primary key (id)")
	myWaitFor(t, s, time.Minute, "bronze to record the key of events", func() bool { return summary("events")[bronze.PropKey] == `["id"]` })

	time.Sleep(time.Second)
	stopWriter()
	target := binlogLSN(t, db)
	myWaitFor(t, s, 3*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	myWaitFor(t, s, 3*time.Minute, "silver to be rebuilt on the new keys", func() bool {
		return silverKey("pk_live") == "code, id" && silverKey("events") == "id" && silverKey("pk_snap") == "grp, id"
	})
	rep, code, out := myVerify(t, srcURL, wh, dbname)
	t.Logf("tidemark verify:\n%s", out)
	if code != 0 {
		t.Errorf("verify after the key changes: exit %d\n%s", code, out)
	}
	for _, tb := range []string{"pk_live", "events", "pk_snap"} {
		if tr := myTableReport(t, rep, tb); tr.Status != verify.StatusEqual || tr.SourceRows == 0 || tr.SourceRows != tr.SilverRows {
			t.Errorf("verify %s: %+v", tb, tr)
		}
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	for table, want := range map[string]string{"pk_live": "code, id", "events": "id", "pk_snap": "grp, id"} {
		if k := silverKey(table); k != want {
			t.Errorf("silver %s is keyed by (%s) after the change, want (%s)", table, k, want)
		}
	}
	for _, tb := range []myTable{
		{"pk_live", []string{"code", "id"}, []string{"code", "id", "version", "payload"}},
		{"events", []string{"id"}, []string{"id", "v", "note"}},
		{"pk_snap", []string{"grp", "id"}, []string{"grp", "id", "v"}},
	} {
		checkMySQLSilver(t, db, wh, dbname, dbname, []myTable{tb})
		want := myRows(t, db, tb)
		rows, ok := testenv.PyIcebergRead(t, wh, silver.Ident(dbname, dbname, tb.name))
		if !ok {
			continue
		}
		if len(rows) != len(want) {
			t.Errorf("PyIceberg reads %d rows of silver %s, the source has %d", len(rows), tb.name, len(want))
		}
		bad := 0
		for _, row := range rows {
			vals := make([]string, len(tb.cols))
			for i, c := range tb.cols {
				vals[i] = lakeText(row[c])
				if row[c] != nil {
					vals[i] = fmt.Sprint(row[c])
				}
			}
			k := strings.Join(vals[:len(tb.key)], ",")
			if w, ok := want[k]; !ok || strings.Join(w, "|") != strings.Join(vals, "|") {
				if bad++; bad <= 5 {
					t.Errorf("PyIceberg silver %s key %s: %v, source %v", tb.name, k, vals, w)
				}
			}
		}
	}
}

// TestMySQLKeyDropped: a primary key dropped with no key replacing it
// (ALTER TABLE … DROP PRIMARY KEY) while tidemark runs keeps the table
// keyed by its old key, as on PostgreSQL: the stream goes on (warning
// mysql_key_dropped), also across a restart (the server gives no key, the
// table is opened by the key bronze records), and silver, still keyed by
// the old key, equals the source.
func TestMySQLKeyDropped(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	_, srcURL, db, dbname := newMySQLSource(t, 200, 10)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshot of items", func() bool { st, _ := l.snapshot("items"); return st == "done" })
	for _, q := range []string{
		"ALTER TABLE items DROP PRIMARY KEY",
		"UPDATE items SET version = version + 1, payload = 'after drop' WHERE id <= 20",
		"INSERT INTO items (id, version, payload, amount, updated) VALUES (5001, 1, 'new', 1.5, '2025-01-01 00:00:00')",
		"DELETE FROM items WHERE id BETWEEN 30 AND 39",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	log, _ := os.ReadFile(r.LogPath)
	if !strings.Contains(string(log), "mysql_key_dropped") {
		t.Errorf("the log does not warn mysql_key_dropped")
	}
	// Stopped, then more changes; the next start finds no key at the
	// source and keeps the recorded one.
	if _, err := db.Exec("UPDATE items SET version = version + 10 WHERE id BETWEEN 50 AND 60"); err != nil {
		t.Fatal(err)
	}
	s = r.Start()
	target = binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with %d after SIGTERM", code)
	}
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", dbname).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	checkMySQLSilver(t, db, wh, dbname, dbname, []myTable{{"items", []string{"id"}, []string{"id", "version", "payload", "amount", "updated"}}})
	var k string
	l.read(func(cat *lake.Catalog) {
		if tb, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, "items")); err == nil {
			sch := tb.Schema()
			for _, id := range sch.IdentifierFieldIDs {
				k, _ = sch.FindColumnName(id)
			}
		}
	})
	if k != "id" {
		t.Errorf("silver items is keyed by %q after the key was dropped, want id", k)
	}
}
