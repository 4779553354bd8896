package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrNoMariaDB reports that no MariaDB server binaries could be found.
var ErrNoMariaDB = errors.New("testenv: MariaDB server binaries (mariadbd, mariadb-install-db) not found")

// MariaDB is a running throwaway MariaDB server listening on 127.0.0.1 on a
// random free port, with its data in a temporary directory. By default it
// writes a row-based binlog with full row images and full row metadata and
// runs with GTID strict mode, as tidemark's MySQL source requires.
//
// It has one database (DB) and a capture user (User, Password) holding
// exactly what tidemark documents as needed: REPLICATION SLAVE,
// BINLOG MONITOR (= REPLICATION CLIENT) and SELECT on *.*. Root is a pool of
// connections as root (all privileges) for setting up and changing data.
// Its methods are safe for concurrent use.
type MariaDB struct {
	Host         string // always 127.0.0.1
	Port         int
	DataDir      string
	Socket       string // Unix socket of the server
	BinDir       string // where mariadbd was found
	RootPassword string // password of root@127.0.0.1
	DB           string // the database created at start
	User         string // the capture user
	Password     string // the capture user's password
	ServerID     uint32 // server_id (random unless MariaDBServerID)
	DomainID     uint32 // gtid_domain_id
	Root         *sql.DB

	root     string // temp dir holding DataDir, the socket, the config and the log
	logFile  string
	cnfFile  string
	cred     *syscall.Credential
	settings [][2]string
	lock     *os.File // flock held while the directory is in use

	mu      sync.Mutex // serialises Stop, Restart and Kill
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped bool
}

// MariaDBOption changes a server's settings before StartMariaDB starts it.
type MariaDBOption func(*mariadbConfig)

type mariadbConfig struct {
	settings map[string]string // "" value: the setting is left out
	serverID uint32
	domainID uint32
}

// MariaDBSetting sets a server option (as in my.cnf, for example
// "binlog_format", "STATEMENT"). An empty value leaves the option out of the
// configuration (MariaDBSetting("log_bin", "") turns the binlog off).
func MariaDBSetting(name, value string) MariaDBOption {
	return func(c *mariadbConfig) { c.settings[name] = value }
}

// MariaDBBinlogFormat sets binlog_format (ROW, STATEMENT, MIXED).
func MariaDBBinlogFormat(format string) MariaDBOption {
	return MariaDBSetting("binlog_format", format)
}

// MariaDBBinlogRowImage sets binlog_row_image (FULL, MINIMAL, NOBLOB).
func MariaDBBinlogRowImage(image string) MariaDBOption {
	return MariaDBSetting("binlog_row_image", image)
}

// MariaDBBinlogRowMetadata sets binlog_row_metadata (NO_LOG, MINIMAL, FULL).
func MariaDBBinlogRowMetadata(metadata string) MariaDBOption {
	return MariaDBSetting("binlog_row_metadata", metadata)
}

// MariaDBMaxBinlogSize sets max_binlog_size in bytes (the server's minimum is
// 4096), so that the binlog rotates to a new file often.
func MariaDBMaxBinlogSize(bytes int) MariaDBOption {
	return MariaDBSetting("max_binlog_size", strconv.Itoa(bytes))
}

// MariaDBNoBinlog starts the server without a binlog (log_bin off).
func MariaDBNoBinlog() MariaDBOption { return MariaDBSetting("log_bin", "") }

// MariaDBServerID sets server_id (default: random in [2, 2^31)).
func MariaDBServerID(id uint32) MariaDBOption {
	return func(c *mariadbConfig) { c.serverID = id }
}

// MariaDBDomainID sets gtid_domain_id (default 0).
func MariaDBDomainID(id uint32) MariaDBOption {
	return func(c *mariadbConfig) { c.domainID = id }
}

