package iceberg

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark/tidemark/internal/lake"
)

// retryBusy retries SQLite's immediate "database is locked" (seen in CI when
// a test read the catalog while `tidemark run` opened it), and nothing else.
func TestRetryBusy(t *testing.T) {
	busy := errors.New("database is locked (5) (SQLITE_BUSY)")
	calls := 0
	counted := lake.Retries(lake.RetryCatalogBusy)
	err := retryBusy(context.Background(), func() error {
		calls++
		if calls < 3 {
			return busy
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("busy twice then ok: err %v after %d calls, want nil after 3", err, calls)
	}
	if got := lake.Retries(lake.RetryCatalogBusy) - counted; got < 2 {
		t.Errorf("catalog busy retries counted: %d, want >= 2", got)
	}
	other := errors.New("no such table")
	calls = 0
	if err := retryBusy(context.Background(), func() error { calls++; return other }); !errors.Is(err, other) || calls != 1 {
		t.Errorf("another error: %v after %d calls, want it after 1", err, calls)
	}
	calls = 0
	if err := retryBusy(context.Background(), func() error { calls++; return busy }); !errors.Is(err, busy) || calls != 10 {
		t.Errorf("always busy: %v after %d calls, want the error after 10", err, calls)
	}
	snapshot := errors.New("error updating namespace properties for 'bronze.x': database is locked (517)")
	calls = 0
	if err := retryBusy(context.Background(), func() error {
		calls++
		if calls < 3 {
			return snapshot
		}
		return nil
	}); err != nil || calls != 3 {
		t.Errorf("SQLITE_BUSY_SNAPSHOT (517) twice then ok: err %v after %d calls, want nil after 3", err, calls)
	}
}
