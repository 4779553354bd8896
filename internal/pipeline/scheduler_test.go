package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// batchSink records the table state a WriteBatch without rows carries.
type batchSink struct {
	memSink
	props map[change.TableID]string
}

func (s *batchSink) WriteBatch(_ context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	if s.props == nil {
		s.props = map[change.TableID]string{}
	}
	s.props[id] = props[pipeline.PropSnapshot]
	return nil
}

func tid(name string) change.TableID { return change.TableID{Schema: "s", Name: name} }

// TestSnapshotSchedulerAdmit checks the one rule both sources apply to the
// tables they start with and the ones they pick up later.
func TestSnapshotSchedulerAdmit(t *testing.T) {
	cases := []struct {
		name    string
		st      pipeline.SnapshotState
		enabled bool
		queued  bool
		skipped bool // recorded skipped in the sink
	}{
		{"new table, snapshots on", pipeline.SnapshotState{Status: pipeline.SnapshotPending}, true, true, false},
		{"new table, snapshots off", pipeline.SnapshotState{Status: pipeline.SnapshotPending}, false, false, true},
		{"interrupted snapshot resumes", pipeline.SnapshotState{Status: pipeline.SnapshotRunning, LastKey: []string{"7"}}, true, true, false},
		{"interrupted snapshot, snapshots turned off", pipeline.SnapshotState{Status: pipeline.SnapshotRunning}, false, false, true},
		{"done stays done", pipeline.SnapshotState{Status: pipeline.SnapshotDone}, true, false, false},
		{"done stays done, off", pipeline.SnapshotState{Status: pipeline.SnapshotDone}, false, false, false},
		{"skipped stays skipped", pipeline.SnapshotState{Status: pipeline.SnapshotSkipped}, true, false, false},
		{"resnapshot request is never skipped", pipeline.SnapshotState{Status: pipeline.SnapshotPending, Request: "r1"}, false, true, false},
		{"resnapshot request, snapshots on", pipeline.SnapshotState{Status: pipeline.SnapshotPending, Request: "r1"}, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sink := &batchSink{}
			s := pipeline.NewSnapshotScheduler[string](sink, tc.enabled)
			st := tc.st
			queued, err := s.Admit(context.Background(), tid("t"), &st, "t")
			if err != nil {
				t.Fatal(err)
			}
			if queued != tc.queued {
				t.Errorf("queued = %v, want %v", queued, tc.queued)
			}
			got, wrote := sink.props[tid("t")]
			if wrote != tc.skipped {
				t.Fatalf("recorded state %q in the sink (wrote=%v), want a write: %v", got, wrote, tc.skipped)
			}
			if tc.skipped {
				rec, err := pipeline.ParseSnapshotState(got)
				if err != nil || rec.Status != pipeline.SnapshotSkipped || st.Status != pipeline.SnapshotSkipped {
					t.Errorf("recorded %q (%v), source's state %q: want both skipped", got, err, st.Status)
				}
			} else if st.Status != tc.st.Status {
				t.Errorf("state changed to %q", st.Status)
			}
			if queued {
				ran := runAll(t, s, 1, 1)
				if len(ran) != 1 || ran[0] != "t" {
					t.Errorf("workers read %v, want [t]", ran)
				}
			}
		})
	}
}

// runAll runs s with n workers until want tables were read, and returns
// them in the order read.
func runAll(t *testing.T, s *pipeline.SnapshotScheduler[string], n, want int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var ran []string
	err := s.Run(ctx, n, "test worker", func() pipeline.SnapshotWorker[string] {
		return pipeline.SnapshotFunc[string](func(ctx context.Context, name string) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name)
			if len(ran) == want {
				cancel()
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return ran
}

// TestSnapshotSchedulerReadsEachTableOnce: a table admitted twice (picked
// up again) is read once; tables admitted while the workers run are read
// too; more tables than the old fixed queue held (4096) are admitted
// without a worker running, so Admit never blocks the stream.
func TestSnapshotSchedulerReadsEachTableOnce(t *testing.T) {
	const tables = 5000
	s := pipeline.NewSnapshotScheduler[string](&batchSink{}, true)
	ctx := context.Background()
	for i := 0; i < tables; i++ {
		name := fmt.Sprint("t", i)
		for range 2 {
			st := pipeline.SnapshotState{Status: pipeline.SnapshotPending}
			if _, err := s.Admit(ctx, tid(name), &st, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	workers, closed := 0, 0
	const late = "late"
	err := s.Run(ctx, 3, "test worker", func() pipeline.SnapshotWorker[string] {
		mu.Lock()
		workers++
		mu.Unlock()
		return &countingWorker{closed: &closed, mu: &mu, snapshot: func(ctx context.Context, name string) error {
			mu.Lock()
			seen[name]++
			n := len(seen)
			mu.Unlock()
			if n == tables {
				// A table picked up while the others were read.
				st := pipeline.SnapshotState{Status: pipeline.SnapshotPending}
				if _, err := s.Admit(ctx, tid(late), &st, late); err != nil {
					return err
				}
			}
			if name == late {
				cancel()
			}
			return nil
		}}
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(seen) != tables+1 {
		t.Errorf("read %d tables, want %d", len(seen), tables+1)
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("table %s read %d times", name, n)
		}
	}
	if workers != 3 || closed != 3 {
		t.Errorf("%d workers started, %d closed: want 3 and 3", workers, closed)
	}
}

type countingWorker struct {
	mu       *sync.Mutex
	closed   *int
	snapshot func(context.Context, string) error
}

func (w *countingWorker) Snapshot(ctx context.Context, name string) error {
	return w.snapshot(ctx, name)
}
func (w *countingWorker) Close() { w.mu.Lock(); *w.closed++; w.mu.Unlock() }

// TestSnapshotSchedulerWorkerFailure: a worker's error ends Run with that
// error (the capture session ends); a panic is an error, not a crash.
func TestSnapshotSchedulerWorkerFailure(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fail func() error
		want func(error) bool
	}{
		{"error", func() error { return boom }, func(err error) bool { return errors.Is(err, boom) }},
		{"panic", func() error { panic("bug") }, func(err error) bool { return err != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := pipeline.NewSnapshotScheduler[string](&batchSink{}, true)
			for _, name := range []string{"a", "b"} {
				st := pipeline.SnapshotState{}
				if _, err := s.Admit(context.Background(), tid(name), &st, name); err != nil {
					t.Fatal(err)
				}
			}
			err := s.Run(context.Background(), 2, "test worker", func() pipeline.SnapshotWorker[string] {
				return pipeline.SnapshotFunc[string](func(ctx context.Context, name string) error {
					if name == "a" {
						return tc.fail()
					}
					<-ctx.Done() // b is read until the failure of a ends the run
					return ctx.Err()
				})
			})
			if !tc.want(err) {
				t.Errorf("Run = %v", err)
			}
		})
	}
}
