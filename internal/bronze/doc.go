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
// After every table has committed, Flush records the source-wide
// checkpoint (pipeline.Checkpoint) as properties of the namespace
// bronze.<source>:
//
//	tidemark.commit-lsn  Pos: commit position of the last transaction fully
//	                     captured (PostgreSQL: commit LSN; other sources: the
//	                     integer their cdc_source_lsn holds)
//	tidemark.resume      Resume: the source's opaque resume token (PostgreSQL:
//	                     end LSN in decimal)
//	tidemark.watermark   Watermark (RFC 3339; kept when zero)
//	tidemark.updated-at  when the checkpoint was recorded
//	tidemark.<key>       each Info entry (PostgreSQL: tidemark.acked-lsn,
//	                     tidemark.wal-end, tidemark.slot, the keys lakes
//	                     have always had)
//
// Info keys are lowercase letters, digits and '-', and may not be one of
// the four above. Reading back, every other tidemark.* property is Info. A
// lake written before tidemark.resume existed has tidemark.acked-lsn
// instead, read as the resume token, so it resumes where it stopped. Only
// once the properties are set may the capture acknowledge the position to
// the source: the acknowledged position is never ahead of the lake.
package bronze