// defaultMariaDBSettings are written to every server's configuration. They
// keep a killed server's commits (innodb_flush_log_at_trx_commit=2 writes the
// redo log to the OS at each commit, sync_binlog=0 the binlog: both survive a
// process kill, not an OS crash) and stay small and fast.
var defaultMariaDBSettings = map[string]string{
	"log_bin":                         "mysql-bin",
	"binlog_format":                   "ROW",
	"binlog_row_image":                "FULL",
	"binlog_row_metadata":             "FULL",
	"gtid_strict_mode":                "ON",
	"log_slave_updates":               "ON",
	"binlog_checksum":                 "CRC32",
	"character_set_server":            "utf8mb4",
	"collation_server":                "utf8mb4_unicode_ci",
	"innodb_flush_log_at_trx_commit":  "2",
	"sync_binlog":                     "0",
	"innodb_buffer_pool_size":         "64M",
	"innodb_log_file_size":            "48M",
	"innodb_doublewrite":              "0",
	"performance_schema":              "OFF",
	"skip_name_resolve":               "ON",
	"max_connections":                 "200",
	"max_allowed_packet":              "64M",
	"default_time_zone":               "+00:00",
	"explicit_defaults_for_timestamp": "ON",
}

const (
	mariadbDirPrefix    = "tidemark-mariadb-"
	mariadbStartTimeout = 2 * time.Minute
	mariadbUser         = "tidemark"
	mariadbDBName       = "shop"
)

// MariaDBBinDir finds the directory holding mariadbd: $TIDEMARK_MARIADB_BIN
// if set, else the directory of mariadbd on $PATH, else /usr/sbin. The
// returned error wraps ErrNoMariaDB when nothing usable was found.
// mariadb-install-db is looked up next to it, then on $PATH and in /usr/bin.
func MariaDBBinDir() (string, error) {
	if dir := os.Getenv("TIDEMARK_MARIADB_BIN"); dir != "" {
		if !isExecutable(filepath.Join(dir, "mariadbd")) {
			return "", fmt.Errorf("TIDEMARK_MARIADB_BIN=%q has no mariadbd: %w", dir, ErrNoMariaDB)
		}
		return dir, nil
	}
	if p, err := exec.LookPath("mariadbd"); err == nil {
		return filepath.Dir(p), nil
	}
	if isExecutable("/usr/sbin/mariadbd") {
		return "/usr/sbin", nil
	}
	return "", fmt.Errorf("%w (set TIDEMARK_MARIADB_BIN, or run scripts/setup-test-env.sh)", ErrNoMariaDB)
}

func installDBPath(binDir string) (string, error) {
	for _, p := range []string{filepath.Join(binDir, "mariadb-install-db"), "/usr/bin/mariadb-install-db"} {
		if isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("mariadb-install-db"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: mariadb-install-db missing", ErrNoMariaDB)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// skipOrFailMariaDB skips the test when the binaries are missing, unless
// TIDEMARK_REQUIRE_MARIADB=1, and fails it on any other start error.
func skipOrFailMariaDB(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoMariaDB) && os.Getenv("TIDEMARK_REQUIRE_MARIADB") != "1" {
		t.Skipf("skipping: %v (set TIDEMARK_REQUIRE_MARIADB=1 to make this a failure)", err)
	}
	t.Fatalf("testenv: start MariaDB: %v", err)
}

// StartMariaDB starts a new server for this test alone (use it for tests
// that change server settings, restart, stop or purge the binlog; others use
// SharedMariaDB) and stops it when the test ends. When the binaries are
// missing the test is skipped, unless TIDEMARK_REQUIRE_MARIADB=1, in which
// case it fails; any other start failure fails the test.
func StartMariaDB(t testing.TB, opts ...MariaDBOption) *MariaDB {
	t.Helper()
	m, err := NewMariaDB(opts...)
	if err != nil {
		skipOrFailMariaDB(t, err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("testenv: stop MariaDB: %v", err)
		}
	})
	return m
}

var sharedMariaDB struct {
	once sync.Once
	m    *MariaDB
	err  error
}

// SharedMariaDB returns the MariaDB server (default settings) shared by every
// test in this test binary, starting it on first use; Main stops it. Tests
// on it should work in their own database (CreateDB) and not change global
// settings. Missing binaries skip or fail the test as in StartMariaDB.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	sharedMariaDB.once.Do(func() {
		sharedMariaDB.m, sharedMariaDB.err = NewMariaDB()
	})
	if sharedMariaDB.err != nil {
		skipOrFailMariaDB(t, sharedMariaDB.err)
	}
	return sharedMariaDB.m
}

func stopSharedMariaDB() {
	if sharedMariaDB.m != nil {
		if err := sharedMariaDB.m.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared MariaDB: %v\n", err)
		}
	}
}

