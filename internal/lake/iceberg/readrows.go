package iceberg

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file reads given rows of the data files a ScanLive read: a merge
// finds its rows by their key alone, and reads their other columns only
// where it must (see silver's readSilver), which is seldom: the key column
// is then the only one decoded for the rest.

// UpperBound returns the largest value data file file of l holds in the
// int or long column col, as its manifest entry records it; ok is false
// when none is recorded (or col is not an int or long column).
func (l *LiveRows) UpperBound(file int, col string) (v int64, ok bool) {
	f, found := l.tbl.Schema().FindFieldByName(col)
	if !found {
		return 0, false
	}
	switch f.Type.(type) {
	case iceberggo.Int32Type, iceberggo.Int64Type:
	default:
		return 0, false
	}
	return intBound(l.files[file].UpperBoundValues()[f.ID])
}

// ReadLiveRows calls fn with the columns cols of the rows at rows, rows
// that ScanLive or ScanLiveKeys reported (live is what it returned): one
// batch per data file and row group at least, rows in position order,
// ids[i] locating row i. Only the data files that hold one of rows are
// opened, in parallel; int, long and boolean columns are read straight from
// their pages, only the rows asked for decoded. fn is called by one
// goroutine at a time; rec and ids are the caller's only until it returns.
func (t *Table) ReadLiveRows(ctx context.Context, live lake.LiveRows, rows []RowID, cols []string,
	fn func(rec arrow.RecordBatch, ids []RowID) error) error {
	l, err := liveOf(live)
	if err != nil {
		return fmt.Errorf("iceberg: read live rows of table %s: %w", t.name, err)
	}
	if err := l.read(ctx, rows, cols, fn); err != nil {
		return t.classify(fmt.Errorf("iceberg: read %d live rows of table %s: %w", len(rows), t.name, err))
	}
	return nil
}

func (l *LiveRows) read(ctx context.Context, rows []RowID, cols []string, fn func(arrow.RecordBatch, []RowID) error) error {
	if len(rows) == 0 {
		return nil
	}
	tbl := l.tbl
	want, err := selectColumns(tbl.Schema(), cols)
	if err != nil {
		return err
	}
	rd, err := newColumns(want)
	if err != nil {
		return err
	}
	byFile := map[int][]int64{}
	for _, r := range rows {
		if r.File < 0 || r.File >= len(l.files) || r.Pos < 0 || r.Pos >= l.files[r.File].Count() {
			return fmt.Errorf("row %d of file %d is not a row the scan read", r.Pos, r.File)
		}
		byFile[r.File] = append(byFile[r.File], r.Pos)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	var mu sync.Mutex // fn is called by one goroutine at a time
	failed := false
	for f, pos := range byFile {
		slices.Sort(pos)
		pos = slices.Compact(pos)
		g.Go(func() error {
			err := rd.readAt(gctx, fs, tbl, want, l.files[f], pos, func(rec arrow.RecordBatch, at []int64) error {
				ids := make([]RowID, len(at))
				for i, p := range at {
					ids[i] = RowID{File: f, Pos: p}
				}
				mu.Lock()
				defer mu.Unlock()
				if failed {
					return context.Canceled
				}
				if err := fn(rec, ids); err != nil {
					failed = true
					return err
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("data file %s: %w", l.files[f].FilePath(), err)
			}
			return nil
		})
	}
	return g.Wait()
}

// selectColumns returns the fields of sch named cols, in the order of cols.
func selectColumns(sch *iceberggo.Schema, cols []string) (*iceberggo.Schema, error) {
	fields := make([]iceberggo.NestedField, len(cols))
	for i, c := range cols {
		j := slices.IndexFunc(sch.Fields(), func(f iceberggo.NestedField) bool { return f.Name == c })
		if j < 0 {
			return nil, fmt.Errorf("no column %s", c)
		}
		fields[i] = sch.Field(j)
	}
	return iceberggo.NewSchema(sch.ID, fields...), nil
}

// readAt calls fn with the rows of data file df at the positions pos
// (ascending, distinct) and those positions.
func (c *columns) readAt(ctx context.Context, fs icebergio.IO, tbl *table.Table, want *iceberggo.Schema,
	df iceberggo.DataFile, pos []int64, fn func(arrow.RecordBatch, []int64) error) error {
	pf, leaves, err := openLeaves(fs, df.FilePath(), c.fields)
	if err != nil {
		return err
	}
	defer pf.Close()
	mem := memory.DefaultAllocator
	if !c.direct(pf, leaves) {
		// Every row read the general way, those at pos kept.
		return readLive(ctx, pf, mem, tbl, want, nil, nil, func(rec arrow.RecordBatch, at Positions) error {
			first := at.At(0)
			lo, _ := slices.BinarySearch(pos, first)
			hi, _ := slices.BinarySearch(pos, first+rec.NumRows())
			if lo == hi {
				return nil
			}
			sel, err := takeRows(ctx, mem, rec, pos[lo:hi], first)
			if err != nil {
				return err
			}
			defer sel.Release()
			return fn(sel, pos[lo:hi])
		})
	}
	var sc keyScratch
	sc.cols = make([]colBuf, len(leaves))
	var at int64 // position of the first row of the row group
	for g := 0; g < pf.NumRowGroups() && len(pos) > 0; g++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := pf.MetaData().RowGroup(g).NumRows()
		k, _ := slices.BinarySearch(pos, at+n)
		if k > 0 {
			if err := c.readGroupAt(pf.RowGroup(g), leaves, at, pos[:k], &sc, mem, fn); err != nil {
				return fmt.Errorf("row group %d: %w", g, err)
			}
		}
		pos = pos[k:]
		at += n
	}
	if len(pos) > 0 {
		return fmt.Errorf("no row at position %d: the file has %d rows", pos[0], at)
	}
	return nil
}

// readGroupAt reads the rows at pos (ascending, all in the row group rg,
// whose first row is at position at): each column skips to each run of
// consecutive positions and decodes only its rows.
func (c *columns) readGroupAt(rg *file.RowGroupReader, leaves []int, at int64, pos []int64, sc *keyScratch,
	mem memory.Allocator, fn func(arrow.RecordBatch, []int64) error) error {
	readers := make([]file.ColumnChunkReader, len(leaves))
	defer func() {
		for _, r := range readers {
			if r != nil {
				r.Close() // its page buffers go back to pagePool
			}
		}
	}()
	for i, leaf := range leaves {
		cr, err := rg.Column(leaf)
		if err != nil {
			return err
		}
		readers[i] = cr
		b := &sc.cols[i]
		b.size(cr, int64(len(pos)))
		var done int64 // rows of the row group consumed
		for k := 0; k < len(pos); {
			// The run pos[k:e] of consecutive positions.
			e := k + 1
			for e < len(pos) && pos[e] == pos[e-1]+1 {
				e++
			}
			if skip := pos[k] - at - done; skip > 0 {
				if err := skipRows(cr, skip); err != nil {
					return fmt.Errorf("column %s: %w", c.fields[i].Name, err)
				}
				done += skip
			}
			if err := b.read(cr, int64(k), int64(e-k)); err != nil {
				return fmt.Errorf("column %s: %w", c.fields[i].Name, err)
			}
			done += int64(e - k)
			k = e
		}
	}
	sc.matched = sc.matched[:0]
	for i := range pos {
		sc.matched = append(sc.matched, int32(i))
	}
	rec := c.gather(mem, sc, readers)
	defer rec.Release()
	return fn(rec, pos)
}
