package silver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// A merge step is sized to hold MaxBytes of bronze rows (maxRows), but it
// never splits a bronze commit, nor a source transaction bronze wrote in
// several commits: silver must never show half of one. So a single large
// transaction (a million updates in one PostgreSQL transaction) made a
// step of all of it, held in memory at once, gigabytes against a budget of
// 256 MiB. Such a step is merged in parts instead, as a build is built in
// passes (merge.go): part i of n folds the keys its route gives it (by
// the silver table's bucket, by key hash, the keys of a key-change chain
// together: part, scanChains), from a spill of the range read once
// (spill.go), and writes its files at once (lake.MergeStage); the last
// part's files committed, one commit makes every part visible with the
// cursor. For one key the highest source position wins as in any step: a
// key's changes and its silver row are all in its part. A crash before
// the commit leaves silver at its last commit (the parts' files are
// orphans, which maintenance removes); the step is redone whole.
//
// The limit: a part holds the changes of its keys, so one key changed more
// times than a part holds (a million updates of one row) is folded at once.

// inParts reports whether the merge of rows bronze rows, more than a step
// holds (limit), is merged in parts: when silver deletes by position
// (merge-on-read; a copy-on-write table's merge rewrites the files it
// deletes from, which one commit must do whole).
func (j *job) inParts(rows, limit int64) bool {
	return rows > limit && limit > 0 && !j.replace && j.s.MergeOnRead()
}

// mergeInParts merges the bronze range (after, to], of rows rows, in parts
// of about limit rows, committed once with props.
func (j *job) mergeInParts(ctx context.Context, after int64, to lake.Snapshot, rows, limit int64, props map[string]string) error {
	m, s := j.m, j.s
	if err := evolve(ctx, s, j.b, j.key, m.opts.DropColumns, m.log); err != nil {
		return err
	}
	n := int((rows + limit - 1) / limit)
	byBucket := newBucketRoute(s, j.key)
	if byBucket != nil {
		// Parts of whole buckets: each part writes one data file per
		// bucket it covers, not one per bucket of the table.
		n = bucketPasses(n, byBucket.b.Buckets())
	}
	chains, err := scanChains(ctx, j.b, j.key, byBucket, after, to.ID)
	if err != nil {
		return err
	}
	p := part{n: n, chains: chains, buckets: byBucket}
	start := m.now()
	sp, err := spillPasses(ctx, m.mem, m.opts.SpillDir, j.b, j.key, after, to.ID, p)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// As for a build: without room for the spill, each part reads bronze.
		m.log.Warn("silver merge could not spill its parts; each part reads bronze", "table", j.res.Table, "error", err.Error())
		sp = nil
	}
	defer sp.remove()
	m.log.Info("silver merge step in parts", "table", j.res.Table, "bronze_snapshot", to.ID, "bronze_rows", rows,
		"parts", n, "rows_per_part", limit, "by_bucket", byBucket != nil, "read", m.now().Sub(start).Round(time.Millisecond).String())
	stage, err := s.StageMerge(ctx)
	if err != nil {
		return err
	}
	defer stage.Abort()
	var txs *txTimes
	if j.observe {
		txs = &txTimes{}
	}
	j.rows = rows / int64(n)
	j.rows += j.rows / 8 // keys do not hash evenly
	var total Result
	var del *lake.Filter
	for i := range n {
		p.i, p.spill = i, sp
		f, err := j.fold(ctx, after, to, p, true, txs)
		if err != nil {
			return err
		}
		if f.byKey {
			f.release()
			return errors.New("internal error: a part of a merge deletes silver rows by key, which a merge in parts cannot")
		}
		err = stage.Add(ctx, f.live, f.byPos, f.recs)
		if f.del != nil {
			del = f.del // the rows below a truncate: the same in every part
		}
		st := f.st
		f.release()
		if err != nil {
			return conflictTransient(err)
		}
		total.Changes += st.Changes
		total.Upserts += st.Upserts
		total.Deletes += st.Deletes
		total.Ignored += st.Ignored
		total.DeadLetters += st.DeadLetters
		total.Truncates = max(total.Truncates, st.Truncates) // every part saw it
		// A part's files written, the merge not committed (fault tests).
		failpoint.Inject("silver-part-staged")
		m.log.Debug("silver merge part staged", "table", j.res.Table, "part", i+1, "parts", n, "changes", st.Changes,
			"upserts", st.Upserts, "deletes", st.Deletes)
	}
	// Every part's files written, the merge not committed (fault tests).
	failpoint.Inject("silver-parts-before-commit")
	if err := stage.Commit(ctx, del, j.stepProps(props, total.Changes)); err != nil {
		return conflictTransient(fmt.Errorf("commit a merge step of %d parts: %w", n, err))
	}
	if txs != nil {
		j.txs = txs
	}
	j.count(total)
	j.res.InParts++
	return nil
}

// conflictTransient marks a lost commit race transient: the merge is
// recomputed on the new state.
func conflictTransient(err error) error {
	if errors.Is(err, lake.ErrCommitConflict) {
		return fault.MarkTransient(err)
	}
	return err
}
