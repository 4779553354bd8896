package silver

import (
	"cmp"
	"slices"
	"time"

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
	// TxCommitMicros are the source commit times (Unix microseconds, as
	// bronze's cdc_ts holds them: 8 bytes a transaction, for a step may
	// merge hundreds of thousands) of the transactions whose changes this
	// commit made visible, one per transaction; snapshot rows excluded.
	TxCommitMicros []int64
	// At is when the commit was known durable.
	At time.Time
}

// Visible reports whether the silver table is published (readers see it),
// as of the end of this merge.
func (r Result) Visible() bool { return r.visible }

// txTimes collects the distinct transactions of the bronze rows a merge
// reads, and their source commit times. Within a bronze data file rows
// keep their order, and a transaction's rows are consecutive, so a run of
// rows of one commit position is recorded once (16 bytes, no set of
// positions per row); files come in no particular order and a transaction
// may span two files, so the runs are sorted and made distinct at the end.
type txTimes struct {
	last int64
	runs []txRun
}

type txRun struct{ lsn, micros int64 }

// note records the transaction at commit position lsn of row i, whose
// cdc_ts is in ts (nil: unknown, not recorded).
func (t *txTimes) note(lsn int64, ts *array.Timestamp, i int) {
	if lsn == t.last || ts == nil || ts.IsNull(i) {
		return
	}
	t.last = lsn
	t.runs = append(t.runs, txRun{lsn, int64(ts.Value(i))})
}

// distinct returns the commit time of each transaction once.
func (t *txTimes) distinct() []int64 {
	slices.SortFunc(t.runs, func(a, b txRun) int { return cmp.Compare(a.lsn, b.lsn) })
	out := make([]int64, 0, len(t.runs))
	for i, r := range t.runs {
		if i == 0 || r.lsn != t.runs[i-1].lsn {
			out = append(out, r.micros)
		}
	}
	return out
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
		Took: now.Sub(start), TxCommitMicros: j.txs.distinct(), At: now})
	j.txs = nil
}
