package testenv_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/tidemark/tidemark/internal/testenv"
)

func variable(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v sql.NullString
	if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&v); err != nil {
		t.Fatalf("read @@%s: %v", name, err)
	}
	return v.String
}

// TestMariaDBStarts checks the settings the MySQL source needs, that the
// capture user can do what it must with exactly its documented grants
// (SHOW BINLOG STATUS, SHOW BINARY LOGS, SELECT, a GTID binlog dump), that
// a commit moves the GTID position, and that Restart keeps data and binlog.
func TestMariaDBStarts(t *testing.T) {
	m := testenv.StartMariaDB(t)
	for name, want := range map[string]string{
		"log_bin": "1", "binlog_format": "ROW", "binlog_row_image": "FULL",
		"binlog_row_metadata": "FULL", "gtid_strict_mode": "1",
		"server_id": fmt.Sprint(m.ServerID), "gtid_domain_id": "0",
		"bind_address": "127.0.0.1",
	} {
		if got := variable(t, m.Root, name); got != want {
			t.Errorf("@@%s = %q, want %q", name, got, want)
		}
	}
	if tmp := variable(t, m.Root, "tmpdir"); !strings.HasPrefix(tmp, filepath.Dir(m.DataDir)+"/") {
		t.Errorf("@@tmpdir = %q, want a directory of its own (servers of other test processes share /tmp)", tmp)
	}
	var anon int
	if err := m.Root.QueryRow("SELECT COUNT(*) FROM mysql.user WHERE User = ''").Scan(&anon); err != nil || anon != 0 {
		t.Errorf("anonymous accounts: %d (%v), want none", anon, err)
	}

	before := m.GTIDPos(t)
	m.Exec(t, "CREATE TABLE t (id int primary key, v varchar(10))")
	m.Exec(t, "INSERT INTO t VALUES (1, 'a')")
	after := m.GTIDPos(t)
	if after == before || !strings.HasPrefix(after, fmt.Sprintf("0-%d-", m.ServerID)) {
		t.Fatalf("gtid_binlog_pos %q -> %q: want it to move to domain 0, server %d", before, after, m.ServerID)
	}

	// The capture user, through its tidemark URL.
	u, err := url.Parse(m.URL(""))
	if err != nil || u.Scheme != "mysql" || u.Path != "/"+m.DB || u.User.Username() != m.User {
		t.Fatalf("URL() = %q (%v)", m.URL(""), err)
	}
	pass, _ := u.User.Password()
	capture, err := sql.Open("mysql", m.DSN(m.User, pass, m.DB))
	if err != nil {
		t.Fatal(err)
	}
	defer capture.Close()
	var file string
	var pos int64
	var doDB, ignoreDB string
	if err := capture.QueryRow("SHOW BINLOG STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		t.Fatalf("capture user: SHOW BINLOG STATUS: %v", err)
	}
	if _, err := capture.Exec("SHOW BINARY LOGS"); err != nil {
		t.Fatalf("capture user: SHOW BINARY LOGS: %v", err)
	}
	var v string
	if err := capture.QueryRow("SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != "a" {
		t.Fatalf("capture user: SELECT: %q, %v", v, err)
	}
	if _, err := capture.Exec("INSERT INTO t VALUES (2, 'b')"); err == nil {
		t.Fatal("capture user could INSERT: it should have read-only grants")
	}

	// A GTID binlog dump as the capture user sees the insert's GTID.
	gtid := readNextGTID(t, m, before)
	if gtid == "" {
		t.Fatal("no GTID event read")
	}

	m.Exec(t, "INSERT INTO t VALUES (2, 'b')")
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := m.Root.QueryRow("SELECT COUNT(*) FROM shop.t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after Restart: %d rows (%v), want 2", n, err)
	}
	if err := m.KillRestart(); err != nil {
		t.Fatal(err)
	}
	if got := m.GTIDPos(t); got == after {
		t.Fatalf("after KillRestart gtid_binlog_pos %q, want the second insert's", got)
	}

	// Halt leaves it down (connections are refused) until Resume.
	if err := m.Halt(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Root.PingContext(ctx); err == nil {
		t.Fatal("ping succeeded while halted")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := m.Root.PingContext(ctx); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

func readNextGTID(t *testing.T, m *testenv.MariaDB, from string) string {
	t.Helper()
	gset, err := mysql.ParseMariadbGTIDSet(from)
	if err != nil {
		t.Fatal(err)
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 4242, Flavor: "mariadb", Host: m.Host, Port: uint16(m.Port),
		User: m.User, Password: m.Password,
	})
	defer syncer.Close()
	st, err := syncer.StartSyncGTID(gset)
	if err != nil {
		t.Fatalf("binlog dump as %s: %v", m.User, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			t.Fatalf("binlog dump: %v", err)
		}
		if g, ok := ev.Event.(*replication.MariadbGTIDEvent); ok {
			return g.GTID.String()
		}
	}
}

// TestMariaDBOptionsAndPurge starts a server with other binlog settings and
// purges its binlog.
func TestMariaDBOptionsAndPurge(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBBinlogFormat("STATEMENT"),
		testenv.MariaDBBinlogRowImage("MINIMAL"), testenv.MariaDBMaxBinlogSize(4096),
		testenv.MariaDBDomainID(7), testenv.MariaDBServerID(99))
	for name, want := range map[string]string{
		"binlog_format": "STATEMENT", "binlog_row_image": "MINIMAL", "max_binlog_size": "4096",
		"gtid_domain_id": "7", "server_id": "99",
	} {
		if got := variable(t, m.Root, name); got != want {
			t.Errorf("@@%s = %q, want %q", name, got, want)
		}
	}
	m.Exec(t, "CREATE TABLE t (id int primary key, v text)")
	for i := 0; i < 10; i++ {
		m.Exec(t, "INSERT INTO t VALUES (?, ?)", i, strings.Repeat("x", 1000))
	}
	if logs := m.BinaryLogs(t); len(logs) < 2 {
		t.Fatalf("max_binlog_size 4096: %d binlog files after 10 KB of inserts, want several", len(logs))
	}
	if !strings.HasPrefix(m.GTIDPos(t), "7-99-") {
		t.Fatalf("gtid_binlog_pos %q, want domain 7 server 99", m.GTIDPos(t))
	}
	last := m.PurgeBinlogs(t)
	if logs := m.BinaryLogs(t); len(logs) != 1 || logs[0].Name != last {
		t.Fatalf("after PurgeBinlogs: %v, want only %s", logs, last)
	}

	off := testenv.StartMariaDB(t, testenv.MariaDBNoBinlog())
	if got := variable(t, off.Root, "log_bin"); got != "0" {
		t.Fatalf("MariaDBNoBinlog: @@log_bin = %q", got)
	}
}
