package iceberg

import (
	"context"
	"slices"
)

// PlanAppendedBoth plans the files appended in (after, to] with
// planAppended (ok: it applied) and with iceberg-go's incremental append
// scan, and returns both as sorted file paths.
func PlanAppendedBoth(ctx context.Context, t *Table, after, to int64) (ours, theirs []string, ok bool, err error) {
	tbl := t.current()
	tasks, ok, err := planAppended(ctx, tbl, after, to)
	if err != nil {
		return nil, nil, false, err
	}
	for _, task := range tasks {
		ours = append(ours, task.File.FilePath())
	}
	scan := tbl.NewIncrementalAppendScan().ToSnapshot(to)
	if after != NoSnapshot {
		scan = scan.FromSnapshotExclusive(after)
	}
	ts, err := scan.PlanFiles(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	for _, task := range ts {
		theirs = append(theirs, task.File.FilePath())
	}
	slices.Sort(ours)
	slices.Sort(theirs)
	return ours, theirs, ok, nil
}
