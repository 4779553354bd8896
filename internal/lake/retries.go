package lake

import "sync/atomic"

// RetryReason names why a lake implementation retried inside one of its
// operations: a retry the caller never sees as a failure (the operation
// succeeded in the end, or failed with the last attempt's error), which
// metrics count (tidemark_lake_retries_total).
type RetryReason int

const (
	// RetryCommitConflict: another writer committed to the table first,
	// and the commit was made again on its new head.
	RetryCommitConflict RetryReason = iota
	// RetryCatalogBusy: the catalog's database was locked by another
	// connection (SQLite's SQLITE_BUSY), and the statement was run again.
	RetryCatalogBusy
	// RetryFileVanished: a file went away while a directory was listed
	// (a writer cleaning up after a failed commit), and it was listed
	// again.
	RetryFileVanished
	numRetryReasons
)

// String is the reason's metric label.
func (r RetryReason) String() string {
	switch r {
	case RetryCommitConflict:
		return "commit_conflict"
	case RetryCatalogBusy:
		return "catalog_busy"
	case RetryFileVanished:
		return "file_vanished"
	}
	return "unknown"
}

// RetryReasons are every reason, in order.
func RetryReasons() []RetryReason {
	return []RetryReason{RetryCommitConflict, RetryCatalogBusy, RetryFileVanished}
}

// retries counts the retries of this process, by reason. They are
// process-wide, as the lake's writers (capture, silver, maintenance) share
// one catalog per process.
var retries [numRetryReasons]atomic.Int64

// CountRetry records one retry for reason r (called by implementations).
func CountRetry(r RetryReason) {
	if r >= 0 && r < numRetryReasons {
		retries[r].Add(1)
	}
}

// Retries returns how many retries for reason r this process made.
func Retries(r RetryReason) int64 {
	if r < 0 || r >= numRetryReasons {
		return 0
	}
	return retries[r].Load()
}
