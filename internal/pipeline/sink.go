package pipeline

import (
	"context"

	"github.com/tidemark/tidemark/internal/change"
)

// Sink is what a source writes its changes to (bronze.Writer). Unless a
// method says otherwise, it is called from one goroutine only, the
// source's stream goroutine, and does not block on the network except
// where it says it commits.
type Sink interface {
	// OpenTable creates the table's lake tables (or verifies and evolves
	// them to schema) and returns their state. Idempotent; commits.
	OpenTable(ctx context.Context, id change.TableID, schema *change.Schema) (TableState, error)
	// Write buffers one change. Changes at or below the table's cursor are
	// dropped (replay after a crash). Not durable until a flush is.
	Write(ctx context.Context, c *change.Change) error
	// WriteBatch buffers changes that must land in one commit together with
	// the table state props (a snapshot chunk and its progress).
	WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error
	// DeadLetter buffers a row that could not be decoded.
	DeadLetter(ctx context.Context, d change.DeadLetter) error
	// Message buffers a logical decoding message.
	Message(ctx context.Context, m change.Message) error
	// Buffered is the number of bytes waiting for a flush. Cheap: the
	// Engine calls it once per Poll.
	Buffered() int64
	// Flush commits everything buffered, one commit per table, then records
	// cp, before it returns. When it returns nil, everything written before
	// is durable and cp may be acknowledged to the source; on error nothing
	// may be acknowledged and the Sink must be discarded (the next session
	// reads back what the lake holds). Blocking.
	Flush(ctx context.Context, cp Checkpoint) error
	// LoadCheckpoint returns the last recorded checkpoint (ok=false if
	// none), as Flush recorded it. It first waits for a flush in flight.
	LoadCheckpoint(ctx context.Context) (Checkpoint, bool, error)
}

// BackgroundSink is a Sink that commits in the background: the source goes
// on decoding into fresh buffers while a flush commits. The Engine uses
// these methods instead of Flush when the Sink has them, and acknowledges
// a flush's checkpoint only once FinishFlush reports it durable. One flush
// is in flight at a time, so checkpoints are recorded in order. Called
// from the source's stream goroutine only, like Sink's methods.
type BackgroundSink interface {
	Sink
	// StartFlush detaches everything buffered and commits it as Flush does,
	// in the background, then records cp. It first waits for the previous
	// flush and returns that flush's error, if any (a later checkpoint
	// covers an earlier one not collected). The commit is not cancelled
	// with ctx, but is bounded by ctx's deadline, if any.
	StartFlush(ctx context.Context, cp Checkpoint) error
	// FlushDone returns a channel closed when the flush in flight has
	// finished (nil when none is in flight): then FinishFlush does not
	// block. Non-blocking.
	FlushDone() <-chan struct{}
	// FinishFlush waits for the flush in flight and returns its checkpoint.
	// nil error: everything written before its StartFlush is durable and
	// the checkpoint may be acknowledged. With no flush in flight it
	// returns the zero Checkpoint and nil. After an error the Sink must be
	// discarded.
	FinishFlush() (Checkpoint, error)
}

// ChunkSink is a Sink that also takes snapshot chunks in columnar form
// (bronze.Writer): a source then decodes a chunk straight into Arrow arrays
// and hands them over whole, rather than one boxed value and one Change per
// row. Called from the source's stream goroutine only.
type ChunkSink interface {
	// WriteChunk buffers the rows of c, which must land in one commit
	// together with the table state props, as WriteBatch does for
	// changes. It may keep references to c's arrays (it retains them);
	// the caller still releases c.
	WriteChunk(ctx context.Context, c *change.Chunk, props map[string]string) error
}
