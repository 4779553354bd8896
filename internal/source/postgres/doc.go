// Package postgres captures changes from PostgreSQL through logical
// replication (pgoutput, protocol v2) and chunked, watermark-reconciled
// snapshots.
//
// # Positions
//
// Every change carries the commit LSN of its transaction and its sequence
// number inside the transaction; together they order all changes of a table
// (ARCHITECTURE §2). Snapshot rows carry the commit LSN of the low
// watermark of their chunk, and sequence numbers 1..n.
//
// The stream never acknowledges anything by itself. The Sink decides which
// LSN is durable (AckLSN) and the stream loop reports exactly that to
// PostgreSQL as confirmed_flush_lsn. The acknowledged LSN is the end LSN of
// the last transaction whose changes are all committed in the lake; on
// restart PostgreSQL resends everything after it.
//
// # Large transactions
//
// With streaming on, PostgreSQL sends in-progress transactions in chunks. The
// raw messages are spooled to disk per transaction (memory stays bounded),
// aborted subtransactions are discarded, and at stream commit the spool is
// replayed through the same path as an ordinary transaction, with its commit
// LSN.
//
// # Snapshots (DBLog, with TOAST-safe placement)
//
// A chunk is read between two logical messages, a low and a high watermark,
// emitted by the snapshot worker. When the high watermark arrives in the
// stream, the chunk's rows are written at the LOW watermark's position
// (commit LSN of the low watermark, seq 1..n). Every stream change committed
// inside the window therefore sorts after the chunk row of its key and
// applies on top of it: a change the SELECT already saw is applied twice,
// which is harmless because inserts, updates and deletes set a key's state;
// a change the SELECT did not see wins, as it must. Unlike DBLog's "drop the
// chunk rows of keys changed in the window", this keeps the full row for an
// update that left TOAST columns unchanged. A TRUNCATE inside the window
// makes the chunk unplaceable and it is read again. No long-lived exported
// snapshot is needed and the slot is never held back by a snapshot.
//
// # Text format
//
// Values are read in PostgreSQL's text format under fixed session settings
// (typemap.SessionSettings) on both paths, so one decoder serves the stream
// and the snapshot, and key values compare byte for byte between them.
package postgres
