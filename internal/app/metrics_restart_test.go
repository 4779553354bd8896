package app_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestSnapshotGaugesAfterRestart: a process started again on a lake whose
// snapshot is complete reports tidemark_snapshot_done 1 (and the rows read)
// at once, before the idle table's next commit: the control plane's
// "initial snapshot completed" trigger and the TidemarkSnapshotStalled
// alert read it.
func TestSnapshotGaugesAfterRestart(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "snaprestart")
	pg.Exec(t, url, `CREATE TABLE m (id int PRIMARY KEY, v text); INSERT INTO m SELECT g, 'snap' FROM generate_series(1, 30) g`)
	wh := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	session := func(what string, until func(s scrape) bool) {
		t.Helper()
		cfg := testConfig(t, url, wh)
		cfg.MetricsAddr = freeAddr(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- app.Run(ctx, cfg, log) }()
		defer func() { cancel(); <-done }()
		for end := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if s, up := scrapeMetrics(t, cfg.MetricsAddr); up && until(s) {
				return
			}
			if time.Now().After(end) {
				s, _ := scrapeMetrics(t, cfg.MetricsAddr)
				t.Fatalf("%s: not within a minute; metrics:\n%s", what, grepLines(s.body, "tidemark_snapshot"))
			}
		}
	}
	done := func(s scrape) bool {
		d, _ := s.get("tidemark_snapshot_done", "source", "src", "table", "public.m")
		rows, _ := s.get("tidemark_snapshot_read_rows", "source", "src", "table", "public.m")
		return d == 1 && rows == 30
	}
	session("the snapshot", done)
	session("the restarted process reporting the completed snapshot (no change at the source)", done)
}
