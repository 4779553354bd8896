package lake

import (
	"context"
	"time"
)

// Maintained is a table whose files and history can be kept small while
// writers commit: what `tidemark maintain` (internal/maintain) needs.
// Every format's tables implement it (Iceberg: rewrite data files,
// expire snapshots, remove orphans; Delta: OPTIMIZE, log cleanup, VACUUM);
// a caller holding a Table asserts it.
type Maintained interface {
	Table
	// Footprint measures the table as last loaded (Refresh first).
	Footprint(ctx context.Context) (Footprint, error)
	// Compact rewrites small files, and files that deletes apply to, into
	// fewer files with the deletes applied, in one commit that keeps the
	// head's tidemark.* properties. Rows read the same before and after.
	// It is safe while writers commit; when a writer deleted rows of a file
	// being rewritten, the error wraps ErrCommitConflict and nothing is
	// applied.
	Compact(ctx context.Context, opts CompactOptions) (CompactResult, error)
	// ExpireSnapshots removes old snapshots (and the files only they
	// reference) as opts say; ErrCommitConflict when writers kept
	// committing through every attempt.
	ExpireSnapshots(ctx context.Context, opts ExpireOptions) (ExpireResult, error)
	// RemoveOrphanFiles deletes the files under the table's location that
	// nothing of the table references and that are older than olderThan
	// (which must exceed the longest write).
	RemoveOrphanFiles(ctx context.Context, olderThan time.Duration, dryRun bool) (OrphanResult, error)
}

// Footprint is what a table's current state costs: snapshots in its
// metadata, and the live data and delete files of its current snapshot.
type Footprint struct {
	Snapshots   int   `json:"snapshots"`
	DataFiles   int   `json:"data_files"`
	DeleteFiles int   `json:"delete_files"`
	DataBytes   int64 `json:"data_bytes"`
	DeleteBytes int64 `json:"delete_bytes"`
	Records     int64 `json:"records"` // in data files, before deletes
	// DeletedRecords is the rows the delete files remove (position
	// deletes: one record per row), so Records-DeletedRecords are live.
	DeletedRecords int64 `json:"deleted_records"`
}

// LiveBytes estimates the bytes the table's live rows take in its data
// files: DataBytes scaled by the share of rows no delete removes.
func (f Footprint) LiveBytes() int64 {
	if f.Records <= 0 {
		return 0
	}
	live := max(f.Records-f.DeletedRecords, 0)
	return int64(float64(f.DataBytes) * float64(live) / float64(f.Records))
}

// Bytes is what the table's current snapshot references: data and
// delete files.
func (f Footprint) Bytes() int64 { return f.DataBytes + f.DeleteBytes }

// Files is the number of data and delete files of the current snapshot.
func (f Footprint) Files() int { return f.DataFiles + f.DeleteFiles }

// CompactOptions tune Compact.
type CompactOptions struct {
	// TargetFileSize is the size of the files compaction writes, and a file
	// below 3/4 of it is small. 0: the table's default.
	TargetFileSize int64
	// DryRun plans and reports, writing nothing.
	DryRun bool
}

// CompactResult says what Compact did (or, in a dry run, would do).
type CompactResult struct {
	Partitions         int   `json:"partitions"` // partitions rewritten
	RemovedDataFiles   int   `json:"removed_data_files"`
	AddedDataFiles     int   `json:"added_data_files"`
	RemovedDeleteFiles int   `json:"removed_delete_files"`
	BytesBefore        int64 `json:"bytes_before"`
	BytesAfter         int64 `json:"bytes_after"`
	// Snapshot is the compaction snapshot's id (0: nothing committed).
	Snapshot int64 `json:"snapshot,omitempty"`
}

// ExpireOptions say which snapshots ExpireSnapshots keeps.
type ExpireOptions struct {
	// OlderThan: only snapshots older than this are expired.
	OlderThan time.Duration
	// RetainLast: the newest RetainLast snapshots of the current history
	// are kept whatever their age (at least 1).
	RetainLast int
	// KeepFrom, when not NoSnapshot, keeps every snapshot from this one
	// (an ancestor of the current snapshot) to the current one, whatever
	// their age: a reader's cursor. The error wraps ErrSnapshotNotFound if
	// it is not in the current history.
	KeepFrom int64
	DryRun   bool
}

// ExpireResult says which snapshots ExpireSnapshots removed (or would).
type ExpireResult struct {
	Expired   []int64 `json:"expired"`
	Remaining int     `json:"remaining"`
}

// OrphanResult says which files RemoveOrphanFiles removed (or would).
type OrphanResult struct {
	Files []string `json:"files"`
	Bytes int64    `json:"bytes"`
}
