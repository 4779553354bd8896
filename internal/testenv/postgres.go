package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PG is a running throwaway PostgreSQL server (wal_level=logical) listening on
// 127.0.0.1 on a random free port, with its data in a temporary directory.
// Its methods are safe for concurrent use.
type PG struct {
	Host     string // always 127.0.0.1
	Port     int
	DataDir  string // the cluster directory (also holds the Unix socket)
	BinDir   string // where initdb, pg_ctl and postgres were found
	Password string // password of the superuser "postgres"
	CAFile   string // PEM file of the CA that signed the server certificate (Options.TLS only)

	root    string              // temp dir holding DataDir, the log and the password file
	logFile string              // server log
	cred    *syscall.Credential // OS user the server runs as; nil = this process's user
	tls     [][2]string         // settings that turn TLS on (Options.TLS)

	mu      sync.Mutex // serialises Stop and Restart
	stopped bool
}

// Options tunes a server started by Start.
type Options struct {
	// Settings are extra postgresql.conf settings (for example
	// "logical_decoding_work_mem": "64kB"). They override the defaults.
	Settings map[string]string
	// TLS, if set, turns on TLS with a freshly generated CA and server
	// certificate (CAFile, TLSURL). Plaintext connections still work.
	TLS *TLS
}

// defaultSettings are written to every server's configuration. They trade
// durability for speed (fsync=off) and make room for many slots and senders.
var defaultSettings = [][2]string{
	{"wal_level", "logical"},
	{"max_replication_slots", "20"},
	{"max_wal_senders", "20"},
	{"listen_addresses", "127.0.0.1"},
	{"fsync", "off"},
	{"synchronous_commit", "off"},
	{"full_page_writes", "off"},
	{"wal_sender_timeout", "60s"},
	{"max_connections", "200"},
}

const (
	dirPrefix    = "tidemark-pg-"
	startTimeout = 2 * time.Minute
	startRetries = 3 // new ports to try when the chosen one was taken meanwhile
)

// Start initialises a new cluster (initdb, as the OS user "postgres" when
// running as root) in a fresh temporary directory and starts it with pg_ctl,
// returning once it accepts connections. The caller must Stop it. The error
// wraps ErrNoPostgres when the binaries are missing and includes the tail of
// the server log when the server would not start.
func Start(opts Options) (*PG, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for k := range opts.Settings {
		if !settingName.MatchString(k) {
			return nil, fmt.Errorf("testenv: invalid PostgreSQL setting name %q", k)
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	base := tempBase(cred)
	reapStale(base, bin, cred)

	root, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: create temp dir: %w", err)
	}
	p := &PG{
		Host:     "127.0.0.1",
		DataDir:  filepath.Join(root, "data"),
		BinDir:   bin,
		Password: randomHex(16),
		root:     root,
		logFile:  filepath.Join(root, "postgres.log"),
		cred:     cred,
	}
	if err := p.start(opts); err != nil {
		p.stopped = true
		p.stopServer() // in case it came up half-way
		_ = os.RemoveAll(root)
		return nil, err
	}
	return p, nil
}

func (p *PG) start(opts Options) error {
	if err := p.chown(p.root); err != nil {
		return err
	}
	// Lets a later Start reap this directory if this process dies without Stop.
	if err := p.writeFile("owner.pid", strconv.Itoa(os.Getpid())+"\n"); err != nil {
		return err
	}
	if err := p.writeFile("pwfile", p.Password+"\n"); err != nil {
		return err
	}
	pwfile := filepath.Join(p.root, "pwfile")
	out, err := p.run(startTimeout, "initdb",
		"-D", p.DataDir, "-U", "postgres", "--pwfile="+pwfile,
		"--auth-host=scram-sha-256", "--auth-local=trust",
		"--no-locale", "--encoding=UTF8", "--no-sync")
	if err != nil {
		return fmt.Errorf("testenv: initdb %s: %w\n%s", p.DataDir, err, out)
	}
	_ = os.Remove(pwfile)

	hba := strings.Join([]string{
		"# written by tidemark internal/testenv",
		"local all         all                trust",
		"local replication all                trust",
		"host  all         all  127.0.0.1/32  scram-sha-256",
		"host  replication all  127.0.0.1/32  scram-sha-256",
		"",
	}, "\n")
	if err := p.writeFile("data/pg_hba.conf", hba); err != nil {
		return err
	}
	if err := p.appendFile("data/postgresql.conf", "\ninclude 'tidemark.conf'\n"); err != nil {
		return err
	}
	if opts.TLS != nil {
		if p.tls, err = p.setupTLS(opts.TLS); err != nil {
			return err
		}
	}

	var lastErr error
	for attempt := 0; attempt < startRetries; attempt++ {
		if p.Port, err = freePort(); err != nil {
			return err
		}
		if err := p.writeFile("data/tidemark.conf", p.config(opts)); err != nil {
			return err
		}
		out, err := p.run(startTimeout, "pg_ctl", "start", "-w", "-s",
			"-t", strconv.Itoa(int(startTimeout/time.Second)),
			"-D", p.DataDir, "-l", p.logFile)
		if err == nil {
			return p.ping()
		}
		tail := p.logTail()
		lastErr = fmt.Errorf("testenv: pg_ctl start on port %d: %w\n%s\n--- server log tail (%s) ---\n%s",
			p.Port, err, out, p.logFile, tail)
		if !strings.Contains(tail, "could not bind") && !strings.Contains(tail, "already in use") {
			break
		}
	}
	return lastErr
}

// config renders tidemark.conf: the defaults, the port and socket dir, then opts.
func (p *PG) config(opts Options) string {
	var b strings.Builder
	b.WriteString("# written by tidemark internal/testenv\n")
	for _, kv := range defaultSettings {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], quoteSetting(kv[1]))
	}
	fmt.Fprintf(&b, "port = %d\n", p.Port)
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", quoteSetting(p.DataDir))
	for _, kv := range p.tls {
		fmt.Fprintf(&b, "%s = %s\n", kv[0], quoteSetting(kv[1]))
	}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, quoteSetting(opts.Settings[k]))
	}
	return b.String()
}

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func quoteSetting(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// ping checks that the superuser can log in over TCP with its password.
func (p *PG) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return fmt.Errorf("testenv: connect to new server on port %d: %w\n--- server log tail ---\n%s", p.Port, err, p.logTail())
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// Stop stops the server immediately (no shutdown checkpoint) and removes its
// temporary directory. It is idempotent.
func (p *PG) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	err := p.stopServer()
	if rmErr := os.RemoveAll(p.root); rmErr != nil && err == nil {
		err = fmt.Errorf("testenv: remove %s: %w", p.root, rmErr)
	}
	return err
}