// NewMariaDB initialises a data directory (mariadb-install-db, as the OS user
// "mysql" when running as root) in a fresh temporary directory, starts
// mariadbd on it and sets up the users and the database. The caller must Stop
// it. Tests use StartMariaDB or SharedMariaDB.
func NewMariaDB(opts ...MariaDBOption) (*MariaDB, error) {
	bin, err := MariaDBBinDir()
	if err != nil {
		return nil, err
	}
	installDB, err := installDBPath(bin)
	if err != nil {
		return nil, err
	}
	cfg := mariadbConfig{settings: map[string]string{}, serverID: 2 + rand.Uint32N(1<<31-2)}
	for k, v := range defaultMariaDBSettings {
		cfg.settings[k] = v
	}
	for _, o := range opts {
		o(&cfg)
	}
	for k, v := range cfg.settings {
		if !settingName.MatchString(k) || strings.ContainsAny(v, "\n\r") {
			return nil, fmt.Errorf("testenv: invalid MariaDB setting %q=%q", k, v)
		}
	}
	cred, err := mariadbCredential()
	if err != nil {
		return nil, err
	}
	base := tempBase(cred)
	reapStaleMariaDB(base)
	root, err := os.MkdirTemp(base, mariadbDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: create temp dir: %w", err)
	}
	// Held while this process uses the directory: a later reapStaleMariaDB
	// reaps only directories whose lock it can take, which works across PID
	// namespaces sharing /tmp (owner.pid alone would not).
	lock, err := lockDir(root)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	m := &MariaDB{
		Host:         "127.0.0.1",
		DataDir:      filepath.Join(root, "data"),
		Socket:       filepath.Join(root, "mysqld.sock"),
		BinDir:       bin,
		RootPassword: randomHex(16),
		DB:           mariadbDBName,
		User:         mariadbUser,
		Password:     randomHex(16),
		ServerID:     cfg.serverID,
		DomainID:     cfg.domainID,
		root:         root,
		logFile:      filepath.Join(root, "mariadb.log"),
		cnfFile:      filepath.Join(root, "my.cnf"),
		cred:         cred,
		lock:         lock,
	}
	for k, v := range cfg.settings {
		if v != "" {
			m.settings = append(m.settings, [2]string{k, v})
		}
	}
	m.settings = append(m.settings,
		[2]string{"server_id", strconv.FormatUint(uint64(cfg.serverID), 10)},
		[2]string{"gtid_domain_id", strconv.FormatUint(uint64(cfg.domainID), 10)})
	sort.Slice(m.settings, func(i, j int) bool { return m.settings[i][0] < m.settings[j][0] })

	if err := m.init(installDB); err != nil {
		m.stopped = true
		m.kill()
		if m.Root != nil {
			m.Root.Close()
		}
		_ = os.RemoveAll(root)
		lock.Close()
		return nil, err
	}
	return m, nil
}

func (m *MariaDB) init(installDB string) error {
	if err := m.chown(m.root); err != nil {
		return err
	}
	// A private tmpdir: the server names its temporary files after its pid,
	// and servers of test processes in other PID namespaces share /tmp.
	tmp := filepath.Join(m.root, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("testenv: create %s: %w", tmp, err)
	}
	if err := m.chown(tmp); err != nil {
		return err
	}
	args := []string{"--no-defaults", "--datadir=" + m.DataDir, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve", "--tmpdir=" + tmp}
	if m.cred != nil {
		args = append(args, "--user=mysql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), mariadbStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, installDB, args...)
	cmd.Dir = m.root
	if m.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: m.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: mariadb-install-db %s: %w\n%s", m.DataDir, err, out)
	}

	var lastErr error
	for attempt := 0; attempt < startRetries; attempt++ {
		var err error
		if m.Port, err = freePort(); err != nil {
			return err
		}
		if lastErr = m.startServer(); lastErr == nil {
			break
		}
		if tail := m.logTail(); !strings.Contains(tail, "Address already in use") && !strings.Contains(tail, "bind") {
			return lastErr
		}
	}
	if lastErr != nil {
		return lastErr
	}
	return m.bootstrap()
}

// bootstrap connects over the socket as root (no password yet) and creates
// the accounts and the database.
func (m *MariaDB) bootstrap() error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", m.Socket
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := func(s string) string { return strings.ReplaceAll(s, "'", "''") }
	stmts := []string{
		"SET sql_log_bin = 0",
		// Anonymous accounts would shadow the capture user; root over TCP
		// (127.0.0.1, ::1) has no password yet: recreated with one below.
		"DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost')",
		"FLUSH PRIVILEGES",
		fmt.Sprintf("CREATE USER 'root'@'127.0.0.1' IDENTIFIED BY '%s'", q(m.RootPassword)),
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", m.User, q(m.Password)),
		fmt.Sprintf("GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO '%s'@'%%'", m.User),
		"SET sql_log_bin = 1",
		"CREATE DATABASE `" + m.DB + "`",
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("testenv: connect to new MariaDB over %s: %w\n--- server log tail ---\n%s", m.Socket, err, m.logTail())
	}
	defer conn.Close()
	for _, s := range stmts {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("testenv: MariaDB bootstrap %q: %w", strings.ReplaceAll(s, m.RootPassword, "***"), err)
		}
	}
	m.Root, err = sql.Open("mysql", m.RootDSN(""))
	if err != nil {
		return err
	}
	m.Root.SetMaxIdleConns(4)
	return m.Root.PingContext(ctx)
}

