// Package gold computes gold tables: the result of a SQL query over the
// silver tables of one source, kept as the lake table gold.<source>.<name>
// (docs/gold.md).
//
// A refresh (Refresher.Refresh) is a full recompute, mode "full":
//
//  1. it loads each silver table the query names (silver.<schema>.<table>)
//     and records its current snapshot and source position;
//  2. it streams each one's live rows, as of that snapshot, into a Parquet
//     file of the refresh's own directory, which an embedded DuckDB reads
//     as the view silver.<schema>.<table> (engine.go);
//  3. DuckDB runs the query into a Parquet file, each column cast to the
//     type gold stores (MapType); it is read back as Arrow batches;
//  4. one commit replaces the gold table's rows (Merge: delete every row,
//     append the result), its properties naming the silver snapshots and
//     positions read (PropReads, PropPosition, PropWatermark).
//
// Guarantees: a reader sees the previous result or the new one, never a
// mix; a crash at any moment leaves the previous version (nothing is
// acknowledged by a refresh: the next one starts over). A refresh that
// fails commits nothing and records its error for `tidemark status`
// (State). Check validates a query against the silver tables' schemas
// without reading rows. A Refresher's methods may be called from several
// goroutines; two refreshes of one table race on the commit, and the loser
// fails with lake.ErrCommitConflict (retried by its caller).
package gold
