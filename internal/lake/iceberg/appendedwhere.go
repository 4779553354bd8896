package iceberg

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go/table"
)

// ScanAppendedWhere is ScanAppended restricted to the data files whose
// statistics do not rule f out (nil: all): fn may still see rows that do
// not match f, so it must check them itself. A silver build looks for its
// key changes this way without reading the snapshot chunks' files (their
// cdc_op is 'r' throughout).
func (t *Table) ScanAppendedWhere(ctx context.Context, after, to int64, f *Filter, fn func(arrow.RecordBatch) error) error {
	tbl := t.current()
	if after == to {
		return nil
	}
	opts := []table.ScanOption{scanBatch}
	planOpts := opts
	if f != nil {
		expr, err := filterExpr(f, tbl.Schema())
		if err != nil {
			return fmt.Errorf("iceberg: scan table %s: %w", t.name, err)
		}
		opts = append(opts, table.WithRowFilter(expr))
		pexpr, _, err := filterPlanExpr(f, tbl)
		if err != nil {
			return fmt.Errorf("iceberg: scan table %s: %w", t.name, err)
		}
		planOpts = []table.ScanOption{scanBatch, table.WithRowFilter(pexpr)}
	}
	// Files by planOpts, rows by opts (see planExpr).
	var tasks []table.FileScanTask
	var err error
	if f == nil {
		tasks, err = appendedTasks(ctx, tbl, after, to) // appended.go
	} else {
		scan := tbl.NewIncrementalAppendScan(planOpts...).ToSnapshot(to)
		if after != NoSnapshot {
			scan = scan.FromSnapshotExclusive(after)
		}
		tasks, err = scan.PlanFiles(ctx)
	}
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: table %s: plan the files appended after snapshot %d up to %d: %w", t.name, after, to, err))
	}
	if len(tasks) == 0 {
		return nil
	}
	reader := tbl.Scan(opts...)
	defer reader.Close()
	return t.readTasks(ctx, tbl, reader, tasks, nil, fn)
}
