package maintain_test

import (
	"context"
	"testing"
	"time"

	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/maintain"
)

// TestLoopReportsEachRun: Loop tells OnRun the outcome of every run (the
// metrics count them), and stops when its context is done.
func TestLoopReportsEachRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	runs := make(chan error, 16)
	m := maintain.New(cat, maintain.Options{OnRun: func(err error) {
		select {
		case runs <- err:
		default:
		}
	}}, testLogger())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Loop(ctx, "src", 10*time.Millisecond)
	}()
	for i := 0; i < 2; i++ {
		if err := <-runs; err != nil {
			t.Errorf("run %d of an empty lake: %v", i+1, err)
		}
	}
	cancel()
	<-done
}
