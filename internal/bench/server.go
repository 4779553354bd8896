package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/testenv"
)

// serverSettings are added to testenv's defaults (which already turn fsync
// and full_page_writes off: the disk is not what is measured, and both
// tidemark and its baseline read the same WAL).
//
//   - synchronous_commit on, PostgreSQL's default: a walsender only decodes
//     WAL that is flushed, so with it off (testenv's default) every commit
//     would wait up to wal_writer_delay before any consumer could see it,
//     and the latency scenario would measure the WAL writer.
//   - autovacuum off and rare checkpoints: no background WAL or I/O lands in
//     the middle of a measurement.
//   - room for the slots of every repetition.
var serverSettings = map[string]string{
	"synchronous_commit":    "on",
	"autovacuum":            "off",
	"max_wal_size":          "16GB",
	"checkpoint_timeout":    "1h",
	"shared_buffers":        "256MB",
	"max_replication_slots": "64",
	"max_wal_senders":       "64",
}

// server is the throwaway PostgreSQL every scenario runs against.
type server struct {
	pg *testenv.PG
}

func startServer() (*server, error) {
	pg, err := testenv.Start(testenv.Options{Settings: serverSettings})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	for _, tool := range []string{"pgbench", "psql", "pg_recvlogical"} {
		if _, err := os.Stat(filepath.Join(pg.BinDir, tool)); err != nil {
			pg.Stop()
			return nil, fmt.Errorf("PostgreSQL client %s not found next to the server binaries in %s: %w", tool, pg.BinDir, err)
		}
	}
	return &server{pg: pg}, nil
}

func (s *server) stop() error { return s.pg.Stop() }

// url is the superuser URL of database db.
func (s *server) url(db string) string { return s.pg.URL(db) }

func (s *server) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, s.url(db))
	if err != nil {
		return nil, fmt.Errorf("connect to database %s: %w", db, err)
	}
	return conn, nil
}

// createDB creates an empty database.
func (s *server) createDB(ctx context.Context, db string) error {
	return s.exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
}

// exec runs sql (one or more statements, simple protocol) in database db.
func (s *server) exec(ctx context.Context, db, sql string) error {
	conn, err := s.connect(ctx, db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("database %s: %w\nSQL: %s", db, err, sql)
	}
	return nil
}

// queryInt runs a query returning one bigint.
func (s *server) queryInt(ctx context.Context, db, sql string, args ...any) (int64, error) {
	conn, err := s.connect(ctx, db)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("database %s: %w\nSQL: %s", db, err, sql)
	}
	return n, nil
}

// insertLSN is the server's current WAL insert position.
func (s *server) insertLSN(ctx context.Context, db string) (uint64, error) {
	n, err := s.queryInt(ctx, db, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`)
	return uint64(n), err
}

// sentinel ends a workload so that a consumer's progress can be compared
// with it: it returns before, the insert position after every workload
// commit, and after, the position after one more transaction (a
// transactional logical message) that every consumer decodes. A consumer
// that acknowledged past before has decoded the sentinel, hence everything
// before it.
func (s *server) sentinel(ctx context.Context, db string) (before, after uint64, err error) {
	conn, err := s.connect(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.Background())
	q := `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`
	var b, a int64
	if err := conn.QueryRow(ctx, q).Scan(&b); err != nil {
		return 0, 0, fmt.Errorf("database %s: read WAL position: %w", db, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, 'tidemark-bench', 'end')`); err != nil {
		return 0, 0, fmt.Errorf("database %s: emit the end-of-workload message: %w", db, err)
	}
	if err := conn.QueryRow(ctx, q).Scan(&a); err != nil {
		return 0, 0, fmt.Errorf("database %s: read WAL position: %w", db, err)
	}
	return uint64(b), uint64(a), nil
}

// createSlot creates a pgoutput slot at the current WAL position.
func (s *server) createSlot(ctx context.Context, db, slot string) error {
	return s.exec(ctx, db, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, slot))
}

// dropSlot drops a slot (and lets its WAL go), ignoring a missing one,
// ending a walsender still holding it (testenv.PG.DropSlot).
func (s *server) dropSlot(ctx context.Context, db, slot string) error {
	return s.pg.DropSlot(ctx, db, slot)
}

// tool returns a command running PostgreSQL client program name (pgbench,
// psql, pg_recvlogical) against database db, connected through the
// environment so no password appears in its arguments.
func (s *server) tool(ctx context.Context, db, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.pg.BinDir, name), args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"PGHOST="+s.pg.Host, "PGPORT="+strconv.Itoa(s.pg.Port), "PGUSER=postgres",
		"PGPASSWORD="+s.pg.Password, "PGDATABASE="+db, "PGSSLMODE=disable")
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// runTool runs a client program to completion; its output is returned, and
// included in the error when it fails.
func (s *server) runTool(ctx context.Context, db, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := s.tool(ctx, db, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return out.String(), nil
}

// version is the server's version string.
func (s *server) version(ctx context.Context) string {
	conn, err := s.connect(ctx, "postgres")
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "unknown"
	}
	return v
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
