package silver

import (
	"time"

	"github.com/tidemark/tidemark/internal/lake"
)

// Backlog is what silver has left to merge of a bronze table: the bronze
// commits after its cursor, the changes (rows) they hold, and how old the
// oldest of them is.
type Backlog struct {
	Commits int   `json:"commits"`
	Changes int64 `json:"changes"`
	// Oldest is the commit time of the oldest unmerged bronze commit (zero
	// when there is none).
	Oldest time.Time `json:"oldest,omitempty"`
}

// backlogOf sums hist, the bronze snapshots after silver's cursor.
// Snapshots that are not appends (compaction, expiry) hold no new changes.
func backlogOf(hist []lake.Snapshot) Backlog {
	var b Backlog
	b.Commits = len(hist)
	for _, h := range hist {
		if h.Operation == "append" {
			b.Changes += h.AddedRecords
		}
	}
	if len(hist) > 0 {
		b.Oldest = time.UnixMilli(hist[0].TimestampMs)
	}
	return b
}

// Seconds is how far behind bronze silver is: the age of the oldest
// unmerged bronze commit (0 with no backlog).
func (b Backlog) Seconds(now time.Time) float64 {
	if b.Oldest.IsZero() {
		return 0
	}
	return max(0, now.Sub(b.Oldest).Seconds())
}