// stopServer runs pg_ctl stop -m immediate; a server that is not running is fine.
func (p *PG) stopServer() error {
	out, err := p.run(time.Minute, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", p.DataDir)
	if err == nil {
		return nil
	}
	// pg_ctl status exits 3 when no server is running.
	if _, stErr := p.run(time.Minute, "pg_ctl", "status", "-D", p.DataDir); stErr != nil {
		var ee *exec.ExitError
		if errors.As(stErr, &ee) && ee.ExitCode() == 3 {
			return nil
		}
	}
	return fmt.Errorf("testenv: pg_ctl stop %s: %w\n%s", p.DataDir, err, out)
}

// Restart stops the server (fast: open connections, including replication
// connections, are terminated) and starts it again on the same port with the
// same data. It returns once the server accepts connections again.
func (p *PG) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errors.New("testenv: restart of a stopped server")
	}
	out, err := p.run(startTimeout, "pg_ctl", "restart", "-w", "-s", "-m", "fast",
		"-t", strconv.Itoa(int(startTimeout/time.Second)),
		"-D", p.DataDir, "-l", p.logFile)
	if err != nil {
		return fmt.Errorf("testenv: pg_ctl restart on port %d: %w\n%s\n--- server log tail (%s) ---\n%s",
			p.Port, err, out, p.logFile, p.logTail())
	}
	return p.ping()
}

// URL returns a connection URL for database db as the superuser "postgres".
func (p *PG) URL(db string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s:%d/%s?sslmode=disable",
		url.QueryEscape(p.Password), p.Host, p.Port, url.PathEscape(db))
}

var dbSeq atomic.Int64

// CreateDB creates a fresh, empty database whose name starts with prefix
// (lower-cased, non [a-z0-9_] replaced by "_") and returns its URL. When the
// test ends the database is dropped together with any replication slots on
// it, so slots do not run out on the shared server; a failed drop is only
// logged. Must be called from the test's goroutine.
func (p *PG) CreateDB(t testing.TB, prefix string) string {
	t.Helper()
	name := dbName(prefix)
	p.Exec(t, p.URL("postgres"), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		if err := p.dropDB(name); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	return p.URL(name)
}

func dbName(prefix string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "db_" + s
	}
	suffix := fmt.Sprintf("_%d_%s", dbSeq.Add(1), randomHex(3))
	if max := 63 - len(suffix); len(s) > max {
		s = s[:max]
	}
	return s + suffix
}

