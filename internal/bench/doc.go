// Package bench measures tidemark against the physical limits of the
// PostgreSQL it reads from, side by side in one run on one machine.
//
// Every scenario runs tidemark and its baseline on the same throwaway
// server (internal/testenv), on the same data, in alternating order, and
// repeats the pair: the figures reported are medians over the repetitions
// and each ratio is the median of the per-repetition ratios, so the noise of
// a shared machine hits both sides of a pair alike. Nothing here asserts a
// time: the result is a markdown table a person reads (docs/benchmarks.md
// explains the method and the machine).
//
// tidemark runs as a separate process (the real binary, or any Launcher),
// so its peak RSS can be read from /proc and nothing of the harness is
// counted in it. Its progress is read from its Prometheus metrics
// (tidemark_capture_confirmed_lsn, tidemark_bronze_rows_committed_total);
// what it committed is read back from the lake after it stopped.
//
// Baselines:
//
//   - CDC catch-up: pg_recvlogical draining the same WAL range from its own
//     pgoutput slot (same plugin options) into /dev/null, and a bare Go
//     pgoutput consumer that parses only commits (the faster of the two,
//     hence the decoding ceiling);
//   - snapshot: psql running COPY … TO STDOUT of the same table into
//     /dev/null;
//   - latency: a minimal Go pgoutput consumer (pglogrepl) on its own slot,
//     recording when each committed row arrives: the floor any consumer of
//     logical replication shares.
//
// Peers: with Options.Debezium (--debezium), scenario 1 also runs Debezium's
// embedded engine (PostgreSQL connector, a counting consumer, its own slot
// and publication) on the same WAL and tables, in the same rotation, and
// reports its ratio to the same pg_recvlogical and its peak RSS
// (debezium.go; the Java main and its pom are in debezium/).
//
// With Options.Source "mysql" the run is on a throwaway MariaDB instead
// (mysql.go): catch-up against a bare go-mysql BinlogSyncer decoding the
// same binlog range, snapshot against SELECT * read through
// go-sql-driver/mysql.
package bench
