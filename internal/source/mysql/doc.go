// Package mysql is tidemark's MySQL and MariaDB source: it captures the
// tables of one database by reading the server's row-based binary log as a
// replica does (go-mysql's BinlogSyncer, COM_BINLOG_DUMP[_GTID]), after a
// snapshot chunked by primary key (one consistent read for a table
// without one) and reconciled with the binlog by
// watermarks, into the same bronze change log and silver replica tables as
// the PostgreSQL source.
//
// # Prerequisites
//
// Preflight checks them at every start, before anything is read, and names
// the fix: log_bin on, binlog_format=ROW, binlog_row_image=FULL,
// binlog_row_metadata=FULL (the row events carry column names, so columns are
// followed across DDL without querying the catalog at the wrong moment), no
// PARTIAL_JSON row values, a non-zero server_id (server_config, exit 2); a
// user with REPLICATION SLAVE, REPLICATION CLIENT (MariaDB: BINLOG MONITOR)
// and SELECT (permission_denied, exit 3). gtid_strict_mode=OFF (MariaDB) and
// gtid_mode=OFF (MySQL) are warnings. CheckServerID refuses a server_id the
// source or another of its replicas already uses (server_id_conflict).
//
// # Positions
//
// A transaction's commit position, change.Position.LSN and bronze's
// cdc_source_lsn, is fileIndex<<32 | endPos of its commit event (XID, or the
// COMMIT query of a non-transactional engine) in the binlog of the server
// read: mysql-bin.000007 at end position 1234 is 7<<32 | 1234 (PositionLSN).
// It grows with every transaction of one server's binlog, also across
// rotations. Snapshot rows carry the position of the high watermark their
// chunk was reconciled at. A different server (after a failover) numbers its
// files on its own, which is why the server's identity is part of the
// resume token and checked.
//
// # Resuming
//
// The resume token (Resume, pipeline.Checkpoint.Resume) holds the GTID set
// of the transactions durable in the lake (MariaDB: the last
// domain-server-seq of each domain; MySQL: the executed uuid:interval set),
// the binlog file and position after the last of them, and the server's
// server_id (and MySQL server_uuid). A stream resumes by GTID, and by file
// and position when the server has GTIDs off. CheckResume first checks
// that the server still has what comes after the token: binlogs purged past
// it are binlog_purged, another server, or one whose binlog lacks what was
// already read (RESET MASTER, a restore), is server_changed; both fatal
// (exit 3) with tidemark resnapshot --all as the recovery. tidemark never
// resumes anywhere else on its own.
//
// # Schema changes
//
// DDL arrives as QUERY events in stream order. ParseDDL reads them with the
// TiDB SQL parser into a neutral description (added, dropped, renamed,
// redefined columns; created, dropped, renamed, truncated tables; primary
// key changes); statements that change no table's shape (BEGIN, SAVEPOINT,
// grants, views, routines, temporary tables) are classified without being
// parsed. A schema statement the parser cannot read is unsupported_ddl:
// the stream stops before it, never skips it. A statement that gives a
// captured table a new primary key (or a keyless table one) is followed
// at its position: a marker commit records the new key and the table is
// read again in chunks on it, for silver to rebuild on (rekey.go).
//
// # Tables without a key
//
// A table with no primary key (nor a unique index on NOT NULL columns) is
// captured into bronze only (tidemark.key = [], no silver table), as on
// PostgreSQL. Its snapshot is one consistent read (REPEATABLE READ, START
// TRANSACTION WITH CONSISTENT SNAPSHOT at MariaDB's Binlog_snapshot_file/
// position) spooled to disk, written by the stream at the snapshot's
// position with the changes it held meanwhile, in one bronze commit: a
// crash before it leaves nothing of the table in bronze and the read
// starts over (keyless.go, docs/bronze.md "MySQL and MariaDB tables
// without a key").
//
// # Logical messages
//
// MySQL and MariaDB have no equivalent of PostgreSQL's logical decoding
// messages (pg_logical_emit_message): for this source the _messages table
// stays empty.
//
// # Flavours
//
// MariaDB (tested here, 10.11) and MySQL (8.0 and later) differ in GTIDs,
// variables and privilege names; Flavor tells them apart from VERSION().
// MySQL 8 is not installable on the CI machine: its flavour is covered by
// unit tests of the GTID-set and resume code.
package mysql
