package silver

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
)

// DefaultGiveUp is how long Run keeps retrying merges that fail with
// retryable errors before it stops with the last one.
const DefaultGiveUp = 15 * time.Minute

// gatedEvery is the longest Run waits between merges while a table is
// gated (Run).
const gatedEvery = time.Second

// Run merges every bronze table of source into silver, then again every
// `every` (DefaultEvery if <= 0), until ctx is done; it returns nil then.
// It is the silver half of `tidemark run`, beside the capture.
//
// A merge that fails with a fatal or configuration error (an incompatible
// schema change, a lost cursor) stops Run with that error: silver does not
// silently fall behind. Other errors are logged and retried at the next
// tick; when no merge has succeeded for DefaultGiveUp, Run returns the last
// error, marked transient.
func (m *Merger) Run(ctx context.Context, source string, every time.Duration) error {
	if every <= 0 {
		every = DefaultEvery
	}
	lastOK := m.now()
	var wake chan struct{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake:
			timer.Stop()
		}
		start := m.now()
		gated, err := m.mergeAll(ctx, source)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
			lastOK = m.now()
		case fault.NeedsOperator(err):
			return err
		case m.now().Sub(lastOK) > DefaultGiveUp:
			return fault.MarkTransient(fmt.Errorf("silver: no successful merge for %s: %w", DefaultGiveUp, err))
		default:
			m.log.Warn("silver merge failed, retrying at the next run", "error", err.Error(), "retry_in", every.String())
		}
		// The next run starts `every` after this one started, or at once
		// when merging took longer. While a table waits for its initial
		// snapshot, runs come at least every gatedEvery: its silver table is
		// built as soon as the snapshot is done, not up to `every` later (a
		// gated table costs a few catalog reads).
		next := every
		wake = nil
		if gated {
			next = min(every, gatedEvery)
			// Bronze's commits wake a gated table's check (Wake): the
			// build starts as soon as the snapshot's last chunk is
			// committed.
			wake = m.wake
		}
		timer.Reset(max(0, next-m.now().Sub(start)))
	}
}

// Wake tells Run that bronze committed: while a table waits for its
// initial snapshot, Run checks it now rather than at its next tick, so
// that the silver build starts the moment the snapshot is complete. It
// never blocks.
func (m *Merger) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}
