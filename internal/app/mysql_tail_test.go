package app_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMySQLTail: `tidemark tail` on a MariaDB source prints the inserts,
// updates and deletes made after it started as JSON lines with their
// values, and stops at --max-records.
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
	// Wait for tail's binlog dump, then change rows.
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
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
}
