package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/mysql/mysqltest"
	"github.com/tidemark/tidemark/internal/source/sourcetest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestConformanceProcess runs the process-level conformance suite on
// MariaDB: tidemark run as a subprocess, SIGKILLed during the snapshot and
// the stream, and silver compared with the source (verify, and PyIceberg
// against the golden file's values for the every-type table).
func TestConformanceProcess(t *testing.T) {
	sourcetest.RunProcess(t, mariadbProcess{m: testenv.SharedMariaDB(t)})
}

type mariadbProcess struct{ m *testenv.MariaDB }

func (h mariadbProcess) NewSource(t *testing.T) sourcetest.Source {
	name := h.m.CreateDB(t, "proc")
	db, err := sql.Open("mysql", h.m.RootDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &mariadbSource{m: h.m, name: name, db: db}
}

type mariadbSource struct {
	m    *testenv.MariaDB
	name string
	db   *sql.DB
}

// Exec runs the statements between BEGIN and COMMIT on one connection,
// rolling back on an error.
func (s *mariadbSource) Exec(stmts ...string) error {
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			return err
		}
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}

func (s *mariadbSource) DB() *sql.DB  { return s.db }
func (s *mariadbSource) URL() string  { return s.m.URL(s.name) }
func (s *mariadbSource) Name() string { return s.name }

func (s *mariadbSource) Table(name string) change.TableID {
	return change.TableID{Schema: s.name, Name: name}
}

// End is the binlog end as a commit position: the file's index, then the
// offset.
func (s *mariadbSource) End(t *testing.T) uint64 {
	t.Helper()
	var file, pos, doDB, ignoreDB string
	if err := s.db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &doDB, &ignoreDB); err != nil {
		t.Fatal(err)
	}
	idx, err1 := strconv.ParseUint(file[strings.LastIndexByte(file, '.')+1:], 10, 32)
	p, err2 := strconv.ParseUint(pos, 10, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("SHOW MASTER STATUS: %s %s", file, pos)
	}
	return idx<<32 | p
}

func (s *mariadbSource) Acked(cp pipeline.Checkpoint) uint64 { return cp.Pos }

func (s *mariadbSource) SnapshotPause(d time.Duration) []string {
	return []string{fmt.Sprintf("%s=mysql-snapshot-between-chunks=sleep(%d)", failpoint.EnvVar, d.Milliseconds())}
}

// Types is mysqltest's golden table, compared with the lake values
// testdata/mysql_types.golden records for each row.
func (s *mariadbSource) Types(t *testing.T) sourcetest.TypeTable {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cols, err := mysqltest.ReadGolden(root)
	if err != nil {
		t.Fatal(err)
	}
	return sourcetest.TypeTable{
		Name:   mysqltest.Table,
		Create: []string{mysqltest.DDL},
		Rows:   mysqltest.Rows,
		// The golden's row of each id; the rows the suite moved to
		// id + 1000 hold the values of the row they were.
		Want: func(t *testing.T) map[string]map[string]string {
			golden := mysqltest.Want(cols)
			rs, err := s.db.Query("SELECT id FROM " + mysqltest.Table)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			out := map[string]map[string]string{}
			for rs.Next() {
				var id int
				if err := rs.Scan(&id); err != nil {
					t.Fatal(err)
				}
				row, ok := golden[strconv.Itoa(id%1000)]
				if !ok {
					t.Fatalf("%s holds id %d, of no golden row", mysqltest.Table, id)
				}
				want := map[string]string{}
				for k, v := range row {
					want[k] = v
				}
				want["id"] = strconv.Itoa(id)
				out[strconv.Itoa(id)] = want
			}
			if err := rs.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
		Lake: func(t *testing.T, rows []map[string]any) map[string]map[string]string {
			out := map[string]map[string]string{}
			for _, r := range rows {
				row := map[string]string{}
				for _, c := range cols {
					v, ok := r[c.Name]
					if !ok {
						row[c.Name] = "(no such column)"
						continue
					}
					text, err := mysqltest.RenderJSON(v, c.Arrow)
					if err != nil {
						t.Errorf("%s column %s: PyIceberg's %v: %v", mysqltest.Table, c.Name, v, err)
					}
					row[c.Name] = text
				}
				out[row["id"]] = row
			}
			return out
		},
	}
}
