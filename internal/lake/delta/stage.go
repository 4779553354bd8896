package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake"
)

// A merge written in parts (lake.MergeStage): each part's data files, and
// its change data file when the feed is on, are written when it is added;
// the rows it deletes are kept as positions (8 bytes a row). The commit is
// MergeAt's, with every part's files and the union of their deletion
// vectors: the parts become visible together or not at all.

// staged is what the parts of a merge wrote, not yet committed.
type staged struct {
	rows map[string][]int64 // add path -> positions deleted
	adds []written
	cdcs []*CDCFile
}

// sortRows sorts and deduplicates each file's positions.
func (p *staged) sortRows() {
	for k, ps := range p.rows {
		slices.Sort(ps)
		p.rows[k] = slices.Compact(ps)
	}
}

// without returns rows without the positions the parts deleted (p.rows
// sorted).
func (p *staged) without(rows map[string][]int64) map[string][]int64 {
	out := make(map[string][]int64, len(rows))
	for path, ps := range rows {
		have := p.rows[path]
		for _, r := range ps {
			if _, found := slices.BinarySearch(have, r); !found {
				out[path] = append(out[path], r)
			}
		}
	}
	return out
}

// union returns the parts' rows and rows.
func (p *staged) union(rows map[string][]int64) map[string][]int64 {
	out := make(map[string][]int64, len(p.rows)+len(rows))
	for path, ps := range p.rows {
		out[path] = ps
	}
	for path, ps := range rows {
		out[path] = append(slices.Clone(out[path]), ps...)
	}
	return out
}

// deleted is the number of rows the parts deleted.
func (p *staged) deleted() int64 {
	var n int64
	for _, ps := range p.rows {
		n += int64(len(ps))
	}
	return n
}

// mergeStage is a lake.MergeStage of a Delta table.
type mergeStage struct {
	l    *lakeTable
	read int64 // the version the stage began at
	p    staged
	done bool
}

// StageMerge begins a merge written in parts on the table's current
// version (lake.KeyedTable). The table must have deletion vectors
// (merge-on-read).
func (l *lakeTable) StageMerge(ctx context.Context) (lake.MergeStage, error) {
	if !l.MergeOnRead() {
		return nil, fmt.Errorf("table %s: stage a merge: %w: a merge in parts deletes rows with deletion vectors, which the table lacks",
			l.name(), lake.ErrUnsupported)
	}
	t := l.t
	t.mu.Lock()
	defer t.mu.Unlock()
	conf := t.st.meta.Configuration
	if conf[PropChangeDataFeed] == "true" && len(t.st.meta.PartitionColumns) > 0 {
		return nil, fmt.Errorf("table %s: stage a merge: %w: change data files of a partitioned table", l.name(), ErrUnsupported)
	}
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return nil, fmt.Errorf("table %s: stage a merge: %w", l.name(), err)
	}
	return &mergeStage{l: l, read: t.st.version, p: staged{rows: map[string][]int64{}}}, nil
}

// Add writes recs' data files and, with the change data feed on, the
// part's change data file (the rows it deletes, read back, and recs).
func (s *mergeStage) Add(ctx context.Context, live lake.LiveRows, rows []lake.RowID, recs []arrow.RecordBatch) error {
	l := s.l
	if s.done {
		return fmt.Errorf("table %s: the staged merge is done", l.name())
	}
	byPath := map[string][]int64{}
	if live != nil {
		lr, err := l.liveOf(live)
		if err != nil {
			return err
		}
		if lr.version != s.read {
			return l.wrap(fmt.Errorf("rows read at version %d, the staged merge began at %d: %w", lr.version, s.read, errMoved))
		}
		for _, r := range rows {
			if r.File < 0 || r.File >= len(lr.files) {
				return fmt.Errorf("table %s: row %+v: no such file in the live rows read", l.name(), r)
			}
			p := lr.files[r.File].Path
			byPath[p] = append(byPath[p], r.Pos)
		}
	} else if len(rows) > 0 {
		return fmt.Errorf("table %s: rows to delete without the scan that found them", l.name())
	}
	adds, cdc, err := l.t.stagePart(ctx, s.read, byPath, recs)
	if err != nil {
		return l.wrap(fmt.Errorf("stage a part of a merge (%d rows deleted, %d appended): %w", len(rows), countRows(recs), err))
	}
	for p, ps := range byPath {
		s.p.rows[p] = append(s.p.rows[p], ps...)
	}
	s.p.adds = append(s.p.adds, adds...)
	if cdc != nil {
		s.p.cdcs = append(s.p.cdcs, cdc)
	}
	return nil
}

