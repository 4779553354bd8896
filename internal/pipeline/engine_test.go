package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// memSink is an in-memory Sink. Its flushes "commit" what is buffered to
// durable; a background flush commits only when the test releases it, so
// the test decides when a checkpoint becomes durable.
type memSink struct {
	buffered int64
	durable  []pipeline.Checkpoint // checkpoints recorded, in order
	failNext error                 // the next flush fails with it

	background bool
	inFlight   *memFlush
	autoLand   bool // a background flush commits at once
}

type memFlush struct {
	cp      pipeline.Checkpoint
	bytes   int64
	release chan struct{} // closed by the test: the commit lands
	done    chan struct{}
	err     error
}

func (s *memSink) OpenTable(context.Context, change.TableID, *change.Schema) (pipeline.TableState, error) {
	return pipeline.TableState{}, nil
}
func (s *memSink) Write(context.Context, *change.Change) error { s.buffered += 100; return nil }
func (s *memSink) WriteBatch(context.Context, change.TableID, []*change.Change, map[string]string) error {
	return nil
}
func (s *memSink) DeadLetter(context.Context, change.DeadLetter) error { return nil }
func (s *memSink) Message(context.Context, change.Message) error       { return nil }
func (s *memSink) Buffered() int64                                     { return s.buffered }
func (s *memSink) LoadCheckpoint(context.Context) (pipeline.Checkpoint, bool, error) {
	if len(s.durable) == 0 {
		return pipeline.Checkpoint{}, false, nil
	}
	return s.durable[len(s.durable)-1], true, nil
}

func (s *memSink) Flush(_ context.Context, cp pipeline.Checkpoint) error {
	if err := s.failNext; err != nil {
		s.failNext = nil
		return err
	}
	s.buffered = 0
	s.durable = append(s.durable, cp)
	return nil
}

// bgSink is a memSink that flushes in the background.
type bgSink struct{ *memSink }

var _ pipeline.BackgroundSink = bgSink{}

func (s bgSink) StartFlush(_ context.Context, cp pipeline.Checkpoint) error {
	if _, err := s.FinishFlush(); err != nil {
		return err
	}
	f := &memFlush{cp: cp, bytes: s.buffered, release: make(chan struct{}), done: make(chan struct{})}
	fail := s.failNext
	s.failNext = nil
	s.buffered = 0
	s.inFlight = f
	if s.autoLand {
		close(f.release)
	}
	go func() {
		<-f.release
		f.err = fail
		close(f.done)
	}()
	return nil
}

func (s bgSink) FlushDone() <-chan struct{} {
	if s.inFlight == nil {
		return nil
	}
	return s.inFlight.done
}

func (s bgSink) FinishFlush() (pipeline.Checkpoint, error) {
	f := s.inFlight
	if f == nil {
		return pipeline.Checkpoint{}, nil
	}
	<-f.done
	s.inFlight = nil
	if f.err != nil {
		return pipeline.Checkpoint{}, f.err
	}
	s.durable = append(s.durable, f.cp)
	return f.cp, nil
}

// land lets the flush in flight commit and waits until it has.
func (s bgSink) land(t *testing.T) {
	t.Helper()
	if s.inFlight == nil {
		t.Fatal("no flush in flight")
	}
	close(s.inFlight.release)
	<-s.inFlight.done
}

// recorder checks every acknowledgement against what the sink holds.
type recorder struct {
	t     *testing.T
	sink  *memSink
	acked []pipeline.Checkpoint
}

func (r *recorder) ack(_ context.Context, cp pipeline.Checkpoint) error {
	r.t.Helper()
	found := false
	for _, d := range r.sink.durable {
		if d.Pos == cp.Pos && d.Resume == cp.Resume {
			found = true
		}
	}
	if !found {
		r.t.Errorf("acknowledged %s before the sink recorded it durable (durable: %v)", cp.Resume, r.sink.durable)
	}
	r.acked = append(r.acked, cp)
	return nil
}

func (r *recorder) last() uint64 {
	if len(r.acked) == 0 {
		return 0
	}
	return r.acked[len(r.acked)-1].Pos
}

func tx(pos uint64) pipeline.Checkpoint {
	return pipeline.Checkpoint{Pos: pos, Resume: strconv.FormatUint(pos+1, 10), Watermark: time.Unix(int64(pos), 0)}
}

func newEngine(t *testing.T, background bool, interval time.Duration, commitBytes int64) (*pipeline.Engine, *memSink, *recorder) {
	ms := &memSink{background: background}
	r := &recorder{t: t, sink: ms}
	var sink pipeline.Sink = ms
	if background {
		sink = bgSink{ms}
	}
	e := pipeline.NewEngine(sink, tx(0), pipeline.EngineOptions{CommitInterval: interval, CommitBytes: commitBytes, Ack: r.ack})
	return e, ms, r
}

func TestEngineAcksOnlyDurableCheckpoints(t *testing.T) {
	ctx := context.Background()
	e, ms, r := newEngine(t, true, 0, 1<<20) // every Poll is due
	bg := bgSink{ms}
	ms.Write(ctx, nil)
	e.Completed(tx(10))
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.Flushing() {
		t.Fatal("a due flush did not start")
	}
	// More transactions while the flush commits: nothing is acknowledged,
	// however often Poll runs.
	ms.Write(ctx, nil)
	e.Completed(tx(20))
	for range 3 {
		if err := e.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.acked) != 0 {
		t.Fatalf("acknowledged %v while the flush was in flight", r.acked)
	}
	if w := e.Wake(); w.After(time.Now().Add(time.Second)) {
		t.Errorf("Wake %v with a flush in flight: want soon", w)
	}
	bg.land(t)
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if r.last() != 10 || e.Acked().Pos != 10 {
		t.Fatalf("after the flush landed: acked %d (engine says %d), want 10", r.last(), e.Acked().Pos)
	}
	// The same Poll started the next flush (it was due): it holds tx 20.
	if !e.Flushing() {
		t.Fatal("the next due flush did not start once the first was durable")
	}
	bg.land(t)
	ms.autoLand = true // Sync starts a last flush and waits for it
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if r.last() != 20 {
		t.Fatalf("after Sync: acked %d, want 20", r.last())
	}
}