// config renders my.cnf.
func (m *MariaDB) config() string {
	var b strings.Builder
	b.WriteString("# written by tidemark internal/testenv\n[mariadbd]\n")
	fmt.Fprintf(&b, "datadir = %s\nsocket = %s\nport = %d\nbind_address = 127.0.0.1\n", m.DataDir, m.Socket, m.Port)
	fmt.Fprintf(&b, "pid_file = %s\nlog_error = %s\ntmpdir = %s\n", filepath.Join(m.root, "mariadbd.pid"), m.logFile, filepath.Join(m.root, "tmp"))
	if m.cred != nil {
		b.WriteString("user = mysql\n")
	}
	for _, kv := range m.settings {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], kv[1])
	}
	return b.String()
}

// startServer writes my.cnf and starts mariadbd, returning once it accepts
// connections on its socket. Callers hold mu or own m exclusively.
func (m *MariaDB) startServer() error {
	if err := m.writeFile("my.cnf", m.config()); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(m.BinDir, "mariadbd"), "--defaults-file="+m.cnfFile)
	cmd.Dir = m.root
	// The server dies with the test process (also on a test timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if m.cred != nil {
		cmd.SysProcAttr.Credential = m.cred
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: start mariadbd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.cmd, m.exited = cmd, exited

	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", m.Socket
	cfg.Timeout = time.Second
	dsn := cfg.FormatDSN()
	deadline := time.Now().Add(mariadbStartTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("testenv: mariadbd on port %d exited during start (%v)\n--- server log tail (%s) ---\n%s",
				m.Port, cmd.ProcessState, m.logFile, m.logTail())
		default:
		}
		if _, err := os.Stat(m.Socket); err == nil {
			if err := pingDSN(dsn); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			m.kill()
			return fmt.Errorf("testenv: mariadbd on port %d not ready after %v\n--- server log tail ---\n%s",
				m.Port, mariadbStartTimeout, m.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pingDSN(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// shutdown stops the server gracefully (SIGTERM) and waits for it.
func (m *MariaDB) shutdown() error {
	if m.cmd == nil {
		return nil
	}
	select {
	case <-m.exited:
		return nil
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		return nil
	case <-time.After(time.Minute):
		m.kill()
		return fmt.Errorf("testenv: mariadbd did not shut down within a minute (killed)\n%s", m.logTail())
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (m *MariaDB) kill() {
	if m.cmd == nil {
		return
	}
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// Stop shuts the server down, closes Root and removes the temporary
// directory. It is idempotent.
func (m *MariaDB) Stop() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	m.stopped = true
	if m.Root != nil {
		m.Root.Close()
	}
	m.kill() // the data is thrown away: no need for a clean shutdown
	err := os.RemoveAll(m.root)
	m.lock.Close()
	if err != nil {
		return fmt.Errorf("testenv: remove %s: %w", m.root, err)
	}
	return nil
}

// Restart shuts the server down cleanly (open connections, including binlog
// dump connections, are closed) and starts it again on the same port with
// the same data. It returns once the server accepts connections again; Root
// reconnects by itself.
func (m *MariaDB) Restart() error { return m.restart(false) }

// KillRestart kills the server with SIGKILL (a crash: no shutdown) and starts
// it again on the same port with the same data (InnoDB recovers; commits
// survive, see defaultMariaDBSettings).
func (m *MariaDB) KillRestart() error { return m.restart(true) }

func (m *MariaDB) restart(crash bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return errors.New("testenv: restart of a stopped MariaDB")
	}
	if crash {
		m.kill()
	} else if err := m.shutdown(); err != nil {
		return err
	}
	return m.startServer()
}

// Halt stops the server cleanly and leaves it down until Resume: tidemark
// sees connection refused meanwhile.
func (m *MariaDB) Halt() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return errors.New("testenv: halt of a stopped MariaDB")
	}
	return m.shutdown()
}

// Resume starts a halted server again on the same port.
func (m *MariaDB) Resume() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return errors.New("testenv: resume of a stopped MariaDB")
	}
	select {
	case <-m.exited:
	default:
		return errors.New("testenv: resume of a running MariaDB")
	}
	return m.startServer()
}