// dropDB drops database name after terminating the walsenders using its
// replication slots and dropping those slots.
func (p *PG) dropDB(name string) error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		err = dropSlots(ctx, conn, "database = $1", name)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DropSlot drops replication slot slot of database db, and the WAL it
// holds; a missing slot is not an error. It is for a caller done with the
// slot: a walsender still holding it (a reader that has just stopped
// leaves one for a moment) is terminated.
func (p *PG) DropSlot(ctx context.Context, db, slot string) error {
	conn, err := pgx.Connect(ctx, p.URL(db))
	if err != nil {
		return fmt.Errorf("connect to database %s: %w", db, err)
	}
	defer conn.Close(context.Background())
	if err := dropSlots(ctx, conn, "slot_name = $1", slot); err != nil {
		return fmt.Errorf("database %s: drop replication slot %s: %w", db, slot, err)
	}
	return nil
}

// dropSlots drops the replication slots matching where (a condition on
// pg_replication_slots with one parameter, arg). A slot still held by a
// walsender (SQLSTATE 55006, "is active") has its walsender terminated and
// the drop tried again, every 200 ms for up to 10 s.
func dropSlots(ctx context.Context, conn *pgx.Conn, where string, arg any) error {
	drop := `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE ` + where
	end := `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE ` + where + ` AND active_pid IS NOT NULL`
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := conn.Exec(ctx, drop, arg)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		if _, err := conn.Exec(ctx, end, arg); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exec runs sql (several statements separated by ";" are fine; they run in
// one implicit transaction unless the SQL says otherwise) against the database
// at url, failing the test on error. Must be called from the test's goroutine.
func (p *PG) Exec(t testing.TB, url string, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", redact(url), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("testenv: exec on %s: %v\nSQL: %s", redact(url), err, sql)
	}
}

func redact(u string) string {
	if parsed, err := url.Parse(u); err == nil {
		return parsed.Redacted()
	}
	return "<url>"
}

// run runs one of the PostgreSQL binaries as the server's OS user and returns
// its combined output.
func (p *PG) run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	return runPG(timeout, p.BinDir, p.root, p.cred, name, args...)
}

func runPG(timeout time.Duration, binDir, dir string, cred *syscall.Credential, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	cmd.Dir = dir
	cmd.Env = serverEnv()
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// serverEnv is this process's environment without libpq/server variables
// (PGDATA, PGPORT, ...) that could redirect the binaries.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// serverCredential returns the OS user to run PostgreSQL as: "postgres" when
// this process is root (the server refuses to run as root), else nil.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testenv: running as root, but the OS user \"postgres\" to run the server as does not exist (install the postgresql package): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testenv: OS user postgres has non-numeric uid/gid %q/%q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// tempBase is the directory to create server directories in. When the server
// runs as another user, every parent must be searchable by that user, which
// $TMPDIR under a private home directory is not; /tmp is used then.
func tempBase(cred *syscall.Credential) string {
	dir := os.TempDir()
	if cred == nil {
		return dir
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return dir
		}
	}
}

// reapStale stops servers and removes directories left in base by test
// processes that died without calling Stop (for example on a test timeout).
// Best effort: anything unexpected is left alone.
func reapStale(base, binDir string, cred *syscall.Credential) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		data := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			if _, err := runPG(time.Minute, binDir, dir, cred, "pg_ctl", "stop", "-w", "-s", "-m", "immediate", "-D", data); err != nil {
				continue
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// chown hands path to the server's OS user (no-op when not running as root).
func (p *PG) chown(path string) error {
	if p.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
		return fmt.Errorf("testenv: chown %s to postgres: %w", path, err)
	}
	return nil
}

// writeFile (over)writes rel (relative to the temp dir), owned by the server's user.
func (p *PG) writeFile(rel, content string) error {
	path := filepath.Join(p.root, rel)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("testenv: write %s: %w", path, err)
	}
	return p.chown(path)
}

func (p *PG) appendFile(rel, content string) error {
	path := filepath.Join(p.root, rel)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("testenv: open %s: %w", path, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("testenv: append to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("testenv: append to %s: %w", path, err)
	}
	return nil
}

// logTail returns the last few KiB of the server log.
func (p *PG) logTail() string {
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	const max = 4096
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// may take it before the server binds; Start retries with a new port then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
