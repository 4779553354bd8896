package iceberg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// Compaction of data files holding large values. iceberg-go's rewrite
// (table.ExecuteCompactionGroup) reads a group's files with iceberg-go's
// reader, which refuses a page over arrow-go's default limits
// (bigpages.go), and writes with iceberg-go's writer, which dictionary-
// encodes, compresses and computes statistics of every value (each one
// more copy of a large value in flight). A group holding such a file is
// rewritten here instead: its files are read with tidemark's own reader
// (position deletes applied), a bounded number of rows at a time, and
// written with tidemark's own writer (dataFileWriter), a row group of
// about compactRowGroupBytes at a time, so one large value is held while
// it is read and while it is written, never the group's rows.

// ownCompactable splits tasks into those compaction may rewrite and reports
// which data files hold a page over iceberg-go's reader limits (big). A
// big file is rewritten by compactOwn when tidemark's writer writes the
// table (own), its partition spec is the table's, and only position deletes
// apply to it; otherwise it is left as it is, deletes included, which
// readers keep applying.
func ownCompactable(ctx context.Context, tbl *table.Table, sc *arrow.Schema, tasks []table.FileScanTask) (_ []table.FileScanTask, big map[string]bool, err error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, nil, err
	}
	_, own, err := newDataFileWriter(ctx, tbl, sc, sc)
	if err != nil {
		return nil, nil, err
	}
	spec := tbl.Spec()
	big = map[string]bool{}
	out := tasks[:0:0]
	for _, task := range tasks {
		isBig, err := bigPageFile(fs, memory.DefaultAllocator, task.File)
		if err != nil {
			return nil, nil, err
		}
		if isBig {
			if !own || task.File.SpecID() != int32(spec.ID()) ||
				len(task.EqualityDeleteFiles) > 0 || len(task.DeletionVectorFiles) > 0 {
				continue
			}
			big[task.File.FilePath()] = true
		}
		out = append(out, task)
	}
	return out, big, nil
}

// compactOwn rewrites group g of tbl (schema sc: the table's current Arrow
// schema) with tidemark's reader and writer, into files of about target
// bytes, as table.ExecuteCompactionGroup would. On error the result holds
// the files written so far, for the caller to remove.
func compactOwn(ctx context.Context, tbl *table.Table, sc *arrow.Schema, g table.CompactionTaskGroup, target int64) (table.CompactionGroupResult, error) {
	gr := table.CompactionGroupResult{PartitionKey: g.PartitionKey, BytesBefore: g.TotalSizeBytes}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return gr, err
	}
	byPath := map[string]int{}
	var deletes [][]iceberggo.DataFile
	for _, task := range g.Tasks {
		i, seen := byPath[task.File.FilePath()]
		if !seen { // a file split into tasks is read once, whole
			i = len(gr.OldDataFiles)
			byPath[task.File.FilePath()] = i
			gr.OldDataFiles = append(gr.OldDataFiles, task.File)
			deletes = append(deletes, nil)
		}
		deletes[i] = append(deletes[i], task.DeleteFiles...)
	}
	deleted, err := readPositionDeletes(ctx, fs, memory.DefaultAllocator, byPath, deletes)
	if err != nil {
		return gr, err
	}
	gr.NewDataFiles, err = rewriteOwn(ctx, tbl, sc, gr.OldDataFiles, deleted, target)
	for _, df := range gr.NewDataFiles {
		gr.BytesAfter += df.FileSizeBytes()
	}
	if err != nil {
		return gr, fmt.Errorf("compaction group %s: %w", g.PartitionKey, err)
	}
	gr.SafePosDeletes = table.CollectSafePositionDeletes(g.Tasks)
	return gr, nil
}

// rewriteOwn writes the rows of the data files of tbl (all of one
// partition of its current spec) but those at the positions deleted[i] of
// files[i], with tidemark's reader and writer, into new files of about
// target bytes, and returns them. On error it returns the files written so
// far, for the caller to remove.
func rewriteOwn(ctx context.Context, tbl *table.Table, sc *arrow.Schema, files []iceberggo.DataFile, deleted [][]int64, target int64) (written []iceberggo.DataFile, err error) {
	w, ok, err := newDataFileWriter(ctx, tbl, sc, sc)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("tidemark's writer does not write this table") // callers checked
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	mem := w.mem
	var (
		out      *openFile
		outClass []int // the value classes out's properties were made for
		n        int
		pending  []arrow.RecordBatch
		pendingB int64
	)
	defer func() {
		releaseAll(pending)
		if out != nil { // an error: close and remove the file
			_, _ = w.finish(out, errors.New("rewrite failed"))
			_ = w.fs.Remove(out.path)
		}
	}()
	closeOut := func() error {
		df, err := w.finish(out, nil)
		out = nil
		if err != nil {
			return err
		}
		written = append(written, df)
		return nil
	}
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		recs := pending
		pending, pendingB = nil, 0
		defer releaseAll(recs)
		longest := longestValues(recs)
		class := make([]int, len(longest))
		for j, l := range longest {
			class[j] = w.valueClass(l)
		}
		if out != nil && (out.cw.n >= target || exceeds(class, outClass)) {
			if err := closeOut(); err != nil {
				return err
			}
		}
		if out == nil {
			groups, err := w.partition(ctx, recs[:1])
			defer func() {
				for _, pg := range groups {
					releaseAll(pg.recs)
				}
			}()
			if err != nil {
				return err
			}
			if len(groups) != 1 {
				return fmt.Errorf("a batch of rows spans %d partitions", len(groups))
			}
			props, err := w.propertiesFor(longest)
			if err != nil {
				return err
			}
			if out, err = w.create(n, groups[0].day, props); err != nil {
				return err
			}
			n++
			outClass = class
		}
		// One row group of all of recs, written column by column.
		tb := array.NewTableFromRecords(sc, recs)
		defer tb.Release()
		return out.pw.WriteTable(tb, max(tb.NumRows(), 1))
	}
	want := tbl.Schema()
	for i, df := range files {
		err := readLiveFile(ctx, fs, mem, tbl, want, nil, df, deleted[i], func(rec arrow.RecordBatch, _ Positions) error {
			own, ok := withSchema(sc, []arrow.RecordBatch{rec})
			if !ok {
				return fmt.Errorf("rows of schema %s, not the table's %s", rec.Schema(), sc)
			}
			pending = append(pending, own[0])
			pendingB += lake.RecordBytes(own[0])
			if pendingB >= compactRowGroupBytes {
				return flush()
			}
			return nil
		})
		if err != nil {
			return written, fmt.Errorf("rewrite data file %s: %w", df.FilePath(), err)
		}
	}
	if err := flush(); err != nil {
		return written, err
	}
	if out != nil {
		if err := closeOut(); err != nil {
			return written, err
		}
	}
	return written, nil
}

