package fault

// Named errors of binlog sources (MySQL, MariaDB: internal/source/mysql).
// They live here with the others so that docs/operations.md's table is
// checked against every code (TestDocsNameEveryCode).
var (
	// ErrBinlogPurged: the position tidemark must resume from (its GTID set,
	// or its binlog file) is no longer in the server's binary logs: they
	// were purged (binlog_expire_logs_seconds, PURGE BINARY LOGS) before
	// tidemark read them. The changes in between are gone from the server;
	// resuming anywhere else would silently skip them. Recovery:
	// tidemark resnapshot --all.
	ErrBinlogPurged = &Error{Class: Fatal, Code: "binlog_purged"}
	// ErrServerChanged: the server tidemark reads is not the one its
	// checkpoint was read from (another server_uuid or server_id), or its
	// binlog is behind what tidemark already read (RESET MASTER, a restore
	// from a backup). Positions of one server mean nothing on another.
	ErrServerChanged = &Error{Class: Fatal, Code: "server_changed"}
	// ErrServerIDConflict: the server_id tidemark reads the binlog with is
	// the source's own server_id or that of another replica connected to
	// it; the server would disconnect one of the two readers again and
	// again. A configuration error: choose another server_id.
	ErrServerIDConflict = &Error{Class: Config, Code: "server_id_conflict"}
	// ErrUnsupportedDDL: a schema statement in the binlog that tidemark
	// cannot parse, so it cannot know how the table changed. Applying the
	// following row events with a guessed schema could corrupt the table:
	// the stream stops before it.
	ErrUnsupportedDDL = &Error{Class: Fatal, Code: "unsupported_ddl"}
)
