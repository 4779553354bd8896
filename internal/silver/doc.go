// Package silver keeps, for every source table, an Iceberg table equal to
// the source table as of the last merge: silver.<source>.<schema>.<table>,
// built by folding the table's bronze change log (ARCHITECTURE §2).
//
// The data path reads top to bottom: merge.go (Merger: which bronze range,
// build and publish, one commit per step), read.go (the bronze rows of the
// range, grouped by key; the silver rows of the keys they touch), fold.go
// (one key's changes into its final row: no I/O), write.go (the rows to
// append, the dead letters), spill.go (a build's passes read bronze once),
// run.go (the loop beside the capture).
// gate.go holds the snapshot gate and the state `tidemark status` shows;
// table.go the names, the schema and its evolution; resnapshot.go how a
// `tidemark resnapshot` request is applied (gated, then one replacing
// commit).
//
// # Table
//
// Columns: the bronze table's source columns (same names and types; key
// columns required), then cdc_source_lsn and cdc_seq (position of the row's
// last change), cdc_ts (its commit time) and, with soft deletes,
// cdc_deleted. The Iceberg identifier fields are the key, recorded by
// bronze in its table property tidemark.key (and copied to silver's).
// Partitioned by bucket(N, first key column), sorted by key; deletes are
// position deletes (merge-on-read) unless the table was created
// copy-on-write.
//
// # Cursor and exactly once
//
// Every silver commit's snapshot summary carries tidemark.bronze-snapshot,
// the bronze snapshot merged through, and that snapshot's tidemark.position
// and tidemark.watermark. They are committed atomically with the data, so
// after a crash the next merge reads bronze after exactly what silver
// holds. Replaying a range changes nothing: a change at or below the
// position of the key's silver row is ignored (highest position wins), and
// dead letters are written once per (table, position).
//
// A merge step ends on a bronze snapshot that holds whole transactions
// (no row above the snapshot's tidemark.position: bronze may commit a large
// transaction in several flushes), so silver never shows half of one.
//
// # Gate and build
//
// A silver table does not exist until its initial snapshot is complete
// (bronze's tidemark.snapshot status "done" or "skipped"). Until then,
// bronze's order is not the source's: a chunk's rows sit at its low
// watermark but are written after the changes made while it was read. So
// the first merge folds everything up to a complete snapshot at once,
// in a table built under silver.<source>._building.<schema> (its files
// already in the published table's directory: Merger.create), and renames it
// into place when done: readers see no table, then the whole table. When
// that range is larger than Options.MaxChanges the build runs in passes,
// each folding a slice of the keys over the whole range (memory is a
// budget): whole buckets of the silver table's partitioning, or a hash
// slice of one, so each pass writes one data file per bucket it covers
// (bucketRoute), with its progress in the summary and the log; the range is read from bronze
// once and spilled per pass to local files (spill.go). After the build, bronze's
// order is the source's, and merges proceed in steps of at most
// MaxChanges bronze rows.
//
// # Fold
//
// Per key, in (cdc_source_lsn, cdc_seq) order: r, c, u set the row, taking
// the columns listed in cdc_unchanged (TOAST) from the key's previous state,
// earlier in the range or the silver row (for the insert half of a key
// change: from the row its delete half removed); d deletes (soft: keeps the
// last contents with cdc_deleted = true); t, for the whole table, voids
// every row and change before it. A key whose final state has a column no
// earlier state can fill is not merged half-empty: silver keeps its
// previous row and the change goes to silver.<source>._dead_letter with the
// reason.
//
// # Schema
//
// Columns added in bronze are added to silver (optional; null in older
// rows); widened types are widened; a column the source dropped stays,
// null in new rows. Anything else stops the merge with
// fault.ErrIncompatibleSchema naming the table and column.
package silver
