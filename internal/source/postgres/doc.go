// Package postgres captures changes from PostgreSQL through logical
// replication (pgoutput, protocol v2) and chunked, watermark-reconciled
// snapshots.
//
// # Positions
//
// Every change carries the commit LSN of its transaction and its sequence
// number inside the transaction; together they order all changes of a table
// (ARCHITECTURE §2). Snapshot rows carry the commit LSN of the high
// watermark their chunk was reconciled at, and sequence numbers 1..n.
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
// # Snapshots (DBLog)
//
// A chunk is read between two logical messages, a low and a high watermark,
// emitted by the snapshot worker. While the window is open the stream notes
// every key of the table it sees change; when the high watermark arrives the
// chunk's rows minus those keys are emitted at the high watermark's position.
// Rows changed inside the window are represented by their stream changes,
// which sort before or after the chunk correctly; no long-lived exported
// snapshot is needed and the slot is never held back by a snapshot.
//
// # Text format
//
// Values are read in PostgreSQL's text format under fixed session settings
// (typemap.SessionSettings) on both paths, so one decoder serves the stream
// and the snapshot, and key values compare byte for byte between them.
package postgres
