package pipeline

import (
	"context"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

// SnapshotScheduler decides which tables a capture snapshots and hands them
// to a fixed set of snapshot workers. Both the tables a capture starts with
// and the tables it picks up later (a table added to a PostgreSQL
// publication, a MySQL CREATE TABLE) go through Admit, so one rule decides
// for all of them:
//
//   - a table whose snapshot is done or skipped is left alone: its rows are
//     in the lake, or were deliberately not backfilled;
//   - otherwise, when snapshots are enabled or the table carries a
//     `tidemark resnapshot` request (an explicit request is never skipped),
//     it is queued, once per run, and a worker reads it from where its
//     persisted progress left off;
//   - otherwise it is recorded as skipped in the lake (PropSnapshot), with
//     the sink's next flush.
//
// How a table is read (chunks, watermarks, reconciliation with the stream)
// is the source's: the scheduler only queues and runs. T is the source's
// table handle.
//
// The queue is unbounded: Admit never blocks, so the stream goroutine that
// picks up a new table never waits for a worker, which may itself be
// waiting for the stream to reconcile a chunk.
type SnapshotScheduler[T any] struct {
	sink    Sink
	enabled bool

	mu      sync.Mutex
	queued  map[change.TableID]bool // every table queued this run, read or not
	pending []T                     // queued, not yet taken by a worker
	wake    chan struct{}           // a token: pending may be non-empty
}

// NewSnapshotScheduler returns a scheduler that records skipped snapshots
// in sink; enabled is the configuration's snapshot.enabled.
func NewSnapshotScheduler[T any](sink Sink, enabled bool) *SnapshotScheduler[T] {
	return &SnapshotScheduler[T]{sink: sink, enabled: enabled, queued: map[change.TableID]bool{}, wake: make(chan struct{}, 1)}
}

// Admit applies the rule above to table id, whose snapshot progress st the
// source holds (the state the lake returned for it). It returns whether t
// was queued. Skipping sets st.Status to SnapshotSkipped and buffers that
// state in the sink (a WriteBatch without rows), so Admit must be called
// where the sink may be: on the source's stream goroutine, or before that
// goroutine starts. Queueing does not block; a table already queued this
// run is not queued again.
func (s *SnapshotScheduler[T]) Admit(ctx context.Context, id change.TableID, st *SnapshotState, t T) (bool, error) {
	switch {
	case st.Status == SnapshotDone || st.Status == SnapshotSkipped:
		return false, nil
	case s.enabled || st.Request != "":
		s.enqueue(id, t)
		return true, nil
	default:
		st.Status = SnapshotSkipped
		return false, s.sink.WriteBatch(ctx, id, nil, map[string]string{PropSnapshot: st.Encode()})
	}
}

func (s *SnapshotScheduler[T]) enqueue(id change.TableID, t T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queued[id] {
		return
	}
	s.queued[id] = true
	s.pending = append(s.pending, t)
	s.signal()
}

// Finish ends the queued state of table id once its snapshot has read the
// last chunk, so that a later Admit (a re-snapshot the source decides on
// while running, e.g. a table rewritten at the source) queues it again. It
// does so only if last() holds, checked under the scheduler's lock, and
// reports whether it did: a source that restarts a running snapshot
// changes what last() sees before it calls Admit, so either the running
// worker sees the restart or the table is queued again, never neither.
func (s *SnapshotScheduler[T]) Finish(id change.TableID, last func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !last() {
		return false
	}
	delete(s.queued, id)
	return true
}

// signal leaves a wake token unless one is already there. Called with mu.
func (s *SnapshotScheduler[T]) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next waits for a queued table, in the order queued; ok=false once ctx
// is done.
func (s *SnapshotScheduler[T]) next(ctx context.Context) (t T, ok bool) {
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			t = s.pending[0]
			var zero T
			s.pending[0] = zero
			s.pending = s.pending[1:]
			if len(s.pending) > 0 {
				s.signal() // another worker may be waiting
			}
			s.mu.Unlock()
			return t, true
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return t, false
		case <-s.wake:
		}
	}
}

// SnapshotWorker reads tables for a SnapshotScheduler, one at a time, on
// one goroutine: it may keep a connection from one table to the next.
type SnapshotWorker[T any] interface {
	// Snapshot reads t whole, from its persisted progress on, and returns
	// once its last chunk is reconciled with the stream (or the table went
	// away). Blocking. An error ends the capture session; one returned
	// after ctx is done is taken for the cancellation it likely is.
	Snapshot(ctx context.Context, t T) error
	// Close releases what the worker holds; called once, when it stops.
	Close()
}

// SnapshotFunc is a SnapshotWorker that holds nothing between tables.
type SnapshotFunc[T any] func(ctx context.Context, t T) error

// Snapshot calls f.
func (f SnapshotFunc[T]) Snapshot(ctx context.Context, t T) error { return f(ctx, t) }

// Close does nothing.
func (SnapshotFunc[T]) Close() {}

// Run starts workers (at least one) goroutines, each with a worker from
// newWorker, which take queued tables until ctx is done, and waits for
// them. It returns the first worker's error, and nil once ctx is done. A
// panic in a worker becomes its error (fault.Guard), named after where.
// Tables admitted while Run runs are read too. Call Run once.
func (s *SnapshotScheduler[T]) Run(ctx context.Context, workers int, where string, newWorker func() SnapshotWorker[T]) error {
	g, gctx := errgroup.WithContext(ctx)
	for i := 0; i < max(workers, 1); i++ {
		g.Go(fault.Guard(where, func() error {
			w := newWorker()
			defer w.Close()
			for {
				t, ok := s.next(gctx)
				if !ok {
					return nil
				}
				if err := w.Snapshot(gctx, t); err != nil {
					if gctx.Err() != nil {
						return nil
					}
					return err
				}
			}
		}))
	}
	return g.Wait()
}
