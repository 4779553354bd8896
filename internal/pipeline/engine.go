package pipeline

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/internal/failpoint"
)

// flushPoll is how often Wake asks to look for the end of a background
// flush when no input wakes the source.
const flushPoll = 10 * time.Millisecond

// EngineOptions configure an Engine.
type EngineOptions struct {
	// CommitInterval is how often a flush is due when something is
	// buffered or a transaction completed since the last flush.
	CommitInterval time.Duration
	// CommitBytes is the buffer size at which a flush starts at once, and
	// at which the source must wait for the flush in flight: at most one
	// flush in flight and one full buffer are held.
	CommitBytes int64
	// Ack tells the source that cp is durable (PostgreSQL: a standby status
	// update confirming its end LSN). Required. Called on the goroutine that
	// called Poll, Flush, AwaitFlush or Sync, after OnDurable; an error ends
	// the session (the next one resumes from the sink's checkpoint, which
	// is at or past what was acknowledged).
	Ack func(ctx context.Context, cp Checkpoint) error
	// OnDurable, if set, is called with each checkpoint the sink reports
	// durable, before Ack (metrics, tests).
	OnDurable func(cp Checkpoint)
	// Stamp, if set, completes the checkpoint a flush is about to record,
	// when the flush starts: facts that are known then and too costly to
	// build per transaction (PostgreSQL: the Resume token and Info with the
	// server's WAL end). It must give the checkpoint a fresh Info map, not
	// one it changes later.
	Stamp func(cp *Checkpoint)
}

// Engine decides when to flush a Sink and acknowledges a flush's
// checkpoint to the source once, and only once, the sink reports it
// durable (doc.go). All its methods are called from the source's stream
// goroutine, the one that writes to the Sink; none is safe for concurrent
// use. Poll and Wake do not allocate.
type Engine struct {
	sink Sink
	bg   BackgroundSink // nil: the sink flushes synchronously
	opts EngineOptions

	completed Checkpoint // last transaction fully handed to the sink
	acked     Checkpoint // last checkpoint durable and acknowledged
	unflushed bool       // a transaction completed since the last flush started
	flushing  bool       // a background flush is in flight
	lastFlush time.Time  // start of the last flush (or when one was last due)
	pollAt    time.Time  // Wake's answer while a flush is in flight
}

// NewEngine returns an Engine for sink, starting from start: the
// checkpoint the session resumes from, taken as completed and
// acknowledged. A sink that implements BackgroundSink is flushed in the
// background.
func NewEngine(sink Sink, start Checkpoint, opts EngineOptions) *Engine {
	e := &Engine{sink: sink, opts: opts, completed: start, acked: start, lastFlush: time.Now()}
	e.bg, _ = sink.(BackgroundSink)
	return e
}

// Completed records that every change of a transaction has been handed to
// the sink: cp is what the next flush records (after Stamp). Call it after
// the transaction's last change, in commit order. Non-blocking.
func (e *Engine) Completed(cp Checkpoint) {
	e.completed = cp
	e.unflushed = true
}

// Poll does what is due, without waiting for a flush in flight: it
// acknowledges a background flush that has finished; it starts a flush when
// commit_interval has passed and there is something to record (after
// waiting for the previous one to finish, when the sink is full); a full
// sink (commit_bytes) is flushed whether due or not. Call it from the
// source's loop, once per input and whenever Wake's time has come.
func (e *Engine) Poll(ctx context.Context) error {
	if err := e.finish(ctx, false, "stream-before-status", "stream-after-status"); err != nil {
		return err
	}
	now := time.Now()
	buffered := e.sink.Buffered()
	due := now.Sub(e.lastFlush) >= e.opts.CommitInterval
	want := due && (buffered > 0 || e.unflushed)
	switch {
	case buffered >= e.opts.CommitBytes || (want && !e.flushing):
		// At commit_bytes with a flush in flight, this waits for it.
		return e.Flush(ctx)
	case want:
		// Due while the previous flush still commits: go on decoding, and
		// start the next flush as soon as that one is durable (it then
		// takes everything received meanwhile).
	case due:
		e.lastFlush = now
	}
	return nil
}

