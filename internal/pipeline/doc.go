// Package pipeline is the source-neutral core of a capture: the checkpoint
// a source resumes from, the Sink a source writes changes to, and the
// Engine that decides when to flush and owns the one rule every source
// relies on: a position is acknowledged to the source only once the
// changes up to it are durable in the sink.
//
// # Positions
//
// A source orders its transactions by a commit position, an unsigned
// integer that grows with every transaction (PostgreSQL: the commit LSN;
// MySQL/MariaDB: binlog file index << 32 | end position of the commit
// event). It is what change.Position.LSN and bronze's cdc_source_lsn hold.
// Where a source resumes from is a separate, opaque token (Checkpoint.Resume):
// PostgreSQL's end LSN, MySQL's GTID set and file:pos. Only the source
// reads its tokens; the core stores them and hands them back.
//
// # The acknowledgement contract
//
// A source hands every change to the Sink (Write, WriteBatch, ...) on one
// goroutine, and calls Engine.Completed after the last change of each
// transaction. The Engine flushes the Sink when commit_interval has passed
// or commit_bytes are buffered; a flush records the checkpoint of the last
// completed transaction. Only when the Sink reports that flush durable
// (Flush returned nil, or FinishFlush returned nil for a background flush)
// does the Engine call EngineOptions.Ack with that checkpoint, which is when
// the source may tell its server (PostgreSQL: standby status update). So:
//
//   - an acknowledged position is never ahead of the sink: after a crash at
//     any moment, the server still holds everything past the sink's
//     checkpoint;
//   - a failed flush is never acknowledged: its error ends the session, and
//     the next session resumes from the checkpoint the sink holds;
//   - a flush may land inside a transaction (at commit_bytes): the rows
//     committed are replayed after a crash and dropped by the sink's cursor,
//     and the checkpoint never covers a transaction in part;
//   - at most one flush is in flight, and checkpoints are recorded and
//     acknowledged in order.
//
// The failpoints stream-before-status, stream-after-status and
// stream-final-before-status sit between "durable" and "acknowledged", so
// the fault suite can kill the process in that window.
//
// # Adding a source
//
// A source lives in internal/source/<name> and imports none of the other
// sources; nothing but internal/app and cmd/tidemark imports it
// (imports_test.go enforces both). It
//
//   - writes its changes to a Sink (bronze.Writer, also a BackgroundSink
//     and a ChunkSink) and drives an Engine: Completed after each
//     transaction, Poll once per input, Wake for how long it may block,
//     Full/Flush for back-pressure inside a transaction, Sync on a clean
//     stop, and acknowledges to its server in EngineOptions.Ack;
//   - resumes from the Checkpoint the Sink returns (LoadCheckpoint), whose
//     Resume token it wrote, and records Info[InfoSource] = its name;
//   - keeps each table's snapshot progress in PropSnapshot (SnapshotState),
//     committed with the chunk it describes, and honours PropResnapshot;
//   - brings a fault.Classifier for its client library's errors and a
//     position format; internal/app/sources.go lists it: one line.
package pipeline