// exceeds reports whether a column's class in c is above its class in
// limit.
func exceeds(c, limit []int) bool {
	for j := range c {
		if j >= len(limit) || c[j] > limit[j] {
			return true
		}
	}
	return false
}

// deleteOwn stages in tx the copy-on-write delete of the rows del matches
// (expr: del for iceberg-go), when a data file it may touch holds a page
// over iceberg-go's reader limits, which iceberg-go's delete
// (Transaction.Delete) would fail to read: each file holding a matching
// row is read with tidemark's reader, first the filter's columns (to find
// the rows), then, unless every row matches, whole, its other rows
// written to new files with tidemark's writer (rewriteOwn); one snapshot
// replaces those files. done is false when no such file is touched (the
// caller then uses iceberg-go's delete); t.mu is held.
func (t *Table) deleteOwn(ctx context.Context, tx *table.Transaction, del *Filter, expr iceberggo.BooleanExpression, props map[string]string) (done bool, err error) {
	tbl, sc := t.tbl, t.arrowSchema
	tasks, err := tbl.Scan(table.WithRowFilter(expr)).PlanFiles(ctx)
	if err != nil {
		return false, fmt.Errorf("plan files: %w", err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return false, err
	}
	mem := memory.DefaultAllocator
	var files []iceberggo.DataFile
	seen := map[string]bool{}
	anyBig, withDeletes := false, ""
	for _, task := range tasks {
		if seen[task.File.FilePath()] {
			continue
		}
		seen[task.File.FilePath()] = true
		big, err := bigPageFile(fs, mem, task.File)
		if err != nil {
			return false, err
		}
		anyBig = anyBig || big
		if len(task.DeleteFiles)+len(task.EqualityDeleteFiles)+len(task.DeletionVectorFiles) > 0 {
			withDeletes = task.File.FilePath()
		}
		files = append(files, task.File)
	}
	if !anyBig {
		return false, nil
	}
	if withDeletes != "" {
		return true, fmt.Errorf("copy-on-write delete: data file %s has delete files, and a file it touches holds a value too large for iceberg-go's reader", withDeletes)
	}
	if _, own, err := newDataFileWriter(ctx, tbl, sc, sc); err != nil || !own {
		return true, errors.Join(err, errors.New("copy-on-write delete: a file it touches holds a value too large for iceberg-go's reader, and tidemark's writer does not write this table"))
	}
	want, err := selectColumns(tbl.Schema(), filterColumns(del, nil))
	if err != nil {
		return true, fmt.Errorf("copy-on-write delete: %w", err)
	}
	target := int64(tbl.Properties().GetInt(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault))
	var old, added []iceberggo.DataFile
	defer func() {
		if err != nil {
			for _, df := range added {
				_ = fs.Remove(df.FilePath())
			}
		}
	}()
	for _, df := range files {
		var match []int64
		err := readLiveFile(ctx, fs, mem, tbl, want, nil, df, nil, func(rec arrow.RecordBatch, pos Positions) error {
			for i := range int(rec.NumRows()) {
				ok, err := del.MatchRow(rec, i)
				if err != nil {
					return err
				}
				if ok {
					match = append(match, pos.First+int64(i)) // no deletes: the rows are First, First+1, ...
				}
			}
			return nil
		})
		if err != nil {
			return true, fmt.Errorf("copy-on-write delete: data file %s: %w", df.FilePath(), err)
		}
		if len(match) == 0 {
			continue
		}
		old = append(old, df)
		if int64(len(match)) == df.Count() {
			continue
		}
		nf, err := rewriteOwn(ctx, tbl, sc, []iceberggo.DataFile{df}, [][]int64{match}, target)
		added = append(added, nf...)
		if err != nil {
			return true, fmt.Errorf("copy-on-write delete: %w", err)
		}
	}
	if len(old) == 0 {
		return true, nil
	}
	if err := tx.ReplaceDataFilesWithDataFiles(ctx, old, added, iceberggo.Properties(maps.Clone(props))); err != nil {
		return true, fmt.Errorf("copy-on-write delete: %w", err)
	}
	return true, nil
}

// filterColumns appends the columns f reads to cols, each once.
func filterColumns(f *Filter, cols []string) []string {
	if f.Col != "" && !slices.Contains(cols, f.Col) {
		cols = append(cols, f.Col)
	}
	for _, k := range f.Kids {
		cols = filterColumns(k, cols)
	}
	return cols
}
