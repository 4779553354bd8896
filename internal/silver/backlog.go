package silver

import (
	"strconv"
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

// Summary keys of a merge step's silver commit: the bronze rows it read,
// and when it started (Unix milliseconds). With the commit's own time they
// give the rate at which silver merges, from which status tells the time
// a backlog should take to catch up (its changes at that rate).
const (
	PropStepChanges = "tidemark.step-changes"
	PropStepStarted = "tidemark.step-started"
)

// The merge rate is taken over the last rateSteps merge steps among the
// last rateLook snapshots of the silver table.
const (
	rateSteps = 5
	rateLook  = 20
)

// mergeRate returns the bronze rows per second of the last merge steps
// of silver table s: their changes over their time, from start to commit.
// ok is false when no recent commit of s records a step that read rows.
// Compactions (which copy the keys of the commit they replace) are skipped.
func mergeRate(s lake.Table) (rate float64, ok bool) {
	snap, have := s.CurrentSnapshot()
	var changes int64
	var ms int64
	steps := 0
	for i := 0; have && i < rateLook && steps < rateSteps; i++ {
		if snap.Operation != "replace" {
			n, err1 := strconv.ParseInt(snap.Props[PropStepChanges], 10, 64)
			start, err2 := strconv.ParseInt(snap.Props[PropStepStarted], 10, 64)
			if err1 == nil && err2 == nil && n > 0 && snap.TimestampMs >= start {
				changes += n
				ms += max(snap.TimestampMs-start, 1)
				steps++
			}
		}
		if snap.ParentID == lake.NoSnapshot {
			break
		}
		var err error
		if snap, err = s.Snapshot(snap.ParentID); err != nil {
			break // expired
		}
	}
	if steps == 0 {
		return 0, false
	}
	return float64(changes) / (float64(ms) / 1000), true
}

// CatchUp is the time the backlog b should take to merge at rate (bronze
// rows per second); ok is false when the rate is unknown (0).
func (b Backlog) CatchUp(rate float64) (time.Duration, bool) {
	if b.Changes == 0 {
		return 0, true
	}
	if rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(b.Changes) / rate * float64(time.Second)), true
}
