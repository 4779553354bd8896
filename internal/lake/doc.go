// Package lake is where tidemark meets the table format.
//
// The table-format contract is this package's small interfaces, defined
// from what bronze, silver, maintain and verify call:
//
//   - Table: a table's columns (as an Arrow schema), its snapshots and
//     their properties (the cursor), Append with properties committed
//     atomically with the rows, Evolve (add and widen columns), scans of
//     the whole table, of a filter and of a range of appended snapshots.
//   - KeyedTable: a Table that rows are upserted into and deleted from
//     by key in one commit (ScanLiveKeys, ReadLiveRows, MergeRows, Merge).
//   - Catalog: tables by identifier (open, create from a TableSpec,
//     rename, drop), namespaces and their properties, listings.
//
// Everything in the signatures is format-neutral: Arrow record batches and
// schemas, Snapshot (int64 ids, NoSnapshot before the first), Filter (a
// small expression tree each format translates for its planning), RowID
// and Positions, and the sentinel errors (ErrNoSuchTable,
// ErrCommitConflict, …) that every format's errors wrap, so errors.Is
// works whatever the format.
//
// Formats live in the subpackages, one per format: iceberg/ (Apache
// Iceberg through iceberg-go) and delta/ (Delta Lake, written from the
// protocol). A subpackage owns
// everything format-specific: the catalog, table layout, snapshot
// summaries, schema evolution and the mapping of Arrow types. Its concrete
// types may offer more (iceberg's maintenance: Compact, ExpireSnapshots,
// RemoveOrphanFiles), used by the code that needs the format itself. Only
// the composition root (internal/app, cmd) chooses a format; silver depends
// on the interfaces alone.
//
// Every format passes the conformance suite in laketest/ (laketest.Run),
// which checks through the interfaces what bronze and silver rely on.
//
// # Naming
//
// Tables are named by identifiers, a slice of levels whose last element is
// the table name and whose other elements are the namespace:
//
//	bronze.<source>.<schema>.<table>  = namespace ["bronze", source, schema] + table
//	silver.<source>.<schema>.<table>  = namespace ["silver", source, schema] + table
//	bronze.<source>._messages         = namespace ["bronze", source]         + "_messages"
//	bronze.<source>._dead_letter      = namespace ["bronze", source]         + "_dead_letter"
//
// Levels must be non-empty and must not contain '.': other engines
// (PyIceberg, Spark, Trino) address tables by the dotted string, which would
// otherwise be ambiguous.
//
// # Positions
//
// Every commit that moves a table forward carries tidemark's own keys in
// its snapshot summary (tidemark.position, tidemark.watermark for bronze;
// tidemark.bronze-snapshot for silver), committed atomically with the data.
// The summary of a table's current snapshot is therefore its cursor: after a
// crash, a writer reads it back and resumes from there.
package lake
