package app_test

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// TestMySQLDelta: a MariaDB source into a Delta lake (lake.format: delta):
// the snapshot, writes while it runs, a SIGKILL and a restart, streamed
// inserts, updates (of a key column too) and deletes; tidemark verify finds
// every silver table equal to the source. Then `tidemark resnapshot` of one
// table and `--replace` of another, and verify again.
func TestMySQLDelta(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	// A server of its own: verify compares at the binlog's end, which
	// other tests' writes would move.
	m := testenv.StartMariaDB(t)
	dbname := m.CreateDB(t, "mydelta")
	m.ExecIn(t, dbname, `
		CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, total decimal(12,2), note text,
			placed datetime(6), flags set('a','b'), paid bool);
		CREATE TABLE order_lines (order_id bigint, n int, sku varchar(20), qty int, PRIMARY KEY (order_id, n));`)
	m.ExecIn(t, dbname, `INSERT INTO orders SELECT seq, seq % 17, seq / 3, IF(seq % 5 = 0, NULL, concat('n', seq, ' é')),
		TIMESTAMP'2025-01-01 00:00:00.5' + INTERVAL seq MINUTE, IF(seq % 2 = 0, 'a', 'a,b'), seq % 2 FROM seq_1_to_3000`)
	m.ExecIn(t, dbname, `INSERT INTO order_lines SELECT seq DIV 3 + 1, seq % 3, concat('sku', seq % 50), seq % 9 FROM seq_0_to_2999`)
	srcURL := m.URL(dbname)
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, wh := newRunner(t, bin, srcURL, "--lake-format", "delta", "--silver-every", "500ms")
	s := r.Start()
	for round := 0; round < 10; round++ {
		for _, q := range []string{
			fmt.Sprintf("INSERT INTO orders VALUES (%d, 3, 9.99, 'new', NOW(6), 'b', 0)", 10000+round),
			fmt.Sprintf("UPDATE orders SET total = total + 1, note = 'round %d' WHERE id %% 11 = %d", round, round),
			fmt.Sprintf("DELETE FROM orders WHERE id = %d", 7+round*13),
			fmt.Sprintf("UPDATE order_lines SET qty = qty + 1 WHERE order_id = %d", 20+round),
			fmt.Sprintf("UPDATE order_lines SET n = n + 10 WHERE order_id = %d AND n = 0", 40+round),
			fmt.Sprintf("DELETE FROM order_lines WHERE order_id = %d", 60+round),
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if round == 4 {
			s.Kill(t)
			s = r.Start()
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitDeltaPublished(t, wh, dbname, dbname, "orders", "order_lines")
	rep, code, out := myVerify(t, srcURL, wh, dbname) // finds the Delta lake itself
	t.Logf("tidemark verify:\n%s", out)
	if code != 0 {
		t.Fatalf("verify of a Delta lake: exit %d\n%s", code, out)
	}
	for _, tb := range []string{"orders", "order_lines"} {
		tr := myTableReport(t, rep, tb)
		if tr.Status != verify.StatusEqual || tr.SourceRows != tr.SilverRows || tr.SourceRows == 0 {
			t.Errorf("%s: %+v", tb, tr)
		}
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// tidemark resnapshot on a Delta lake: orders read again in place,
	// order_lines rebuilt (--replace moves its Delta tables aside); changes
	// made while stopped and after are in silver.
	if _, err := db.Exec("UPDATE orders SET note = 'while stopped' WHERE id % 7 = 1"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"resnapshot", dbname + ".orders"}, {"resnapshot", "--replace", dbname + ".order_lines"}} {
		out, code := tidemarkArgs(t, r.As(args[0], args[1:]...)...)
		t.Logf("tidemark %v:\n%s", args, out)
		if code != 0 {
			t.Fatalf("tidemark %v on a Delta lake: exit %d\n%s", args, code, out)
		}
	}
	s = r.Start()
	if _, err := db.Exec("DELETE FROM order_lines WHERE order_id = 99"); err != nil {
		t.Fatal(err)
	}
	// The rebuilt order_lines has a silver table again once its snapshot
	// is complete.
	waitDeltaPublished(t, wh, dbname, dbname, "order_lines")
	rep, code, out = myVerify(t, srcURL, wh, dbname)
	if code != 0 {
		t.Fatalf("verify after the re-snapshots: exit %d\n%s", code, out)
	}
	for _, tb := range []string{"orders", "order_lines"} {
		if tr := myTableReport(t, rep, tb); tr.Status != verify.StatusEqual || tr.SourceRows != tr.SilverRows {
			t.Errorf("%s after the re-snapshot: %+v", tb, tr)
		}
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
}

// waitDeltaPublished waits (up to 2 minutes) until the silver tables of a
// Delta lake are published: verify reports a table whose initial snapshot
// is still running as not published (exit 6) rather than waiting for it.
func waitDeltaPublished(t *testing.T, wh, source, schema string, tables ...string) {
	t.Helper()
	for _, tb := range tables {
		published := filepath.Join(wh, "silver", source, schema, tb, "_delta_log")
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if _, err := os.Stat(published); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("silver %s.%s is not published (no %s) after 2 minutes", schema, tb, published)
			}
		}
	}
}
