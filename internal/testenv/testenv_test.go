package testenv_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func queryString(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestSharedLogicalReplication(t *testing.T) {
	pg := testenv.Shared(t)
	if pg2 := testenv.Shared(t); pg2 != pg {
		t.Fatalf("Shared returned two servers")
	}
	url := pg.CreateDB(t, "Testenv-Shared")

	if got := queryString(t, url, "SHOW wal_level"); got != "logical" {
		t.Errorf("wal_level = %q, want logical", got)
	}
	pg.Exec(t, url, `
		CREATE TABLE t (id int PRIMARY KEY, v text);
		INSERT INTO t VALUES (1, 'a'), (2, 'b');`)
	if got := queryString(t, url, "SELECT count(*)::text FROM t"); got != "2" {
		t.Errorf("count = %s, want 2", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rconn, err := pgconn.Connect(ctx, url+"&replication=database")
	if err != nil {
		t.Fatalf("replication connect: %v", err)
	}
	defer rconn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, rconn)
	if err != nil {
		t.Fatalf("IDENTIFY_SYSTEM: %v", err)
	}
	if sys.DBName == "" || sys.XLogPos == 0 {
		t.Errorf("IDENTIFY_SYSTEM = %+v, want a database name and a WAL position", sys)
	}
	// A slot is left behind on purpose: CreateDB's cleanup must drop it.
	if _, err := pglogrepl.CreateReplicationSlot(ctx, rconn, "testenv_slot", "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{}); err != nil {
		t.Fatalf("create slot: %v", err)
	}
}

func TestCreateDBDropsSlots(t *testing.T) {
	pg := testenv.Shared(t)
	// Run after TestSharedLogicalReplication's cleanup: no slot must be left.
	admin := pg.URL("postgres")
	if got := queryString(t, admin, "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'testenv_slot'"); got != "0" {
		t.Errorf("%s slots named testenv_slot left after the test ended, want 0", got)
	}
}

// TestDropSlotEndsItsReader: DropSlot drops a slot that a walsender is
// still streaming from (terminating it), and a missing slot is no error.
func TestDropSlotEndsItsReader(t *testing.T) {
	pg := testenv.Shared(t)
	dbURL := pg.CreateDB(t, "testenv_dropslot")
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rconn, err := pgconn.Connect(ctx, dbURL+"&replication=database")
	if err != nil {
		t.Fatalf("replication connect: %v", err)
	}
	defer rconn.Close(context.Background())
	slot, err := pglogrepl.CreateReplicationSlot(ctx, rconn, "testenv_held", "test_decoding", pglogrepl.CreateReplicationSlotOptions{})
	if err != nil {
		t.Fatalf("create slot: %v", err)
	}
	lsn, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, rconn, "testenv_held", lsn, pglogrepl.StartReplicationOptions{}); err != nil {
		t.Fatalf("start replication: %v", err)
	}
	held := "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'testenv_held' AND active"
	if got := queryString(t, dbURL, held); got != "1" {
		t.Fatalf("%s active slots, want the one being streamed", got)
	}
	if err := pg.DropSlot(ctx, db, "testenv_held"); err != nil {
		t.Fatalf("DropSlot of a slot being streamed: %v", err)
	}
	if got := queryString(t, dbURL, "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'testenv_held'"); got != "0" {
		t.Errorf("%s slots named testenv_held after DropSlot, want 0", got)
	}
	if err := pg.DropSlot(ctx, db, "testenv_held"); err != nil {
		t.Errorf("DropSlot of a missing slot: %v", err)
	}
}

func TestStartSettingsRestartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second server")
	}
	testenv.Shared(t) // skips (or fails) consistently when PostgreSQL is missing
	pg, err := testenv.Start(testenv.Options{Settings: map[string]string{"logical_decoding_work_mem": "64kB"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	url := pg.URL("postgres")
	if got := queryString(t, url, "SHOW logical_decoding_work_mem"); got != "64kB" {
		t.Errorf("logical_decoding_work_mem = %q, want 64kB", got)
	}
	if got := queryString(t, url, "SHOW unix_socket_directories"); got != pg.DataDir {
		t.Errorf("unix_socket_directories = %q, want %q", got, pg.DataDir)
	}
	pg.Exec(t, url, "CREATE TABLE survives (id int)")

	start := time.Now()
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", time.Since(start))
	if got := queryString(t, url, "SELECT count(*)::text FROM survives"); got != "0" {
		t.Errorf("after restart: count = %s", got)
	}

	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(pg.DataDir)); !os.IsNotExist(err) {
		t.Errorf("temp dir still exists after Stop: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Errorf("server still accepts connections after Stop")
	}
}

func TestBinDir(t *testing.T) {
	t.Setenv("TIDEMARK_PG_BIN", t.TempDir())
	if _, err := testenv.BinDir(); err == nil {
		t.Errorf("BinDir with an empty TIDEMARK_PG_BIN: want an error")
	}
}
