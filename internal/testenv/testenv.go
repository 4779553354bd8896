// Package testenv starts real, throwaway database servers for tests.
//
// PostgreSQL is started from the server binaries installed on the machine
// (initdb + pg_ctl) into a temporary directory, listening on 127.0.0.1 on a
// free port, with wal_level=logical so logical replication can be tested
// against the real thing. Nothing is mocked.
//
// Most tests share one server per test binary:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		pg := testenv.Shared(t)
//		url := pg.CreateDB(t, "something")
//		pg.Exec(t, url, "CREATE TABLE t (id int primary key)")
//		...
//	}
//
// Tests that stop or restart the server (fault tests) should Start their own.
//
// MariaDB (for the MySQL source) is started the same way from mariadbd and
// mariadb-install-db: SharedMariaDB(t) for most tests, StartMariaDB(t, opts...)
// for a server of the test's own (other binlog settings, restarts, purges).
// The server writes a ROW binlog with FULL row images and metadata and runs
// with gtid_strict_mode. MySQL 8 itself is not installable on the CI machine
// (Debian 12 ships MariaDB only); the MySQL flavour is covered by unit tests.
//
// Environment:
//
//	TIDEMARK_PG_BIN       directory holding initdb/pg_ctl (otherwise found, see BinDir)
//	TIDEMARK_REQUIRE_PG   "1": a missing PostgreSQL fails the test instead of skipping it
//	TIDEMARK_MARIADB_BIN  directory holding mariadbd (otherwise $PATH, then /usr/sbin)
//	TIDEMARK_REQUIRE_MARIADB "1": a missing MariaDB fails the test instead of skipping it
//
// When the test process runs as root, initdb and the server run as the OS user
// "postgres" (PostgreSQL refuses to run as root) and the temporary directory is
// handed to that user; MariaDB runs as the OS user "mysql" likewise.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ErrNoPostgres reports that no PostgreSQL server binaries could be found.
var ErrNoPostgres = errors.New("testenv: PostgreSQL server binaries (initdb, pg_ctl) not found")

// BinDir finds the directory that holds the PostgreSQL server binaries:
// $TIDEMARK_PG_BIN if set, else `pg_config --bindir`, else the newest
// /usr/lib/postgresql/*/bin, else the directory of an initdb on $PATH.
// The returned error wraps ErrNoPostgres when nothing usable was found.
func BinDir() (string, error) {
	if dir := os.Getenv("TIDEMARK_PG_BIN"); dir != "" {
		if !hasServerBins(dir) {
			return "", fmt.Errorf("TIDEMARK_PG_BIN=%q has no initdb/pg_ctl: %w", dir, ErrNoPostgres)
		}
		return dir, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServerBins(dir) {
			return dir, nil
		}
	}
	if dir := newestDebianBinDir(); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved
		}
		if dir := filepath.Dir(p); hasServerBins(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w (set TIDEMARK_PG_BIN, or run scripts/setup-test-env.sh)", ErrNoPostgres)
}

// newestDebianBinDir returns the /usr/lib/postgresql/<major>/bin with the
// highest major version that has server binaries, or "".
func newestDebianBinDir() string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir   string
		major float64
	}
	var cands []cand
	for _, m := range matches {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(m)), 64)
		if err != nil || !hasServerBins(m) {
			continue
		}
		cands = append(cands, cand{m, v})
	}
	if len(cands) == 0 {
		return ""
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].major > cands[j].major })
	return cands[0].dir
}

func hasServerBins(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// shared is the one server per test binary handed out by Shared.
var shared struct {
	once sync.Once
	pg   *PG
	err  error
}

// Shared returns the PostgreSQL server shared by every test in this test
// binary, starting it on first use. If the server binaries are missing the test
// is skipped, unless TIDEMARK_REQUIRE_PG=1, in which case it fails. Any other
// start failure fails the test. Pair it with Main in TestMain so the server is
// stopped when the tests are done.
func Shared(t testing.TB) *PG {
	t.Helper()
	shared.once.Do(func() {
		shared.pg, shared.err = Start(Options{})
	})
	if shared.err != nil {
		if errors.Is(shared.err, ErrNoPostgres) && os.Getenv("TIDEMARK_REQUIRE_PG") != "1" {
			t.Skipf("skipping: %v (set TIDEMARK_REQUIRE_PG=1 to make this a failure)", shared.err)
		}
		t.Fatalf("testenv: start shared PostgreSQL: %v", shared.err)
	}
	return shared.pg
}

// Main runs the tests and then stops the shared server, if one was started.
// Use it from TestMain: func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	removeTidemark()
	stopSharedMariaDB()
	if shared.pg != nil {
		if err := shared.pg.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared PostgreSQL: %v\n", err)
		}
	}
	return code
}