func TestEngineNeverAcksAFailedFlush(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("commit failed")
	for _, background := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "background"}[background], func(t *testing.T) {
			e, ms, r := newEngine(t, background, 0, 1<<20)
			ms.Write(ctx, nil)
			e.Completed(tx(10))
			ms.failNext = boom
			err := e.Poll(ctx)
			if background {
				if err != nil {
					t.Fatal(err)
				}
				bgSink{ms}.land(t)
				err = e.Poll(ctx)
			}
			if !errors.Is(err, boom) {
				t.Fatalf("Poll after a failed flush: %v, want the flush's error", err)
			}
			if len(r.acked) != 0 || e.Acked().Pos != 0 {
				t.Fatalf("a failed flush was acknowledged: %v (engine says %d)", r.acked, e.Acked().Pos)
			}
		})
	}
}

func TestEngineCommitBytesBackPressure(t *testing.T) {
	ctx := context.Background()
	e, ms, r := newEngine(t, true, time.Hour, 250) // never due: only size flushes
	ms.Write(ctx, nil)
	ms.Write(ctx, nil)
	e.Completed(tx(10))
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if e.Flushing() {
		t.Fatal("flushed below commit_bytes before commit_interval")
	}
	ms.Write(ctx, nil) // 300 bytes: full, inside a transaction
	if !e.Full() {
		t.Fatal("not Full at commit_bytes")
	}
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.Flushing() || ms.buffered != 0 {
		t.Fatalf("at commit_bytes: flushing %v, buffered %d; want a flush holding everything", e.Flushing(), ms.buffered)
	}
	if got := ms.inFlight.cp.Pos; got != 10 {
		t.Fatalf("flush inside a transaction records position %d, want the last complete transaction (10)", got)
	}
	// Full again while that flush commits: the next Poll must wait for it
	// (at most one flush in flight and one full buffer).
	ms.Write(ctx, nil)
	ms.Write(ctx, nil)
	ms.Write(ctx, nil)
	first := ms.inFlight
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(first.release)
	}()
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	default:
		t.Fatal("Poll at commit_bytes returned before the flush in flight finished")
	}
	if r.last() != 10 {
		t.Fatalf("the first flush was not acknowledged when Poll waited for it: acked %v", r.acked)
	}
	if !e.Flushing() || ms.inFlight == first {
		t.Fatal("the full buffer was not flushed after the first flush")
	}
}

func TestEngineFinalFlush(t *testing.T) {
	ctx := context.Background()
	for _, background := range []bool{false, true} {
		t.Run(map[bool]string{false: "sync", true: "background"}[background], func(t *testing.T) {
			e, ms, r := newEngine(t, background, time.Hour, 1<<20)
			ms.Write(ctx, nil)
			e.Completed(tx(10))
			ms.Write(ctx, nil)
			e.Completed(tx(20))
			ms.autoLand = true // Sync waits for the flush it starts
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if ms.buffered != 0 || len(ms.durable) != 1 || ms.durable[0].Pos != 20 {
				t.Fatalf("after Sync: buffered %d, durable %v; want everything in one flush at 20", ms.buffered, ms.durable)
			}
			if r.last() != 20 || e.Acked().Pos != 20 {
				t.Fatalf("after Sync: acked %v, want 20", r.acked)
			}
		})
	}
}

func TestEngineIdleDoesNotFlush(t *testing.T) {
	ctx := context.Background()
	e, ms, r := newEngine(t, true, 0, 1<<20)
	for range 3 {
		if err := e.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e.Flushing() || len(ms.durable) != 0 || len(r.acked) != 0 {
		t.Fatal("an idle engine flushed")
	}
	// A transaction with no rows (a heartbeat) still moves the checkpoint.
	e.Completed(tx(5))
	if err := e.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if !e.Flushing() {
		t.Fatal("a completed empty transaction was not flushed when due")
	}
}

func TestEnginePollDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	e, ms, _ := newEngine(t, true, time.Hour, 1<<20)
	ms.Write(ctx, nil)
	cp := tx(10)
	if n := testing.AllocsPerRun(1000, func() {
		e.Completed(cp)
		if err := e.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		e.Wake()
	}); n != 0 {
		t.Fatalf("Completed+Poll+Wake allocate %v times per call", n)
	}
}

// BenchmarkEnginePerMessage is the engine's cost on the source's hot path:
// one Completed, Poll and Wake per message, nothing due.
func BenchmarkEnginePerMessage(b *testing.B) {
	ctx := context.Background()
	ms := &memSink{}
	e := pipeline.NewEngine(bgSink{ms}, tx(0), pipeline.EngineOptions{CommitInterval: time.Hour, CommitBytes: 1 << 30,
		Ack: func(context.Context, pipeline.Checkpoint) error { return nil }})
	cp := tx(10)
	b.ReportAllocs()
	for b.Loop() {
		e.Completed(cp)
		if err := e.Poll(ctx); err != nil {
			b.Fatal(err)
		}
		e.Wake()
	}
}