// URL returns tidemark's source URL for the capture user on database db
// ("" means m.DB): mysql://tidemark:pass@127.0.0.1:port/db.
func (m *MariaDB) URL(db string) string {
	if db == "" {
		db = m.DB
	}
	return m.UserURL(m.User, m.Password, db)
}

// UserURL returns tidemark's source URL for another user.
func (m *MariaDB) UserURL(user, password, db string) string {
	u := url.URL{Scheme: "mysql", User: url.UserPassword(user, password),
		Host: fmt.Sprintf("%s:%d", m.Host, m.Port), Path: "/" + db}
	return u.String()
}

// RootDSN returns a go-sql-driver/mysql DSN for root over TCP on database db
// ("" for none), with multiStatements and parseTime off.
func (m *MariaDB) RootDSN(db string) string {
	return m.DSN("root", m.RootPassword, db)
}

// DSN returns a go-sql-driver/mysql DSN for user over TCP on database db.
func (m *MariaDB) DSN(user, password, db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "tcp", fmt.Sprintf("%s:%d", m.Host, m.Port)
	cfg.DBName = db
	cfg.MultiStatements = true
	return cfg.FormatDSN()
}

// CreateDB creates a fresh, empty database whose name starts with prefix
// (see CreateDB of PG for the naming) and returns its name; it is dropped
// when the test ends. The capture user can read it.
func (m *MariaDB) CreateDB(t testing.TB, prefix string) string {
	t.Helper()
	name := dbName(prefix)
	m.Exec(t, "CREATE DATABASE `"+name+"`")
	t.Cleanup(func() {
		m.mu.Lock()
		stopped := m.stopped
		m.mu.Unlock()
		if stopped {
			return
		}
		if _, err := m.Root.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	return name
}

// CreateUser creates user@'%' with password and grants privs ON *.* (for
// example "REPLICATION SLAVE, SELECT"; "" grants nothing), and returns the
// user's tidemark URL on database db.
func (m *MariaDB) CreateUser(t testing.TB, name, password, privs, db string) string {
	t.Helper()
	m.Exec(t, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", name, strings.ReplaceAll(password, "'", "''")))
	if privs != "" {
		m.Exec(t, fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", privs, name))
	}
	return m.UserURL(name, password, db)
}

// Exec runs sql as root (several statements separated by ";" are fine) in
// database m.DB, failing the test on error. Must be called from the test's
// goroutine.
func (m *MariaDB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	m.ExecIn(t, m.DB, sql, args...)
}

// ExecIn runs sql as root in database db ("" for none).
func (m *MariaDB) ExecIn(t testing.TB, db, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := m.Root.Conn(ctx)
	if err != nil {
		t.Fatalf("testenv: connect to MariaDB: %v", err)
	}
	defer conn.Close()
	if db != "" {
		if _, err := conn.ExecContext(ctx, "USE `"+db+"`"); err != nil {
			t.Fatalf("testenv: USE %s: %v", db, err)
		}
	}
	if _, err := conn.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("testenv: exec on MariaDB: %v\nSQL: %s", err, query)
	}
}

// BinlogFile is one row of SHOW BINARY LOGS.
type BinlogFile struct {
	Name string
	Size int64
}

// BinaryLogs returns SHOW BINARY LOGS, oldest first.
func (m *MariaDB) BinaryLogs(t testing.TB) []BinlogFile {
	t.Helper()
	rows, err := m.Root.Query("SHOW BINARY LOGS")
	if err != nil {
		t.Fatalf("testenv: SHOW BINARY LOGS: %v", err)
	}
	defer rows.Close()
	var out []BinlogFile
	for rows.Next() {
		var f BinlogFile
		if err := rows.Scan(&f.Name, &f.Size); err != nil {
			t.Fatalf("testenv: SHOW BINARY LOGS: %v", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("testenv: SHOW BINARY LOGS: %v", err)
	}
	return out
}

// GTIDPos returns @@gtid_binlog_pos (the GTID of the last transaction written
// to the binlog per domain, e.g. "0-1234-17"; "" before the first).
func (m *MariaDB) GTIDPos(t testing.TB) string {
	t.Helper()
	var pos string
	if err := m.Root.QueryRow("SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatalf("testenv: read gtid_binlog_pos: %v", err)
	}
	return pos
}

// PurgeBinlogs rotates to a new binlog file (FLUSH BINARY LOGS) and purges
// every file before it, so that only the new, empty file remains. It returns
// the name of that file. A file still read by a binlog dump connection is
// kept by the server; PurgeBinlogs fails the test then.
func (m *MariaDB) PurgeBinlogs(t testing.TB) string {
	t.Helper()
	m.ExecIn(t, "", "FLUSH BINARY LOGS")
	logs := m.BinaryLogs(t)
	if len(logs) == 0 {
		t.Fatal("testenv: PurgeBinlogs: no binary logs (is log_bin on?)")
	}
	last := logs[len(logs)-1].Name
	// The server keeps a file until InnoDB has checkpointed the commits in
	// it (binlog checkpoint) and while a dump connection reads it: the
	// purge is retried for a while, with the server's warning kept.
	deadline := time.Now().Add(time.Minute)
	for {
		warning := m.purgeTo(t, last)
		if logs = m.BinaryLogs(t); len(logs) == 1 && logs[0].Name == last {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: PurgeBinlogs: binary logs after PURGE BINARY LOGS TO %s: %v (%s)", last, logs, warning)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// purgeTo runs PURGE BINARY LOGS TO file and returns the server's warnings.
func (m *MariaDB) purgeTo(t testing.TB, file string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := m.Root.Conn(ctx)
	if err != nil {
		t.Fatalf("testenv: connect to MariaDB: %v", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PURGE BINARY LOGS TO '"+file+"'"); err != nil {
		t.Fatalf("testenv: PURGE BINARY LOGS TO %s: %v", file, err)
	}
	rows, err := conn.QueryContext(ctx, "SHOW WARNINGS")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var ws []string
	for rows.Next() {
		var level, msg string
		var code int
		if rows.Scan(&level, &code, &msg) == nil {
			ws = append(ws, msg)
		}
	}
	return strings.Join(ws, "; ")
}

// mariadbCredential returns the OS user to run MariaDB as: "mysql" when this
// process is root, else nil.
func mariadbCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("testenv: running as root, but the OS user \"mysql\" to run MariaDB as does not exist (install mariadb-server): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testenv: OS user mysql has non-numeric uid/gid %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// lockDir creates dir/lock and takes an exclusive flock on it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testenv: create lock in %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("testenv: lock %s: %w", dir, err)
	}
	return f, nil
}

// reapStaleMariaDB kills servers and removes directories left in base by
// test processes that died without Stop (mariadbd dies with its test process
// through Pdeathsig; this is the fallback). A directory is stale when its
// lock can be taken: its owner, wherever it runs, is gone.
func reapStaleMariaDB(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, mariadbDirPrefix+"*"))
	for _, dir := range dirs {
		f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if err != nil {
			continue // being created, or not ours
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue // in use
		}
		if b, err := os.ReadFile(filepath.Join(dir, "mariadbd.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && processAlive(pid) {
				if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), dir) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = os.RemoveAll(dir)
		f.Close()
	}
}

func (m *MariaDB) chown(path string) error {
	if m.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(m.cred.Uid), int(m.cred.Gid)); err != nil {
		return fmt.Errorf("testenv: chown %s to mysql: %w", path, err)
	}
	return nil
}

func (m *MariaDB) writeFile(rel, content string) error {
	path := filepath.Join(m.root, rel)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("testenv: write %s: %w", path, err)
	}
	return m.chown(path)
}

// logTail returns the last few KiB of the server's error log.
func (m *MariaDB) logTail() string {
	b, err := os.ReadFile(m.logFile)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
