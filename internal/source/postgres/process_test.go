package postgres_test

import (
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap/typemaptest"
	"github.com/tidemark/tidemark/internal/source/sourcetest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestConformanceProcess runs the process-level conformance suite on
// PostgreSQL: tidemark run as a subprocess, SIGKILLed during the snapshot
// and the stream, and silver compared with the source (verify, PyIceberg).
func TestConformanceProcess(t *testing.T) {
	sourcetest.RunProcess(t, pgProcess{pg: testenv.Shared(t)})
}

type pgProcess struct{ pg *testenv.PG }

func (h pgProcess) NewSource(t *testing.T) sourcetest.Source {
	srcURL := h.pg.CreateDB(t, "proc")
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	// Small enough that the suite's big transaction is streamed to
	// tidemark while in progress (pgoutput streaming, spooled to disk);
	// the walsender picks up per-database settings.
	dbname := strings.TrimPrefix(u.Path, "/")
	h.pg.Exec(t, srcURL, "ALTER DATABASE "+pgx.Identifier{dbname}.Sanitize()+" SET logical_decoding_work_mem = '64kB'")
	db, err := sql.Open("pgx", srcURL)
	if err != nil {
		t.Fatal(err)
	}
	// Closed before the database is dropped (cleanups run last first).
	t.Cleanup(func() { db.Close() })
	return &pgSource{url: srcURL, name: strings.ToLower(dbname), db: db}
}

type pgSource struct {
	url, name string
	db        *sql.DB
}

// Exec runs the statements as one simple query: one transaction.
func (s *pgSource) Exec(stmts ...string) error {
	_, err := s.db.Exec(strings.Join(stmts, ";\n"))
	return err
}

func (s *pgSource) DB() *sql.DB  { return s.db }
func (s *pgSource) URL() string  { return s.url }
func (s *pgSource) Name() string { return s.name }

func (s *pgSource) Table(name string) change.TableID {
	return change.TableID{Schema: "public", Name: name}
}

// End is the WAL insert position: with synchronous_commit=off (the test
// server), pg_current_wal_lsn() can be behind a commit that has returned.
func (s *pgSource) End(t *testing.T) uint64 {
	t.Helper()
	var text string
	if err := s.db.QueryRow("SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
		t.Fatal(err)
	}
	lsn, err := postgres.ParseLSN(text)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func (s *pgSource) Acked(cp pipeline.Checkpoint) uint64 { return postgres.AckedLSN(cp) }

func (s *pgSource) SnapshotPause(d time.Duration) []string {
	return []string{fmt.Sprintf("%s=snapshot-between-chunks=sleep(%d)", failpoint.EnvVar, d.Milliseconds())}
}

// Types is typemaptest's whole_types, compared in the canonical forms its
// SQL computes at the source.
func (s *pgSource) Types(*testing.T) sourcetest.TypeTable {
	cols := append(slices.Clip(typemaptest.BaseColumns), typemaptest.Columns...)
	return sourcetest.TypeTable{
		Name:   typemaptest.Table,
		Create: []string{typemaptest.CreateTypes, typemaptest.CreateTable()},
		Rows:   []string{typemaptest.Rows(0)},
		Want: func(t *testing.T) map[string]map[string]string {
			return typemaptest.ReadSource(t, s.url, s.Table(typemaptest.Table), cols)
		},
		Lake: func(t *testing.T, rows []map[string]any) map[string]map[string]string {
			return typemaptest.ReadLake(t, rows, cols)
		},
	}
}