// Wake returns when Poll must run again if no input arrives: soon while a
// flush is in flight (its checkpoint is acknowledged, and the next flush
// started, as soon as it is durable), else when commit_interval comes due.
// While a flush is in flight the answer moves at most once per 10ms, so a
// source that sets a read deadline from it changes it rarely.
func (e *Engine) Wake() time.Time {
	if !e.flushing {
		return e.lastFlush.Add(e.opts.CommitInterval)
	}
	now := time.Now()
	if !e.pollAt.After(now) || e.pollAt.After(now.Add(flushPoll)) {
		e.pollAt = now.Add(flushPoll)
	}
	return e.pollAt
}

// Full reports whether the sink holds commit_bytes or more: the source
// calls Flush before it buffers more (back-pressure inside a transaction).
// Non-blocking.
func (e *Engine) Full() bool { return e.sink.Buffered() >= e.opts.CommitBytes }

// Flushing reports whether a background flush is in flight.
func (e *Engine) Flushing() bool { return e.flushing }

// FlushSoon makes the next Poll start a flush, as if commit_interval had
// passed (a snapshot that just completed a table commits it now).
func (e *Engine) FlushSoon() { e.lastFlush = time.Time{} }

// Flush commits everything buffered with the checkpoint of the last
// completed transaction. It first waits for the flush in flight and
// acknowledges it; then, with a BackgroundSink, it starts the new flush and
// returns (Poll acknowledges it later), else it flushes, and acknowledges,
// before it returns. A checkpoint is acknowledged only after the sink
// reported it durable; an error leaves it unacknowledged.
func (e *Engine) Flush(ctx context.Context) error {
	if err := e.finish(ctx, true, "stream-before-status", "stream-after-status"); err != nil {
		return err
	}
	cp := e.completed
	if e.opts.Stamp != nil {
		e.opts.Stamp(&cp)
	}
	// The interval runs from the start of a flush, not its end: a change
	// that just missed a flush waits commit_interval plus one commit, not
	// plus two.
	start := time.Now()
	if e.bg != nil {
		if err := e.bg.StartFlush(ctx, cp); err != nil {
			return err
		}
		e.flushing = true
	} else {
		if err := e.sink.Flush(ctx, cp); err != nil {
			return err
		}
		if err := e.durable(ctx, cp, "stream-before-status", "stream-after-status"); err != nil {
			return err
		}
	}
	e.lastFlush = start
	e.unflushed = false
	return nil
}

// AwaitFlush waits for the flush in flight, if any, and acknowledges it.
func (e *Engine) AwaitFlush(ctx context.Context) error {
	return e.finish(ctx, true, "stream-before-status", "stream-after-status")
}

// Sync flushes everything and waits until it is durable and acknowledged,
// then acknowledges the latest checkpoint once more (a clean stop: the
// source then holds the final position even if an earlier Ack was lost).
func (e *Engine) Sync(ctx context.Context) error {
	if err := e.Flush(ctx); err != nil {
		return err
	}
	if err := e.finish(ctx, true, "stream-final-before-status", ""); err != nil {
		return err
	}
	return e.opts.Ack(ctx, e.acked)
}

// Acked returns the last checkpoint acknowledged (at first, the start
// checkpoint).
func (e *Engine) Acked() Checkpoint { return e.acked }

// finish acknowledges the background flush once it has finished (with
// wait: waits for it). The failpoints named surround the acknowledgement.
func (e *Engine) finish(ctx context.Context, wait bool, before, after string) error {
	if !e.flushing {
		return nil
	}
	if !wait {
		select {
		case <-e.bg.FlushDone():
		default:
			return nil
		}
	}
	cp, err := e.bg.FinishFlush()
	e.flushing = false
	if err != nil {
		return err
	}
	return e.durable(ctx, cp, before, after)
}

// durable records that cp is in the sink, and acknowledges it.
func (e *Engine) durable(ctx context.Context, cp Checkpoint, before, after string) error {
	e.acked = cp
	if e.opts.OnDurable != nil {
		e.opts.OnDurable(cp)
	}
	// Checkpoint durable, the source not told yet.
	if before != "" {
		failpoint.Inject(before)
	}
	if err := e.opts.Ack(ctx, cp); err != nil {
		return err
	}
	if after != "" {
		failpoint.Inject(after)
	}
	return nil
}
