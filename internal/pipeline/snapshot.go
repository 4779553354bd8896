package pipeline

import "encoding/json"

// Table state properties that every source writes with a table's commits
// (the sink carries them forward) and that silver, verify and status read.
const (
	// PropSnapshot holds a table's snapshot progress (JSON, SnapshotState),
	// committed with the chunk it describes: a crash resumes after LastKey.
	PropSnapshot = "tidemark.snapshot"
	// PropResnapshot names the latest re-snapshot request of a table (its
	// id). The sink carries it forward in every later commit, silver
	// records the id it has applied, so a table whose bronze id differs
	// from its silver id has a re-snapshot to apply.
	PropResnapshot = "tidemark.resnapshot"
	// PropResnapshotReason says why the latest re-snapshot was requested
	// (an operator's `tidemark resnapshot`, or a table rewrite the source
	// detected), for status; carried forward like PropResnapshot.
	PropResnapshotReason = "tidemark.resnapshot-reason"
	// PropReplacedBefore marks a table rebuilt by `tidemark resnapshot
	// --replace`: the source position (decimal; PostgreSQL: an LSN, the
	// changes below it; MySQL: the binlog end at the request, the changes
	// at or below it) under which the stream's changes of the table are
	// not written, because they
	// predate the request and the table's re-snapshot, read after it, holds
	// their effect (they may also be undecodable under the new schema: the
	// incompatible change the table was replaced for).
	PropReplacedBefore = "tidemark.replaced-before"
	// PropKey, in a commit's props, is the table's key from that commit on
	// (a JSON list of column names): the marker of a re-read the source
	// requests because the table's key changed carries the new key, and
	// the sink carries it forward. It takes precedence over the key the
	// table was created with (bronze's table property of the same name).
	PropKey = "tidemark.key"
	// PropColumnIDs, in TableState.Props, is the source column id of each
	// column the lake's table records (change.Field.ID), as a JSON object
	// from column name to id (bronze's table property of the same name). A
	// source without ids of its own (MySQL) numbers its columns from it, so
	// a column it saw renamed keeps its id across restarts.
	PropColumnIDs = "tidemark.column-ids"
)

// Snapshot statuses.
const (
	SnapshotPending = "pending"
	SnapshotRunning = "running"
	SnapshotDone    = "done"
	SnapshotSkipped = "skipped"
)

// SnapshotState is a table's snapshot progress, the value of PropSnapshot.
type SnapshotState struct {
	Status     string   `json:"status"`
	LastKey    []string `json:"last_key,omitempty"` // text of the key columns of the last row read
	Rows       int64    `json:"rows"`
	Estimate   int64    `json:"estimate"`
	StartedAt  string   `json:"started_at,omitempty"`
	FinishedAt string   `json:"finished_at,omitempty"`
	// Request is the id of the `tidemark resnapshot` request this snapshot
	// serves ("" for the initial snapshot). A requested snapshot is read
	// even when snapshots are disabled: an explicit request is never
	// skipped.
	Request string `json:"request,omitempty"`
}

// ParseSnapshotState decodes a PropSnapshot value; "" is a snapshot not
// yet started (pending).
func ParseSnapshotState(s string) (SnapshotState, error) {
	if s == "" {
		return SnapshotState{Status: SnapshotPending}, nil
	}
	var st SnapshotState
	err := json.Unmarshal([]byte(s), &st)
	return st, err
}

// Encode returns st as a PropSnapshot value.
func (st SnapshotState) Encode() string {
	b, _ := json.Marshal(st)
	return string(b)
}

// PendingSnapshot is the PropSnapshot value that asks the next run to read
// the table again from its first key, for re-snapshot request id.
func PendingSnapshot(request string) string {
	return SnapshotState{Status: SnapshotPending, Request: request}.Encode()
}
