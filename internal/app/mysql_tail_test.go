package app_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMySQLTail: `tidemark tail` on a MariaDB source prints the inserts,
// updates and deletes made after it started as JSON lines with their
// values, and stops at --max-records; --format debezium prints Debezium's
// MySQL source block (binlog file, pos, row), --format beam Beam's
// metadata with the binlog file as its schema.
func TestMySQLTail(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	// A server of its own: the binlog dump the test waits for must be
	// tail's, not another test's pipeline.
	m := testenv.StartMariaDB(t)
	dbname := m.CreateDB(t, "mytail")
	m.ExecIn(t, dbname, `CREATE TABLE orders (id int PRIMARY KEY, amount decimal(10,2), note varchar(50), placed datetime(6));
		INSERT INTO orders VALUES (100, 1.00, 'before tail', NULL)`)
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "tail", "--source", m.URL(dbname), "--max-records", "3", "--max-duration", "2m")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	// The same changes in the Debezium and Beam shapes.
	shapes := map[string]*syncBuffer{"debezium": {}, "beam": {}}
	var shapeErrs syncBuffer
	for format, out := range shapes {
		c := exec.Command(bin, "tail", "--source", m.URL(dbname), "--format", format, "--max-records", "3", "--max-duration", "2m")
		c.Stdout, c.Stderr = out, &shapeErrs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer time.AfterFunc(3*time.Minute, func() { _ = c.Process.Kill() }).Stop() // after the Wait below
		defer func() {
			if err := c.Wait(); err != nil {
				t.Errorf("tail --format %s: %v\n%s", format, err, shapeErrs.String())
			}
		}()
	}
	// Wait for the tails' binlog dumps, then change rows.
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("tail exited before it read the binlog: %v\n%s", err, &stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail did not start a binlog dump\n%s", &stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, q := range []string{
		"INSERT INTO orders VALUES (1, 9.99, 'first', '2024-05-06 07:08:09.5')",
		"UPDATE orders SET amount = 10.50 WHERE id = 1",
		"DELETE FROM orders WHERE id = 1",
		"INSERT INTO orders VALUES (2, 2.00, 'past the limit', NULL)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail: %v\n%s", err, &stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("tail did not stop after --max-records 3\nstdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("tail printed %d lines, want 3:\n%s\nstderr:\n%s", len(lines), &stdout, &stderr)
	}
	type ev struct {
		Op     string         `json:"op"`
		Before map[string]any `json:"before"`
		After  map[string]any `json:"after"`
		Source struct {
			Connector, Schema, Table string
			LSN                      uint64
		} `json:"source"`
	}
	var evs []ev
	for _, l := range lines {
		var e ev
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		if e.Source.Connector != "mysql" || e.Source.Schema != dbname || e.Source.Table != "orders" || e.Source.LSN == 0 {
			t.Errorf("source of %s", l)
		}
		evs = append(evs, e)
	}
	ins, upd, del := evs[0], evs[1], evs[2]
	if ins.Op != "c" || ins.After["id"] != float64(1) || ins.After["amount"] != "9.99" || ins.After["note"] != "first" ||
		ins.After["placed"] != "2024-05-06T07:08:09.5" {
		t.Errorf("insert: %s", lines[0])
	}
	if upd.Op != "u" || upd.After["amount"] != "10.50" || upd.After["note"] != "first" || upd.Before["amount"] != "9.99" {
		t.Errorf("update: %s", lines[1])
	}
	if del.Op != "d" || del.After != nil || del.Before["id"] != float64(1) {
		t.Errorf("delete: %s", lines[2])
	}
	if !(ins.Source.LSN < upd.Source.LSN && upd.Source.LSN < del.Source.LSN) {
		t.Errorf("positions not increasing: %d, %d, %d", ins.Source.LSN, upd.Source.LSN, del.Source.LSN)
	}
	if strings.Contains(stdout.String()+stderr.String(), m.Password) {
		t.Errorf("the password appears in tail's output")
	}
	var base string
	if err := db.QueryRow("SELECT @@log_bin_basename").Scan(&base); err != nil {
		t.Fatal(err)
	}
	base = filepath.Base(base)
	for i, l := range strings.Split(strings.TrimSpace(waitLines(t, shapes["debezium"], 3)), "\n") {
		var e struct {
			Op     string         `json:"op"`
			After  map[string]any `json:"after"`
			Source map[string]any `json:"source"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("debezium: not JSON: %s", l)
		}
		file, _ := e.Source["file"].(string)
		if e.Op != "cud"[i:i+1] || e.Source["connector"] != "mysql" || e.Source["db"] != dbname || e.Source["table"] != "orders" ||
			!strings.HasPrefix(file, base+".") || e.Source["pos"] == nil || e.Source["pos"] == float64(0) {
			t.Errorf("debezium line %d: %s", i+1, l)
		}
		if i == 0 && (e.After["amount"] != "A+c=" || e.After["placed"] != float64(1714979289500000)) {
			t.Errorf("debezium insert values (decimal 9.99 as Connect bytes, datetime as µs): %s", l)
		}
	}
	for i, l := range strings.Split(strings.TrimSpace(waitLines(t, shapes["beam"], 3)), "\n") {
		var e struct {
			Metadata map[string]any `json:"metadata"`
			Before   *struct {
				Fields map[string]any `json:"fields"`
			} `json:"before"`
			After *struct {
				Fields map[string]any `json:"fields"`
			} `json:"after"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("beam: not JSON: %s", l)
		}
		schema, _ := e.Metadata["schema"].(string)
		if e.Metadata["connector"] != "mysql" || e.Metadata["database"] != dbname || e.Metadata["table"] != "orders" || !strings.HasPrefix(schema, base+".") {
			t.Errorf("beam line %d metadata: %s", i+1, l)
		}
		if (i < 2) != (e.After != nil) || (i == 2 && (e.Before == nil || e.Before.Fields["id"] != float64(1))) {
			t.Errorf("beam line %d before/after: %s", i+1, l)
		}
	}
}

// waitLines waits (up to two minutes) until out holds n lines and
// returns them.
func waitLines(t *testing.T, out *syncBuffer, n int) string {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); strings.Count(out.String(), "\n") < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines after 2 minutes, want %d:\n%s", strings.Count(out.String(), "\n"), n, out)
		}
	}
	return out.String()
}
