package postgres_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/sourcetest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestConformance runs the source conformance suite on PostgreSQL.
func TestConformance(t *testing.T) {
	sourcetest.Run(t, pgHarness{pg: testenv.Shared(t)})
}

type pgHarness struct{ pg *testenv.PG }

func (h pgHarness) NewDatabase(t *testing.T) sourcetest.Database {
	url := h.pg.CreateDB(t, "conf")
	// Slots are the cluster's: one per database.
	slot := "tm_" + strings.ToLower(url[strings.LastIndex(url, "/")+1:])
	if i := strings.IndexByte(slot, '?'); i >= 0 {
		slot = slot[:i]
	}
	return &pgDatabase{pg: h.pg, url: url, slot: slot, dir: t.TempDir()}
}

type pgDatabase struct {
	pg   *testenv.PG
	url  string
	slot string
	dir  string
}

func (d *pgDatabase) Exec(t *testing.T, stmts ...string) {
	t.Helper()
	d.pg.Exec(t, d.url, strings.Join(stmts, ";\n"))
}

func (d *pgDatabase) Table(name string) change.TableID {
	return change.TableID{Schema: "public", Name: name}
}

func (d *pgDatabase) Open(t *testing.T, sink pipeline.Sink, log *slog.Logger) sourcetest.Capture {
	dl, err := postgres.NewDialer(d.url, func(string) string { return "redacted" })
	if err != nil {
		t.Fatal(err)
	}
	opts := postgres.Options{
		Slot: d.slot, Publication: "tidemark_conf", SpoolDir: filepath.Join(d.dir, "spool"),
		CommitInterval: 100 * time.Millisecond, CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		PublicationPoll: 300 * time.Millisecond,
		Snapshot:        postgres.SnapshotOptions{Enabled: true, Parallelism: 2, ChunkRows: 40, ChunkBytes: 8 << 20},
	}
	return postgres.New(dl, sink, opts, log)
}

// LosePosition drops the slot once the stopped session's walsender is gone.
func (d *pgDatabase) LosePosition(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := c.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, d.slot).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still active 30s after the capture stopped", d.slot)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.Exec(ctx, "SELECT pg_drop_replication_slot($1)", d.slot); err != nil {
		t.Fatal(err)
	}
}

func (d *pgDatabase) LostPosition() *fault.Error { return fault.ErrSlotLost }
