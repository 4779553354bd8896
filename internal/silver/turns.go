package silver

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	cdc "github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// Catching up in turns (issue 22). After an outage or a crash loop, each
// table has a backlog of bronze commits. Merging one table's whole backlog
// before the next one starts would starve the others for as long as it
// takes (and, in a crash loop, for good: every restart began with the same
// table). So the tables take turns: each turn is turnSteps merge steps of
// one table, and the round goes on until every table has merged what bronze
// held when its first turn began.
//
// The unit of work is a merge step: it coalesces as many bronze commits as
// fit in MaxChanges rows and MaxBytes of Arrow memory (merge.go, step), and
// commits silver with its cursor. A step is the unit that survives a crash:
// a killed step leaves silver at the previous step, and the next process
// resumes from there, never from the start of the backlog. Its size is
// set by the memory budget, not by the number of bronze commits, so a
// backlog of hundreds of small commits is merged in as few steps as its
// changes need.

// turnSteps is how many merge steps a table takes per turn.
const turnSteps = 1

// mergeInTurns merges every table of tables in turns (see above), starting
// with a table picked at random (so that, in a crash loop, no table is
// always the first one and no table always waits for the others). It
// reports each table's whole result to Options.Report once, in the order of
// tables.
func (m *Merger) mergeInTurns(ctx context.Context, source string, tables []cdc.TableID) (gated bool, err error) {
	acc := make([]Result, len(tables))
	goal := make([]int, len(tables)) // bronze commits to merge: the backlog at the first turn
	pending := make([]int, 0, len(tables))
	off := rand.IntN(len(tables))
	for i := range tables {
		pending = append(pending, (off+i)%len(tables))
	}
	var errs []error
	for round := 0; len(pending) > 0; round++ {
		var again []int
		for _, i := range pending {
			if err := ctx.Err(); err != nil {
				m.reportAll(acc)
				return gated, err
			}
			t := tables[i]
			res, err := m.mergeLogged(ctx, source, t.Schema, t.Name, turnSteps, false)
			acc[i] = addResult(acc[i], res)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			gated = gated || res.Gated
			if round == 0 {
				goal[i] = res.BronzeCommits + res.Backlog.Commits
			}
			if res.steps >= turnSteps && res.Backlog.Commits > 0 && acc[i].BronzeCommits < goal[i] {
				again = append(again, i)
			}
		}
		pending = again
	}
	m.reportAll(acc)
	return gated, errors.Join(errs...)
}

func (m *Merger) reportAll(acc []Result) {
	if m.opts.Report == nil {
		return
	}
	for _, r := range acc {
		if r.Table != "" {
			m.opts.Report(r)
		}
	}
}

// addResult adds the counts of a turn's result r to a table's result a;
// the state (gate, cursor, backlog) is r's.
func addResult(a, r Result) Result {
	out := r
	out.Published = a.Published || r.Published
	out.Commits += a.Commits
	out.Changes += a.Changes
	out.Upserts += a.Upserts
	out.Deletes += a.Deletes
	out.Ignored += a.Ignored
	out.DeadLetters += a.DeadLetters
	out.Truncates += a.Truncates
	out.BronzeCommits += a.BronzeCommits
	out.steps += a.steps
	return out
}

// stepDone records a merge step that merged hist (the bronze commits
// after the cursor, oldest first) through to, started at start: the
// bronze commits it merged and the backlog left. It returns the steps
// done so far.
func (j *job) stepDone(hist []lake.Snapshot, to lake.Snapshot, start time.Time) int {
	i := slices.IndexFunc(hist, func(h lake.Snapshot) bool { return h.ID == to.ID })
	j.res.BronzeCommits += i + 1
	j.res.Backlog = backlogOf(hist[i+1:])
	j.res.steps++
	return j.res.steps
}

// logMerged logs what a merge did, with the backlog it left and, while
// silver catches up, the time the rest should take at this merge's rate.
func (m *Merger) logMerged(res Result, took time.Duration) {
	args := []any{"table", res.Table, "commits", res.Commits, "changes", res.Changes,
		"upserts", res.Upserts, "deletes", res.Deletes, "dead_letters", res.DeadLetters, "position", res.Position,
		"published", res.Published, "bronze_commits", res.BronzeCommits, "took", took.Round(time.Millisecond).String()}
	if b := res.Backlog; b.Commits > 0 {
		args = append(args, "backlog_commits", b.Commits, "backlog_changes", b.Changes,
			"backlog_seconds", int64(b.Seconds(m.now())))
		if rate := float64(res.Changes) / max(took.Seconds(), 1e-3); rate > 0 {
			args = append(args, "eta", time.Duration(float64(b.Changes)/rate*float64(time.Second)).Round(time.Second).String())
		}
		m.log.Info("silver merge progress", args...)
		return
	}
	m.log.Info("silver merged", args...)
}
