package fault

// ErrGoldInvalid: a gold table's SQL cannot be used: it is not one SELECT,
// names a table that is not a silver table of the source, DuckDB rejects
// it against the silver tables' schemas, or its result has a column of a
// type gold cannot store. A configuration error: fix the gold: entry.
var ErrGoldInvalid = &Error{Class: Config, Code: "gold_invalid"}

// ErrGoldRefreshFailed: a gold table's refresh failed (its query failed on
// the data, e.g. an overflow, or the result exceeded gold's memory
// share). The table keeps its previous version; tidemark run logs it,
// shows it in status and tries again later, without stopping the pipeline.
var ErrGoldRefreshFailed = &Error{Class: Fatal, Code: "gold_refresh_failed"}
