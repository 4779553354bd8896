package silver

import (
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	cdc "github.com/tidemark/tidemark/internal/change"
)

// Observer is told what merges do, for metrics (Options.Observer). Its
// methods are called on the goroutine that merges, one table at a time
// per Merger; they must not block.
type Observer interface {
	// Merged reports one silver commit of a published table: the merge
	// step it committed (a table being built, not yet visible, is not
	// reported).
	Merged(id cdc.TableID, s Step)
	// Done reports the end of a merge of the table (MergeTable, or one
	// turn of Run): its result, or the error it failed with (then the
	// result's backlog is not known).
	Done(id cdc.TableID, r Result, err error)
}

// Step is one silver commit of a merge.
type Step struct {
	// Changes, Upserts, Deletes, DeadLetters: as in Result, for this commit.
	Changes, Upserts, Deletes, DeadLetters int64
	// Took is how long the step took, from reading bronze to its commit.
	Took time.Duration
	// TxCommits are the source commit times of the transactions whose
	// changes this commit made visible (one per transaction; snapshot rows
	// excluded).
	TxCommits []time.Time
	// At is when the commit was known durable.
	At time.Time
}

// Visible reports whether the silver table is published (readers see it),
// as of the end of this merge.
func (r Result) Visible() bool { return r.visible }

// txTimes collects the distinct transactions of the bronze rows a merge
// reads, and their source commit times.
type txTimes struct {
	last int64
	seen map[int64]bool
	at   []time.Time
}

// note records the transaction at commit position lsn of row i, whose
// cdc_ts is in ts (nil: unknown, not recorded). Rows of one transaction
// come together, so the map is consulted once per transaction.
func (t *txTimes) note(lsn int64, ts *array.Timestamp, i int) {
	if lsn == t.last || ts == nil || ts.IsNull(i) {
		return
	}
	t.last = lsn
	if t.seen == nil {
		t.seen = map[int64]bool{}
	}
	if t.seen[lsn] {
		return
	}
	t.seen[lsn] = true
	t.at = append(t.at, ts.Value(i).ToTime(arrow.Microsecond))
}

// observeStep reports the merge step that took j.res from before to its
// current counts, started at start.
func (j *job) observeStep(before Result, start time.Time) {
	o := j.m.opts.Observer
	if o == nil || j.txs == nil {
		return
	}
	r := j.res
	now := j.m.now()
	o.Merged(j.id, Step{Changes: r.Changes - before.Changes, Upserts: r.Upserts - before.Upserts,
		Deletes: r.Deletes - before.Deletes, DeadLetters: r.DeadLetters - before.DeadLetters,
		Took: now.Sub(start), TxCommits: j.txs.at, At: now})
	j.txs = nil
}
