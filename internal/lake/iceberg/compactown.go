package iceberg

import (
	"context"
	"errors"
	"fmt"

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
	w, ok, err := newDataFileWriter(ctx, tbl, sc, sc)
	if err != nil {
		return gr, err
	}
	if !ok {
		return gr, errors.New("tidemark's writer does not write this table") // ownCompactable checked
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return gr, err
	}
	mem := w.mem
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
	deleted, err := readPositionDeletes(ctx, fs, mem, byPath, deletes)
	if err != nil {
		return gr, err
	}

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
			_, _ = w.finish(out, errors.New("compaction failed"))
			_ = w.fs.Remove(out.path)
		}
	}()
	closeOut := func() error {
		df, err := w.finish(out, nil)
		out = nil
		if err != nil {
			return err
		}
		gr.NewDataFiles = append(gr.NewDataFiles, df)
		gr.BytesAfter += df.FileSizeBytes()
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
				return fmt.Errorf("compaction group %s: a batch spans %d partitions", g.PartitionKey, len(groups))
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
	for i, df := range gr.OldDataFiles {
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
			return gr, fmt.Errorf("rewrite data file %s: %w", df.FilePath(), err)
		}
	}
	if err := flush(); err != nil {
		return gr, err
	}
	if out != nil {
		if err := closeOut(); err != nil {
			return gr, err
		}
	}
	gr.SafePosDeletes = table.CollectSafePositionDeletes(g.Tasks)
	return gr, nil
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
