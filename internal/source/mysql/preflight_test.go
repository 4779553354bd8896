package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	_ "github.com/go-sql-driver/mysql"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

// captureDB opens a pool as the server's capture user (the grants tidemark
// documents, nothing more).
func captureDB(t *testing.T, m *testenv.MariaDB) *sql.DB {
	t.Helper()
	return openDB(t, m.DSN(m.User, m.Password, m.DB))
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// wantFault checks err's code and exit code and that the message says each of parts.
func wantFault(t *testing.T, err error, sentinel *fault.Error, exit int, parts ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v, want [%s]", err, sentinel.Code)
	}
	if got := fault.ExitCode(err); got != exit {
		t.Errorf("exit code %d, want %d (%v)", got, exit, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

// TestPreflightReady: a server set up as documented passes, and
// Preflight reports its identity and binlog position.
func TestPreflightReady(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBDomainID(3))
	m.Exec(t, "CREATE TABLE t (id int primary key)")
	m.Exec(t, "INSERT INTO t VALUES (1)")
	ctx := context.Background()
	db := captureDB(t, m)
	info, err := Preflight(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if info.Flavor != MariaDB || info.ServerID != m.ServerID || info.ServerUUID != "" || !info.GTIDMode ||
		!info.GTIDStrictMode || info.GTIDDomainID != 3 {
		t.Errorf("info: %+v", info)
	}
	if info.GTIDExecuted.String() != m.GTIDPos(t) || !strings.HasPrefix(info.GTIDExecuted.String(), fmt.Sprintf("3-%d-", m.ServerID)) {
		t.Errorf("GTIDExecuted %q, server says %q", info.GTIDExecuted, m.GTIDPos(t))
	}
	logs := m.BinaryLogs(t)
	if len(info.Binlogs) != len(logs) || info.BinlogFile != logs[len(logs)-1].Name || int64(info.BinlogPos) != logs[len(logs)-1].Size {
		t.Errorf("binlogs %v at %s:%d, server lists %v", info.Binlogs, info.BinlogFile, info.BinlogPos, logs)
	}
	if !info.GTIDPurged.IsEmpty() || len(info.Warnings) != 0 {
		t.Errorf("GTIDPurged %q (nothing was purged), warnings %q", info.GTIDPurged, info.Warnings)
	}
	if err := CheckResume(ctx, db, info.Position()); err != nil {
		t.Errorf("CheckResume at the current position: %v", err)
	}

	// server_id: the source's own is taken; another is free.
	wantFault(t, CheckServerID(ctx, db, m.ServerID, "tidemark-host"), fault.ErrServerIDConflict, fault.ExitConfig,
		fmt.Sprint(m.ServerID), "the source server's own server_id")
	if err := CheckServerID(ctx, db, m.ServerID+1, "tidemark-host"); err != nil {
		t.Errorf("CheckServerID of a free id: %v", err)
	}

	// Advice for gtid_strict_mode=OFF, not an error.
	m.Exec(t, "SET GLOBAL gtid_strict_mode = OFF")
	info, err = Preflight(ctx, db)
	if err != nil || len(info.Warnings) != 1 || !strings.Contains(info.Warnings[0], "gtid_strict_mode") {
		t.Errorf("gtid_strict_mode=OFF: %v, warnings %q", err, info.Warnings)
	}
}

// TestPreflightSettings: each setting tidemark needs, off, stops it with
// server_config (exit 2) naming the setting and the fix.
func TestPreflightSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  testenv.MariaDBOption
		want []string
	}{
		{"statement format", testenv.MariaDBBinlogFormat("STATEMENT"), []string{"binlog_format = STATEMENT", "SET GLOBAL binlog_format = 'ROW'"}},
		{"mixed format", testenv.MariaDBBinlogFormat("MIXED"), []string{"binlog_format = MIXED"}},
		{"minimal image", testenv.MariaDBBinlogRowImage("MINIMAL"), []string{"binlog_row_image = MINIMAL", "SET GLOBAL binlog_row_image = 'FULL'"}},
		{"minimal metadata", testenv.MariaDBBinlogRowMetadata("MINIMAL"), []string{"binlog_row_metadata = MINIMAL", "SET GLOBAL binlog_row_metadata = 'FULL'"}},
		{"no binlog", testenv.MariaDBNoBinlog(), []string{"log_bin is OFF"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testenv.StartMariaDB(t, tc.opt)
			_, err := Preflight(context.Background(), captureDB(t, m))
			wantFault(t, err, fault.ErrServerConfig, fault.ExitConfig, tc.want...)
		})
	}
}

// TestPreflightGrants: a user without one of the privileges binlog capture
// needs stops with permission_denied (exit 3) naming the GRANT to run.
func TestPreflightGrants(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	ctx := context.Background()
	for i, tc := range []struct {
		privs   string
		missing string // "" = passes
	}{
		{"SELECT, REPLICATION SLAVE", "BINLOG MONITOR"},
		{"SELECT, BINLOG MONITOR", "REPLICATION SLAVE"},
		// Without a privilege on the database the server refuses the
		// connection itself (1044).
		{"REPLICATION SLAVE, REPLICATION CLIENT", "database"}, // REPLICATION CLIENT is BINLOG MONITOR's old name
		{"", "database"},
		{"REPLICATION SLAVE, REPLICATION CLIENT", ""}, // with SELECT on the database, below
		{"ALL PRIVILEGES", ""},
	} {
		user := fmt.Sprintf("grants%d", i)
		pass := "pw-" + user
		m.CreateUser(t, user, pass, tc.privs, m.DB)
		if i == 4 {
			m.Exec(t, fmt.Sprintf("GRANT SELECT ON `%s`.* TO '%s'@'%%'", m.DB, user))
		}
		_, err := Preflight(ctx, openDB(t, m.DSN(user, pass, m.DB)))
		if tc.missing == "" {
			if err != nil {
				t.Errorf("%s (%q): %v", user, tc.privs, err)
			}
			continue
		}
		if tc.missing == "database" {
			wantFault(t, err, fault.ErrPermissionDenied, fault.ExitFatal, "may not use the database", "GRANT SELECT ON")
		} else {
			wantFault(t, err, fault.ErrPermissionDenied, fault.ExitFatal,
				"lacks "+tc.missing, "GRANT "+tc.missing+" ON *.* TO '"+user+"'@'%'")
		}
		if strings.Contains(err.Error(), "PASSWORD") || strings.Contains(err.Error(), pass) {
			t.Errorf("the error shows a password or its hash: %v", err)
		}
	}

	// Privileges through a default role: MariaDB lists the role's grants.
	m.Exec(t, "CREATE ROLE cdc_reader")
	m.Exec(t, "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO cdc_reader")
	m.CreateUser(t, "byrole", "pw-byrole", "", m.DB)
	m.Exec(t, "GRANT cdc_reader TO 'byrole'@'%'")
	m.Exec(t, "SET DEFAULT ROLE cdc_reader FOR 'byrole'@'%'")
	if info, err := Preflight(ctx, openDB(t, m.DSN("byrole", "pw-byrole", m.DB))); err != nil || len(info.Warnings) != 0 {
		t.Errorf("privileges through a default role: %v, warnings %q", err, info.Warnings)
	}
	// A role that is not active: SHOW GRANTS cannot prove the privileges
	// missing (a MySQL role's are not listed), so the server decides, and
	// its refusal is permission_denied naming the GRANT.
	m.CreateUser(t, "rolenotset", "pw-rolenotset", "", m.DB)
	m.Exec(t, fmt.Sprintf("GRANT SELECT ON `%s`.* TO 'rolenotset'@'%%'", m.DB))
	m.Exec(t, "GRANT cdc_reader TO 'rolenotset'@'%'")
	_, err := Preflight(ctx, openDB(t, m.DSN("rolenotset", "pw-rolenotset", m.DB)))
	wantFault(t, err, fault.ErrPermissionDenied, fault.ExitFatal,
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'rolenotset'@'%'", "BINLOG MONITOR privilege")
}

// TestCheckResumePurged: PURGE BINARY LOGS past the resume position is
// binlog_purged (exit 3) with the recovery command, by GTID and by file.
func TestCheckResumePurged(t *testing.T) {
	m := testenv.StartMariaDB(t)
	ctx := context.Background()
	db := captureDB(t, m)
	m.Exec(t, "CREATE TABLE t (id int primary key)")
	info, err := Preflight(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	m.ExecIn(t, "", "FLUSH BINARY LOGS")
	info, _ = Preflight(ctx, db)
	before := info.Position()
	m.Exec(t, "INSERT INTO t VALUES (1)")
	m.Exec(t, "INSERT INTO t VALUES (2)")
	if err := CheckResume(ctx, db, before); err != nil {
		t.Fatalf("before the purge: %v", err)
	}
	m.PurgeBinlogs(t)

	wantFault(t, CheckResume(ctx, db, before), fault.ErrBinlogPurged, fault.ExitFatal,
		"tidemark resnapshot --all", before.GTID.String())
	byFile := before
	byFile.GTID, _ = ParseGTIDSet(MariaDB, "")
	wantFault(t, CheckResume(ctx, db, byFile), fault.ErrBinlogPurged, fault.ExitFatal,
		"tidemark resnapshot --all", fmt.Sprintf("%s:%d", before.File, before.Pos))

	now, err := Preflight(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckResume(ctx, db, now.Position()); err != nil {
		t.Errorf("after the purge, at the current position: %v", err)
	}

	// A GTID position after which nothing was written still resumes when
	// its file is purged (every later transaction is in a later file); by
	// file it cannot.
	idle := now.Position()
	m.PurgeBinlogs(t)
	if err := CheckResume(ctx, db, idle); err != nil {
		t.Errorf("idle GTID position %s, nothing after it purged: %v", idle.GTID, err)
	}
	idleByFile := idle
	idleByFile.GTID, _ = ParseGTIDSet(MariaDB, "")
	wantFault(t, CheckResume(ctx, db, idleByFile), fault.ErrBinlogPurged, fault.ExitFatal, idle.File)
}

// TestCheckResumeServerChanged: a checkpoint from another server, or one
// ahead of the server's binlog (RESET MASTER), is server_changed (exit 3).
func TestCheckResumeServerChanged(t *testing.T) {
	m := testenv.StartMariaDB(t)
	ctx := context.Background()
	db := captureDB(t, m)
	m.Exec(t, "CREATE TABLE t (id int primary key)")
	m.Exec(t, "INSERT INTO t VALUES (1)")
	info, err := Preflight(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	r := info.Position()

	other := r
	other.ServerID++
	wantFault(t, CheckResume(ctx, db, other), fault.ErrServerChanged, fault.ExitFatal,
		"server_id differs", fmt.Sprint(other.ServerID), "tidemark resnapshot --all")
	mysqlFlavour := r
	mysqlFlavour.Flavor = MySQL
	wantFault(t, CheckResume(ctx, db, mysqlFlavour), fault.ErrServerChanged, fault.ExitFatal, "flavour")

	ahead := r
	ahead.GTID, _ = r.GTID.Add(GTID{Flavor: MariaDB, Domain: 0, ServerID: m.ServerID, Seq: r.GTID.Domains()[0].Seq + 5})
	wantFault(t, CheckResume(ctx, db, ahead), fault.ErrServerChanged, fault.ExitFatal, "lack some of")
	longer := r
	longer.GTID, _ = ParseGTIDSet(MariaDB, "")
	longer.Pos += 1000
	wantFault(t, CheckResume(ctx, db, longer), fault.ErrServerChanged, fault.ExitFatal, "bytes long")

	m.ExecIn(t, "", "RESET MASTER")
	wantFault(t, CheckResume(ctx, db, r), fault.ErrServerChanged, fault.ExitFatal, r.GTID.String())
}

// TestCheckResumeMySQL covers the MySQL flavour's decisions, which no
// server here can run (MySQL 8 is not installable on the CI machine).
func TestCheckResumeMySQL(t *testing.T) {
	set := func(s string) GTIDSet { return mustSet(t, MySQL, s) }
	server := ServerInfo{Flavor: MySQL, ServerID: 7, ServerUUID: uuidA, GTIDMode: true,
		GTIDExecuted: set(uuidA + ":1-100," + uuidB + ":1-5"), GTIDPurged: set(uuidA + ":1-50"),
		Binlogs: []BinlogFile{{"binlog.000010", 5000}, {"binlog.000011", 900}}}
	at := func(gtid string) Resume {
		return Resume{Flavor: MySQL, GTID: set(gtid), ServerID: 7, ServerUUID: uuidA}
	}
	for _, tc := range []struct {
		name string
		r    Resume
		want *fault.Error // nil: resumes
	}{
		{"inside", at(uuidA + ":1-60"), nil},
		{"at the purge edge", at(uuidA + ":1-50"), nil},
		{"everything", at(uuidA + ":1-100," + uuidB + ":1-5"), nil},
		{"purged", at(uuidA + ":1-40"), fault.ErrBinlogPurged},
		{"purged, gap", at(uuidA + ":1-20:30-60"), fault.ErrBinlogPurged},
		{"ahead of the server", at(uuidA + ":1-120"), fault.ErrServerChanged},
		{"unknown server's transactions", at(uuidA + ":1-60," + uuidC + ":1"), fault.ErrServerChanged},
		{"another server_uuid", Resume{Flavor: MySQL, GTID: set(uuidA + ":1-60"), ServerID: 7, ServerUUID: uuidB}, fault.ErrServerChanged},
		{"file", Resume{Flavor: MySQL, GTID: set(""), File: "binlog.000011", Pos: 800, ServerID: 7, ServerUUID: uuidA}, nil},
		{"file purged", Resume{Flavor: MySQL, GTID: set(""), File: "binlog.000009", Pos: 800, ServerID: 7, ServerUUID: uuidA}, fault.ErrBinlogPurged},
		{"file unknown", Resume{Flavor: MySQL, GTID: set(""), File: "binlog.000012", Pos: 4, ServerID: 7, ServerUUID: uuidA}, fault.ErrServerChanged},
		{"file too short", Resume{Flavor: MySQL, GTID: set(""), File: "binlog.000011", Pos: 901, ServerID: 7, ServerUUID: uuidA}, fault.ErrServerChanged},
	} {
		err := server.CheckResume(tc.r)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want [%s]", tc.name, err, tc.want.Code)
		}
	}
	// GTIDs turned off since the checkpoint: the file decides.
	off := server
	off.GTIDMode = false
	r := at(uuidA + ":1-60")
	r.File, r.Pos = "binlog.000011", 100
	if err := off.CheckResume(r); err != nil {
		t.Errorf("gtid_mode off, file present: %v", err)
	}
}

func TestParseGrant(t *testing.T) {
	for _, tc := range []struct {
		line   string
		privs  string
		object string
	}{
		{"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `tidemark`@`%` IDENTIFIED BY PASSWORD '*D6FA'", "SELECT|REPLICATION SLAVE|BINLOG MONITOR", "*.*"},
		{"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `u`@`%`", "REPLICATION SLAVE|REPLICATION CLIENT", "*.*"},
		{"GRANT SELECT (`a`, `b`), INSERT ON `shop`.`t` TO 'u'@'%'", "SELECT|INSERT", "`shop`.`t`"},
		{"GRANT ALL PRIVILEGES ON `my on db`.* TO `u`@`%` WITH GRANT OPTION", "ALL PRIVILEGES", "`my on db`.*"},
		{"GRANT USAGE ON *.* TO `u`@`%`", "USAGE", "*.*"},
	} {
		g, ok := parseGrant(tc.line)
		if !ok || strings.Join(g.privs, "|") != tc.privs || g.object != tc.object {
			t.Errorf("parseGrant(%q) = %q on %q (%v), want %q on %q", tc.line, g.privs, g.object, ok, tc.privs, tc.object)
		}
	}
	if _, ok := parseGrant("GRANT `role` TO `u`@`%`"); ok {
		t.Error("a role grant parsed as privileges")
	}
	if !grantOnDB("`shop`.*", "shop") || grantOnDB("`shopx`.*", "shop") || !grantOnDB("`my\\_db`.*", "my_db") {
		t.Error("grantOnDB")
	}
}

// TestCheckServerIDReplicas: a server_id another replica registered with is
// a conflict; tidemark's own earlier connection (same report host) is not.
func TestCheckServerIDReplicas(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	ctx := context.Background()
	m.CreateUser(t, "watcher", "pw-watcher", "REPLICATION SLAVE, BINLOG MONITOR, REPLICATION MASTER ADMIN, SELECT", m.DB)
	db := openDB(t, m.DSN("watcher", "pw-watcher", m.DB))
	gset, err := ParseGTIDSet(MariaDB, m.GTIDPos(t))
	if err != nil {
		t.Fatal(err)
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 777, Flavor: "mariadb", Host: m.Host, Port: uint16(m.Port), User: m.User, Password: m.Password,
		Localhost: "replica-7",
	})
	defer syncer.Close()
	st, err := syncer.StartSyncGTID(gset.GoMySQL())
	if err != nil {
		t.Fatal(err)
	}
	// The first event arrives once the dump runs, so the replica is registered.
	gctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := st.GetEvent(gctx); err != nil {
		t.Fatal(err)
	}
	wantFault(t, CheckServerID(ctx, db, 777, "tidemark-host"), fault.ErrServerIDConflict, fault.ExitConfig,
		"another replica of the source (replica-7:")
	if err := CheckServerID(ctx, db, 777, "replica-7"); err != nil {
		t.Errorf("tidemark's own earlier connection: %v", err)
	}
	if err := CheckServerID(ctx, db, 778, "tidemark-host"); err != nil {
		t.Errorf("a free server_id: %v", err)
	}
	// Without REPLICATION MASTER ADMIN only the source's own id is checked.
	if err := CheckServerID(ctx, captureDB(t, m), 777, "tidemark-host"); err != nil {
		t.Errorf("capture user without REPLICATION MASTER ADMIN: %v", err)
	}
}
