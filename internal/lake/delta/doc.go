// Package delta writes and reads Delta Lake tables on the local
// filesystem, from the protocol (delta-io's PROTOCOL.md) on arrow-go's
// Parquet: no Go Delta library is served by the module proxy
// (docs/delta.md).
//
// A Table is a directory: data files (Parquet, in day-partition
// directories `<col>_day=YYYY-MM-DD/` when the table is partitioned) and
// the log `_delta_log/`: commits `%020d.json`, one action a line, and
// checkpoints `%020d.checkpoint.parquet` every delta.checkpointInterval
// commits, named by `_last_checkpoint`.
//
// # Commits
//
// Append writes the data files, then commits, in one file, a commitInfo
// (with the writer's properties as userMetadata), the txn action of its
// Commit and an add action per file with its statistics. A commit is put
// if absent: written to a temporary file and hard-linked to its version's
// name, which fails when another writer took the version. The loser
// re-reads the winners, checks them for conflicts (a blind append
// conflicts only with metaData and protocol changes and with a txn of its
// own application) and retries at the next version.
//
// # Idempotence
//
// The txn action (appId = the writer's application, e.g. pipeline/table;
// version = the source position) is committed atomically with the rows.
// An Append whose version is not above the last one recorded commits
// nothing: a writer that resumes after a crash from an older position
// writes nothing twice. The check is made against the snapshot and again
// against every commit that won a race.
//
// # The lake contract
//
// A Catalog (catalog.go) is a lake.Catalog over a warehouse directory:
// namespaces are directories holding NamespaceFile, tables directories
// holding a log. Its tables (lake.go) are lake.KeyedTables: snapshots are
// the versions that change data, their Props the commits' userMetadata;
// MergeAt (merge.go) deletes rows with deletion vectors or by rewriting
// files, and writes change data files (cdc.go) on a table with the change
// data feed on; Evolve (evolve.go) adds and widens columns (typeWidening);
// maintain.go is OPTIMIZE, log cleanup and VACUUM (lake.Maintained).
//
// # What is not here yet
//
// Column mapping (renames and deletes of columns: ErrColumnMapping),
// clustering, object stores; see docs/delta.md.
package delta
