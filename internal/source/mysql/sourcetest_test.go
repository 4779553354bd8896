package mysql

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/sourcetest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestConformance runs the source conformance suite on MariaDB. The
// server is the suite's own: LostPosition purges its binary logs.
func TestConformance(t *testing.T) {
	sourcetest.Run(t, &mariadbHarness{m: testenv.StartMariaDB(t)})
}

type mariadbHarness struct {
	m      *testenv.MariaDB
	nextID atomic.Uint32
}

func (h *mariadbHarness) NewDatabase(t *testing.T) sourcetest.Database {
	// A server id per database: a session of an earlier test may still be
	// registered with the server for a moment.
	return &mariadbDatabase{m: h.m, name: h.m.CreateDB(t, "conf"), serverID: 7000 + h.nextID.Add(1), dir: t.TempDir()}
}

type mariadbDatabase struct {
	m        *testenv.MariaDB
	name     string
	serverID uint32
	dir      string
}

func (d *mariadbDatabase) Exec(t *testing.T, stmts ...string) {
	t.Helper()
	if len(stmts) == 1 {
		d.m.ExecIn(t, d.name, stmts[0])
		return
	}
	ctx := context.Background()
	conn, err := d.m.Root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range append(append([]string{"USE `" + d.name + "`", "BEGIN"}, stmts...), "COMMIT") {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func (d *mariadbDatabase) Table(name string) change.TableID {
	return change.TableID{Schema: d.name, Name: name}
}

func (d *mariadbDatabase) Open(t *testing.T, sink pipeline.Sink, log *slog.Logger) sourcetest.Capture {
	return New(sink, Options{
		Host: d.m.Host, Port: d.m.Port, User: d.m.User, Password: d.m.Password, Database: d.name,
		ServerID: d.serverID, SpoolDir: d.dir,
		CommitInterval: 100 * time.Millisecond, CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		Snapshot: SnapshotOptions{Enabled: true, Parallelism: 2, ChunkRows: 40, ChunkBytes: 8 << 20},
	}, log)
}

func (d *mariadbDatabase) LosePosition(t *testing.T) { d.m.PurgeBinlogs(t) }

func (d *mariadbDatabase) LostPosition() *fault.Error { return fault.ErrBinlogPurged }
