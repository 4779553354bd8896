// Package export writes a source's bronze change log out as files, one per
// fixed window of source commit time per table, and records which windows
// are final: `tidemark export`.
//
// The problem it solves is the one of the Beam fixed-windows write-up: a
// reader of windowed files cannot tell "no changes in that window" from
// "not written yet", and windows may be written out of order. Here every
// window up to a table's watermark has exactly one file — its rows, or an
// explicit empty marker — and nothing at or past the watermark is claimed.
//
// Layout of the export directory (docs/tail.md#export has the user's view):
//
//	_export.json                         the export's settings (source, window, format), fixed at its first run
//	_watermark                           {"complete_through": the least of the tables' watermarks, "tables": {...}}
//	<schema>.<table>/_watermark          {"complete_through", "first_window", "commit_lsn", ...}
//	<schema>.<table>/<start>_<end>.<ext> the window's rows, in (cdc_source_lsn, cdc_seq) order
//	<schema>.<table>/<start>_<end>.empty the window had no changes
//	<schema>.<table>/<start>_<end>.late-<N>.<ext>  rows that reached bronze after their window was final
//
// Times in names are UTC, 20261207T180500Z, so names sort in time order;
// windows are aligned to the Unix epoch. Every file is written to a
// temporary name and renamed into place, after an fsync.
//
// # What makes a window final
//
// Bronze's pipeline checkpoint (the namespace properties of
// bronze.<source>) says that every table holds every change whose commit
// position is at or below its commit position C, and gives W, the commit
// time of that transaction. A pass of the export reads C and W, then
// writes, per table, every window ending at or before W - lateness with
// the table's rows of that window whose cdc_source_lsn <= C, and records
// (complete_through, C) in the table's _watermark, after the files. The
// rows of a final window are thus fixed: bronze never gains a row at or
// below C. Lateness (default 1s) covers commit timestamps that are not in
// commit order (PostgreSQL takes a transaction's timestamp just before its
// commit record is written; MySQL's are whole seconds).
//
// A table whose snapshot is not done does not advance: its snapshot rows
// carry the time of the chunk's watermark, which may be behind W when they
// are written. Its windows become final once its snapshot is done.
//
// A row that still arrives in bronze after its window was final — a
// commit timestamp more than the lateness behind a later commit — is
// never dropped: the next pass finds it (cdc_ts below complete_through,
// cdc_source_lsn above the recorded C) and writes it to a late file beside
// its window, named by the C it was found at, and logs a warning. A late
// file is final once the table's _watermark records a commit_lsn >= N.
//
// # Crashes
//
// The export is idempotent. A crash leaves at most files past the
// watermark (windows not yet claimed, late files above the recorded
// commit_lsn) and temporary files; the next pass removes them and writes
// them again. A window's file is never rewritten once the watermark
// covers it. One export at a time may write a directory (a lock file
// refuses the second).
//
// Memory: a pass holds the rows of the windows it writes at once (up to 64
// windows, fewer when their rows pass 64 MiB; one window is the least).
package export
