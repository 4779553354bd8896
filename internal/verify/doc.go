// Package verify proves that silver equals the source: `tidemark verify`.
//
// For each table it compares the source table with its silver
// table (silver.<source>.<schema>.<table>) at one source position, without
// stopping either side and without false alarms from rows that change
// while it runs (docs/verify.md is the user's account).
//
// # What is compared
//
// The source side is a Source (source.go): PostgreSQL's in internal/source/postgres/pgverify,
// MySQL's and MariaDB's in internal/source/mysql/myverify; internal/app picks one by the
// source URL's scheme. Values are compared in their lake form: the source
// is read as its capture reads it (PostgreSQL: text format under
// typemap.SessionSettings, decoded by typemap; MySQL: SelectExpr under
// mysql.SessionVariables, decoded by Mapping.DecodeText), and silver's
// values are read from its data files.
// canon.go defines one canonical byte string per value; two values are
// equal exactly when those strings are. The columns compared are the
// source table's current columns (a column silver lacks compares as NULL;
// a column only silver has, such as one dropped at the source, is ignored)
// and the key is the source table's key, which must match silver's
// tidemark.key. Soft-deleted silver rows (cdc_deleted = true) are not live.
//
// # How (compare.go, top to bottom)
//
//  1. A consistent snapshot of the source and the position L it covers
//     (PostgreSQL: REPEATABLE READ and the WAL insert position read inside
//     it; MySQL: WITH CONSISTENT SNAPSHOT and its binlog position):
//     everything visible in the snapshot committed at or below L.
//  2. The table is split into chunks by a hash of the key (as many chunks
//     as there are ChunkRows in the table). Each chunk's hash, the count
//     and the sum of its rows' MD5s, is computed at the source in SQL
//     (pgverify's sqlcanon.go; myverify's myCanon) while verify waits for silver to hold the source up to L
//     and hashes silver's chunks itself. Sums do not depend on row order, so
//     neither side is sorted, and memory holds one number per chunk.
//  3. Chunks whose hashes differ are drilled into, a memory-bounded batch of
//     chunks at a time: per key, the source's row digest (from SQL) and
//     silver's; differing keys become candidates.
//  4. Candidates are compared value by value, and read again in later rounds
//     until each is equal or its difference is confirmed: the rules that
//     tell a real difference from a row that changed while verify ran are at
//     the top of compare.go.
//
// Hash chunks, not key ranges: silver is partitioned by bucket(key) and not
// globally sorted, so a key range would not let Iceberg skip files anyway,
// and key order differs between the source (collations, numeric-as-text)
// and Go. A hash needs no order at all.
//
// # How far silver holds the source
//
// A silver commit records tidemark.position; a quiet table's stays where
// its last change left it. When silver has merged through bronze's latest
// snapshot, it holds everything up to the pipeline checkpoint
// (tidemark.commit-lsn of namespace bronze.<source>), which heartbeats move
// on an idle source; lake.go's loadCovered uses the larger of the two.
package verify
