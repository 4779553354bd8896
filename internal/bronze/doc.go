// Package bronze writes the append-only change log: one Iceberg table per
// source table (ARCHITECTURE §2), plus the source's _messages and
// _dead_letter tables, and the source-wide checkpoint.
//
// # Exactly once where it is visible
//
// Every commit of a bronze table carries, in its snapshot summary:
//
//	tidemark.cursor     "<commit LSN>:<seq>" of the last change it holds
//	tidemark.position   commit LSN of the last transaction fully captured
//	tidemark.watermark  commit time of that transaction (RFC 3339)
//	tidemark.snapshot   the table's snapshot progress (JSON)
//	tidemark.resnapshot id of the latest re-snapshot request (resnapshot.go)
//
// On restart the writer reads the cursor back and drops replayed changes at
// or below it, so a transaction replayed after a crash never appears twice,
// even when an earlier flush committed only part of it.
//
// # Checkpoint
//
// After every table has committed, Flush records the source-wide checkpoint
// as properties of the namespace bronze.<source> (tidemark.acked-lsn,
// tidemark.watermark, tidemark.wal-end). Only then may the capture confirm
// the LSN to the source: the confirmed position is never ahead of the lake.
package bronze
