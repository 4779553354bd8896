package iceberg

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// A merge written in parts (lake.MergeStage): each part's position delete
// files and data files are written when it is added, and only their
// descriptions are kept; the commit is the row delta of MergeRows with
// those files, so the parts become visible together or not at all.

// mergeStage is a lake.MergeStage of a table.
type mergeStage struct {
	t *Table
	// base is the table's state when the stage began: every part's rows
	// were found in it, and the commit goes on top of it only.
	base *table.Table
	// files: the delete and data files the parts wrote.
	files staged
	done  bool
}

// staged are files written for a merge, not yet committed.
type staged struct {
	deletes, data []iceberggo.DataFile
}

func (s *staged) empty() bool { return s == nil || len(s.deletes)+len(s.data) == 0 }

// StageMerge begins a merge written in parts on the table's current
// state (lake.KeyedTable). The table must be merge-on-read.
func (t *Table) StageMerge(ctx context.Context) (lake.MergeStage, error) {
	base := t.current()
	if !mergeOnRead(base) {
		return nil, fmt.Errorf("iceberg: stage a merge into table %s: %w: a merge in parts deletes rows by position, "+
			"which needs write.delete.mode %s", t.name, lake.ErrUnsupported, MergeOnRead)
	}
	return &mergeStage{t: t, base: base}, nil
}

// Add writes the position delete files of rows and the data files of recs.
func (s *mergeStage) Add(ctx context.Context, live lake.LiveRows, rows []RowID, recs []arrow.RecordBatch) error {
	t := s.t
	if s.done {
		return fmt.Errorf("iceberg: merge into table %s: the staged merge is done", t.name)
	}
	l, err := liveOf(live)
	if err != nil {
		return fmt.Errorf("iceberg: merge into table %s: %w", t.name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := s.add(ctx, l, rows, recs); err != nil {
		return t.classify(fmt.Errorf("iceberg: stage a part of a merge into table %s (%d rows deleted by position, %d appended): %w",
			t.name, len(rows), countRows(recs), err))
	}
	return nil
}

func (s *mergeStage) add(ctx context.Context, l *LiveRows, rows []RowID, recs []arrow.RecordBatch) error {
	t := s.t
	if !sameSnapshot(s.base, t.tbl) {
		return fmt.Errorf("%w: the table changed since the staged merge began", ErrCommitConflict)
	}
	if len(rows) > 0 {
		d := &rowDeletes{l, rows}
		if err := d.check(t); err != nil {
			return err
		}
		dels, err := t.writePositionDeletes(ctx, d)
		if err != nil {
			return err
		}
		s.files.deletes = append(s.files.deletes, dels...)
	}
	if countRows(recs) == 0 {
		return nil
	}
	if err := checkWriteSchema(t.tbl.Schema(), recs[0].Schema()); err != nil {
		return err
	}
	files, err := t.writeRows(ctx, recs[0].Schema(), recs)
	s.files.data = append(s.files.data, files...)
	return err
}

// Commit commits the staged files, after deleting the rows del matches.
func (s *mergeStage) Commit(ctx context.Context, del *Filter, props map[string]string) error {
	t := s.t
	if s.done {
		return fmt.Errorf("iceberg: merge into table %s: the staged merge is done", t.name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s.done = true
	err := fmt.Errorf("%w: the table changed since the staged merge began", ErrCommitConflict)
	if sameSnapshot(s.base, t.tbl) {
		err = t.mergeOnce(ctx, nil, &s.files, del, nil, props)
	}
	if err != nil {
		s.remove()
		return t.classify(fmt.Errorf("iceberg: commit a merge in parts into table %s (%d delete files, %d data files): %w",
			t.name, len(s.files.deletes), len(s.files.data), err))
	}
	return nil
}

// Abort removes the files written, unless the stage committed.
func (s *mergeStage) Abort() {
	if s.done {
		return
	}
	s.done = true
	s.remove()
}

func (s *mergeStage) remove() {
	fs, err := s.base.FS(context.Background())
	if err != nil {
		return
	}
	for _, df := range append(s.files.deletes, s.files.data...) {
		_ = fs.Remove(df.FilePath())
	}
}

// sameSnapshot reports whether two states of a table have the same
// current snapshot (or neither has one).
func sameSnapshot(a, b *table.Table) bool {
	sa, sb := a.CurrentSnapshot(), b.CurrentSnapshot()
	if sa == nil || sb == nil {
		return sa == nil && sb == nil
	}
	return sa.SnapshotID == sb.SnapshotID
}

// writeRows writes recs (schema sc) as data files of the table, through
// the own writer where it writes this table (writeOwn), else iceberg-go's
// (t.mu held).
func (t *Table) writeRows(ctx context.Context, sc *arrow.Schema, recs []arrow.RecordBatch) ([]iceberggo.DataFile, error) {
	// Cut into slices of about writeSliceBytes first (writeSlices).
	parts := writeSlices(recs)
	defer releaseAll(parts)
	files, ok, err := t.writeOwn(ctx, parts)
	if err != nil || ok {
		return files, err
	}
	itr := func(yield func(arrow.RecordBatch, error) bool) {
		for _, r := range parts {
			// WriteRecords releases what it is given.
			r.Retain()
			if !yield(r, nil) {
				return
			}
		}
	}
	for df, err := range table.WriteRecords(ctx, t.tbl, sc, itr) {
		if err != nil {
			return files, err
		}
		files = append(files, df)
	}
	if len(files) == 0 {
		return nil, errors.New("wrote no data file")
	}
	return files, nil
}