// Commit commits the parts, deleting the rows del matches besides.
func (s *mergeStage) Commit(ctx context.Context, del *lake.Filter, props map[string]string) error {
	l := s.l
	if s.done {
		return fmt.Errorf("table %s: the staged merge is done", l.name())
	}
	s.done = true
	s.p.sortRows()
	t := l.t
	t.mu.Lock()
	_, err := t.mergeAt(ctx, s.read, nil, del, nil, props, &s.p)
	t.mu.Unlock()
	if errors.Is(err, ErrCommitConflict) {
		s.remove() // not committed
	}
	return l.wrap(err)
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
	t := s.l.t
	for _, a := range s.p.adds {
		if p, err := t.filePath(a.add.Path); err == nil {
			os.Remove(p)
		}
	}
	for _, c := range s.p.cdcs {
		os.Remove(filepath.Join(t.dir, filepath.FromSlash(c.Path)))
	}
}

// stagePart writes the data files of recs and, with the change data feed
// on, the change data file of a part that deletes rows and appends recs,
// on top of version read (t.mu taken).
func (t *Table) stagePart(ctx context.Context, read int64, rows map[string][]int64, recs []arrow.RecordBatch) ([]written, *CDCFile, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.st.version != read {
		return nil, nil, fmt.Errorf("the staged merge began at version %d, the table is at %d: %w", read, t.st.version, errMoved)
	}
	var deleting int64
	for _, ps := range rows {
		deleting += int64(len(ps))
	}
	adds, err := t.writeData(ctx, recs)
	if err != nil {
		return nil, nil, err
	}
	if t.st.meta.Configuration[PropChangeDataFeed] != "true" || (deleting == 0 && countRows(recs) == 0) {
		return adds, nil, nil
	}
	// The feed: a version with change data files is read from them alone,
	// so every part writes one, of its deletes and its inserts.
	gone, err := t.readRows(ctx, rows)
	defer func() {
		for _, r := range gone {
			r.Release()
		}
	}()
	var cdc *CDCFile
	if err == nil {
		cdc, err = t.writeChanges(ctx, gone, recs)
	}
	if err != nil {
		for _, a := range adds {
			if p, err := t.filePath(a.add.Path); err == nil {
				os.Remove(p)
			}
		}
		return nil, nil, err
	}
	return adds, cdc, nil
}

// readRows reads the rows at the positions rows (add path -> positions),
// every column (t.mu held).
func (t *Table) readRows(ctx context.Context, rows map[string][]int64) ([]arrow.RecordBatch, error) {
	paths := make([]string, 0, len(rows))
	for p := range rows {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var out []arrow.RecordBatch
	for _, p := range paths {
		f := t.activeFile(p)
		if f == nil {
			return out, fmt.Errorf("file %s is not in the table (version %d)", p, t.st.version)
		}
		want := make(map[int64]bool, len(rows[p]))
		for _, r := range rows[p] {
			want[r] = true
		}
		err := t.readFile(ctx, *f, t.schema, func(rec arrow.RecordBatch, pos lake.Positions) error {
			g, _, err := t.selectRows(ctx, rec, pos, func(i int) bool { return want[pos.At(i)] })
			if g != nil {
				out = append(out, g)
			}
			return err
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func countRows(recs []arrow.RecordBatch) int64 {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	return n
}
