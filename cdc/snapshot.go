package cdc

import "github.com/tidemark/tidemark/internal/app"

// Snapshot is the op of a row read by the initial snapshot
// (Config.Snapshot).
//
// The contract: with Config.Snapshot, the stream reads each published
// table's existing rows in key-ordered chunks through the same
// watermark-reconciled (DBLog) snapshot the pipeline uses, while it
// streams. A chunk's rows carry the position of the watermark the chunk
// was reconciled at; a row whose key the stream changed inside the
// chunk's window is not delivered (the streamed change, at a higher
// position, is). So, for one key, a consumer that keeps the event with
// the highest Position ends equal to the source. Snapshot progress is
// kept in memory only: every Open snapshots from scratch, also with a
// named position (at-least-once). On MySQL/MariaDB the watermarks are
// binlog positions (docs/bronze.md, MySQL snapshot rows): a chunk's rows
// carry its high watermark's position.
const Snapshot Op = "r"

// ErrSnapshotMySQL was returned by Open for Config.Snapshot on a MySQL
// source before MySQL snapshots were supported. Deprecated: no longer
// returned.
var ErrSnapshotMySQL = app.ErrSnapshotMySQL
