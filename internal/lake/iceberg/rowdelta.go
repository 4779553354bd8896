package iceberg

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file is the merge path whose cost follows the rows it changes, not
// the size of the table: ScanLive reads only the few columns a merge needs
// to find its rows (the key, the position columns) and says where each row
// is (data file, position); MergeRows then deletes exactly those rows with
// position delete files, in the same snapshot as the rows it appends. The
// data files are read once, and no filter is evaluated row by row.

// LiveRows is the state of a table a ScanLive read: its snapshot and the
// data files it read, which RowIDs index. MergeRows deletes by it. It
// implements lake.LiveRows.
type LiveRows struct {
	tbl   *table.Table
	files []iceberggo.DataFile
}

// RowID locates a row ScanLive reported: a data file of its LiveRows and
// the row's position in that file.
type RowID = lake.RowID

// Positions are the positions in their data file of the rows of a batch
// ScanLive reports.
type Positions = lake.Positions

// scanLiveBatch is the number of rows per batch ScanLive reads: its
// columns are few and narrow.
const scanLiveBatch = 65536

// liveBatchBytes bounds the decoded bytes of one batch readLive reads: it
// reads at most scanLiveBatch rows a batch, fewer when the columns it reads
// are wide (batchRows). A silver merge reads every column of the data
// files holding rows it must read whole (an update that left a TOAST
// column unchanged needs the row's prior value): with batches of 65536
// rows, a file of 3 KB rows was decoded whole at once. Measured in
// TestQuickCrashStorm's catch-up, whose silver table is unpartitioned
// (adaptive buckets): 72 MiB of heap in decoded batches of two files read
// in parallel (32 MiB one column of one batch), the session at 266-275 MiB
// resident over its 256 MiB budget; with batches of liveBatchBytes, 4 to
// 8 MiB a column.
const liveBatchBytes = 4 << 20

// batchRows is how many rows of pf one batch of its leaf columns leaves
// may hold within liveBatchBytes, from the uncompressed size of those
// columns' chunks (between 1 and scanLiveBatch).
func batchRows(pf *file.Reader, leaves []int) int64 {
	md := pf.MetaData()
	var bytes, rows int64
	for g := 0; g < md.NumRowGroups(); g++ {
		rg := md.RowGroup(g)
		rows += rg.NumRows()
		for _, l := range leaves {
			if cc, err := rg.ColumnChunk(l); err == nil {
				bytes += cc.TotalUncompressedSize()
			}
		}
	}
	if bytes <= 0 || rows <= 0 {
		return scanLiveBatch
	}
	// Arrow adds an offset (4 bytes) or less per value beyond the encoded
	// bytes; plain or dictionary pages hold at least the values' bytes.
	perRow := float64(bytes)/float64(rows) + 4*float64(len(leaves))
	return max(1, min(scanLiveBatch, int64(liveBatchBytes/perRow)))
}

// MergeOnRead reports whether the table deletes rows with position delete
// files (write.delete.mode merge-on-read on a format v2 table), which
// MergeRows needs.
func (t *Table) MergeOnRead() bool { return mergeOnRead(t.current()) }

func mergeOnRead(tbl *table.Table) bool {
	return tbl.Metadata().Version() >= 2 &&
		tbl.Properties().Get(table.WriteDeleteModeKey, table.WriteDeleteModeDefault) == MergeOnRead
}

// ScanLive calls fn with the columns cols of the live rows (rows a delete
// file removed are skipped) of every data file of the current snapshot that
// f's partition and column statistics do not rule out. f is not applied to
// the rows: the caller picks the rows it wants. Each batch holds rows of one
// data file, file (an index into the returned LiveRows), in file order;
// pos.At(i) is the position of row i in that file. Batches hold the columns in
// the order of cols, typed as the table's current schema (columns added
// after a file was written are null); they and pos are the caller's only
// until fn returns. fn is called by one goroutine at a time; files are read
// in parallel.
func (t *Table) ScanLive(ctx context.Context, f *Filter, cols []string, fn func(rec arrow.RecordBatch, file int, pos Positions) error) (*LiveRows, error) {
	return t.scanLiveKeys(ctx, f, cols, nil, fn)
}

// ScanLiveKeys is ScanLive that reports only the rows whose first column
// of cols, an int or long column, holds one of keys (nil: every row, as
// ScanLive). The rows are picked as the files are read, in parallel, and
// the other columns are read only where a file holds one of keys: a merge
// that touches a few keys of each file costs little more than reading the
// key column once.
func (t *Table) ScanLiveKeys(ctx context.Context, f *Filter, cols []string, keys []int64,
	fn func(rec arrow.RecordBatch, file int, pos Positions) error) (lake.LiveRows, error) {
	live, err := t.scanLiveKeys(ctx, f, cols, keys, fn)
	if err != nil {
		return nil, err
	}
	return live, nil
}

func (t *Table) scanLiveKeys(ctx context.Context, f *Filter, cols []string, keys []int64,
	fn func(rec arrow.RecordBatch, file int, pos Positions) error) (*LiveRows, error) {
	tbl := t.current()
	live := &LiveRows{tbl: tbl}
	if tbl.CurrentSnapshot() == nil {
		return live, nil
	}
	err := t.scanLive(ctx, tbl, f, cols, keys, nil, live, fn)
	if err != nil {
		return nil, t.classify(fmt.Errorf("iceberg: scan the live rows of table %s: %w", t.name, err))
	}
	return live, nil
}

// ScanLiveWithout is ScanLive over the data files written before the
// column without was added: files whose column statistics have no value
// count for it (a file written after holds the column, even if all null).
// A file without any value counts is taken to hold it.
func (t *Table) ScanLiveWithout(ctx context.Context, without string, cols []string,
	fn func(rec arrow.RecordBatch, file int, pos Positions) error) (lake.LiveRows, error) {
	tbl := t.current()
	live := &LiveRows{tbl: tbl}
	if tbl.CurrentSnapshot() == nil {
		return live, nil
	}
	fld, ok := tbl.Schema().FindFieldByName(without)
	if !ok {
		return nil, fmt.Errorf("iceberg: table %s has no column %s", t.name, without)
	}
	keep := func(df iceberggo.DataFile) bool {
		vc := df.ValueCounts()
		if len(vc) == 0 {
			return false
		}
		_, has := vc[fld.ID]
		return !has
	}
	err := t.scanLive(ctx, tbl, nil, cols, nil, keep, live, fn)
	if err != nil {
		return nil, t.classify(fmt.Errorf("iceberg: scan the live rows of table %s without column %s: %w", t.name, without, err))
	}
	return live, nil
}

func (t *Table) scanLive(ctx context.Context, tbl *table.Table, f *Filter, cols []string, keys []int64,
	keep func(iceberggo.DataFile) bool, live *LiveRows, fn func(arrow.RecordBatch, int, Positions) error) error {
	// In the order of cols (Schema.Select keeps the table's order).
	want, err := selectColumns(tbl.Schema(), cols)
	if err != nil {
		return err
	}
	var pick *keyProbe
	if keys != nil {
		var err error
		if pick, err = newKeyProbe(want, keys); err != nil {
			return err
		}
	}
	var opts []table.ScanOption
	if f != nil {
		// Files only: the caller picks the rows.
		expr, _, err := filterPlanExpr(f, tbl)
		if err != nil {
			return err
		}
		opts = append(opts, table.WithRowFilter(expr))
	}
	scan := tbl.Scan(opts...)
	defer scan.Close()
	tasks, err := scan.PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("plan the files: %w", err)
	}
	// A file split into several tasks is read once, whole: positions count
	// from the start of the file.
	byPath := map[string]int{}
	var deletes [][]iceberggo.DataFile
	for _, task := range tasks {
		if len(task.EqualityDeleteFiles) > 0 || len(task.DeletionVectorFiles) > 0 {
			return fmt.Errorf("data file %s has equality deletes or deletion vectors, which tidemark does not write: "+
				"compact the table first", task.File.FilePath())
		}
		if task.File.FileFormat() != iceberggo.ParquetFile {
			return fmt.Errorf("data file %s is %s, not Parquet", task.File.FilePath(), task.File.FileFormat())
		}
		if pick != nil && !pick.mayHold(task.File) {
			continue
		}
		if keep != nil && !keep(task.File) {
			continue
		}
		i, seen := byPath[task.File.FilePath()]
		if !seen {
			i = len(live.files)
			byPath[task.File.FilePath()] = i
			live.files = append(live.files, task.File)
			deletes = append(deletes, nil)
		}
		deletes[i] = append(deletes[i], task.DeleteFiles...)
	}
	if len(live.files) == 0 {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	mem := memory.DefaultAllocator
	deleted, err := readPositionDeletes(ctx, fs, mem, byPath, deletes)
	if err != nil {
		return err
	}

	type batch struct {
		rec  arrow.RecordBatch
		file int
		pos  Positions
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := min(runtime.GOMAXPROCS(0), len(live.files))
	next := make(chan int)
	out := make(chan batch, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc keyScratch // this worker's buffers
			for i := range next {
				emit := func(rec arrow.RecordBatch, pos Positions) error {
					rec.Retain()
					select {
					case out <- batch{rec, i, pos}:
						return nil
					case <-ctx.Done():
						rec.Release()
						return context.Cause(ctx)
					}
				}
				var err error
				if pick != nil {
					err = readLiveKeys(ctx, fs, mem, tbl, want, pick, &sc, live.files[i], deleted[i], emit)
				} else {
					err = readLiveFile(ctx, fs, mem, tbl, want, nil, live.files[i], deleted[i], emit)
				}
				if err != nil {
					cancel(fmt.Errorf("data file %s: %w", live.files[i].FilePath(), err))
					return
				}
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range live.files {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(out)
	}()
	var fnErr error
	for b := range out {
		if fnErr == nil && ctx.Err() == nil {
			if fnErr = fn(b.rec, b.file, b.pos); fnErr != nil {
				cancel(fnErr)
			}
		}
		b.rec.Release()
	}
	if fnErr != nil {
		return fnErr
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// readPositionDeletes reads the position delete files (deletes[i] apply to
// data file i; the file_path column says which rows) and returns, for
// each data file, the sorted positions deleted. Each delete file is read
// once, however many data files it applies to.
func readPositionDeletes(ctx context.Context, fs icebergio.IO, mem memory.Allocator, byPath map[string]int,
	deletes [][]iceberggo.DataFile) ([][]int64, error) {
	out := make([][]int64, len(deletes))
	read := map[string]bool{}
	for _, dfs := range deletes {
		for _, d := range dfs {
			if read[d.FilePath()] {
				continue
			}
			read[d.FilePath()] = true
			err := readParquet(ctx, fs, mem, d.FilePath(), []int{posDeletePathID, posDeletePosID}, func(rec arrow.RecordBatch) error {
				paths, ok1 := rec.Column(0).(interface{ Value(int) string })
				poss, ok2 := rec.Column(1).(*array.Int64)
				if !ok1 || !ok2 {
					return fmt.Errorf("position delete file %s: columns are %s", d.FilePath(), rec.Schema())
				}
				// Rows are sorted by path: look each path up once.
				last, idx := "", -1
				for r := 0; r < int(rec.NumRows()); r++ {
					if p := paths.Value(r); r == 0 || p != last {
						last = p
						if i, ok := byPath[p]; ok {
							idx = i
						} else {
							idx = -1
						}
					}
					if idx >= 0 {
						out[idx] = append(out[idx], poss.Value(r))
					}
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("read position delete file %s: %w", d.FilePath(), err)
			}
		}
	}
	for i := range out {
		slices.Sort(out[i])
		out[i] = slices.Compact(out[i])
	}
	return out, nil
}

// Field ids of a position delete file's columns (Iceberg reserved ids).
var posDeletePathID, posDeletePosID = func() (int, int) {
	p, _ := iceberggo.PositionalDeleteSchema.FindFieldByName("file_path")
	q, _ := iceberggo.PositionalDeleteSchema.FindFieldByName("pos")
	return p.ID, q.ID
}()

// readParquet calls fn with the top-level columns ids (by field id, in
// that order) of the Parquet file path, in batches, in file order. A column
// the file lacks is an error.
func readParquet(ctx context.Context, fs icebergio.IO, mem memory.Allocator, path string, ids []int, fn func(arrow.RecordBatch) error) error {
	pf, err := openParquet(fs, mem, path)
	if err != nil {
		return err
	}
	defer pf.Close()
	leaves, err := leafColumns(pf, ids)
	if err != nil {
		return err
	}
	for i, l := range leaves {
		if l < 0 {
			return fmt.Errorf("no column with field id %d", ids[i])
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows(pf, leaves)}, mem)
	if err != nil {
		return err
	}
	return eachBatch(ctx, fr, leaves, fn)
}

// openParquet opens the Parquet file path; closing the reader closes the
// file. Its footer is parsed once per process (footers): a merge reads the
// same data files as the last one, and a file never changes.
func openParquet(fs icebergio.IO, mem memory.Allocator, path string) (*file.Reader, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	opts := []file.ReadOption{file.WithReadProps(readerProps(mem))}
	var size int64 = -1
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	md := footers.get(path, size)
	if md != nil {
		opts = append(opts, file.WithMetadata(md))
	}
	pf, err := file.NewParquetReader(f, opts...)
	if err != nil {
		f.Close()
		return nil, err
	}
	if md == nil && size >= 0 {
		footers.put(path, size, pf.MetaData())
	}
	return pf, nil
}

// footers holds the parsed footers of the Parquet files read last, by path
// and size (a file is never rewritten in place; the size guards anyway).
var footers = footerCache{max: 32 << 20}

// footerCache is a map of parsed Parquet footers bounded by their memory
// (max bytes, estimated as 5 times a footer's serialized size, about what
// a parsed one holds): the oldest entry goes first. A bound by count would
// either drop the footers of a table of many small files (a merge then
// parses each again) or hold too much of a wide table's.
type footerCache struct {
	mu    sync.Mutex
	max   int64
	used  int64
	m     map[string]footer
	order []string
}

type footer struct {
	size, bytes int64
	md          *metadata.FileMetaData
}

func (c *footerCache) get(path string, size int64) *metadata.FileMetaData {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[path]; ok && e.size == size && size >= 0 {
		return e.md
	}
	return nil
}

func (c *footerCache) put(path string, size int64, md *metadata.FileMetaData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]footer{}
	}
	if old, ok := c.m[path]; ok {
		c.used -= old.bytes
	} else {
		c.order = append(c.order, path)
	}
	e := footer{size: size, bytes: 5 * int64(md.Size()), md: md}
	c.m[path] = e
	c.used += e.bytes
	for c.used > c.max && len(c.order) > 0 {
		c.used -= c.m[c.order[0]].bytes
		delete(c.m, c.order[0])
		c.order = c.order[1:]
	}
}

// eachBatch calls fn with every batch of the leaf columns of fr, in file
// order. Batches are released when fn returns.
func eachBatch(ctx context.Context, fr *pqarrow.FileReader, leaves []int, fn func(arrow.RecordBatch) error) error {
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	return rr.Err()
}

// openLeaves opens data file path from the page pool and finds the leaf
// column of each of fields (leafColumns). The caller closes the reader.
func openLeaves(fs icebergio.IO, path string, fields []iceberggo.NestedField) (*file.Reader, []int, error) {
	pf, err := openParquet(fs, pagePool, path)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]int, len(fields))
	for i, f := range fields {
		ids[i] = f.ID
	}
	leaves, err := leafColumns(pf, ids)
	if err != nil {
		pf.Close()
		return nil, nil, err
	}
	return pf, leaves, nil
}

// leafColumns returns the leaf column index of each top-level primitive
// column ids names by field id (-1 when the file has none).
func leafColumns(pf *file.Reader, ids []int) ([]int, error) {
	sc := pf.MetaData().Schema
	out := make([]int, len(ids))
	for i := range out {
		out[i] = -1
	}
	for c := 0; c < sc.NumColumns(); c++ {
		col := sc.Column(c)
		if len(col.ColumnPath()) != 1 {
			continue
		}
		id := int(col.SchemaNode().FieldID())
		for i, want := range ids {
			if id == want {
				out[i] = c
			}
		}
	}
	return out, nil
}

// readLiveFile reads the columns of want from data file df, drops the rows
// at the sorted positions deleted, converts the rest to the table's types
// and calls fn with them and their positions; with pick, only the rows
// whose key it holds.
func readLiveFile(ctx context.Context, fs icebergio.IO, mem memory.Allocator, tbl *table.Table, want *iceberggo.Schema,
	pick *keyProbe, df iceberggo.DataFile, deleted []int64, fn func(arrow.RecordBatch, Positions) error) error {
	pf, err := openParquet(fs, mem, df.FilePath())
	if err != nil {
		return err
	}
	defer pf.Close()
	return readLive(ctx, pf, mem, tbl, want, pick, deleted, fn)
}

// readLive is readLiveFile on the open file pf.
func readLive(ctx context.Context, pf *file.Reader, mem memory.Allocator, tbl *table.Table, want *iceberggo.Schema,
	pick *keyProbe, deleted []int64, fn func(arrow.RecordBatch, Positions) error) error {
	ids := make([]int, 0, want.NumFields())
	for _, fld := range want.Fields() {
		ids = append(ids, fld.ID)
	}
	leaves, err := leafColumns(pf, ids)
	if err != nil {
		return err
	}
	var present []int
	for _, l := range leaves {
		if l >= 0 {
			present = append(present, l)
		}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchRows(pf, present)}, mem)
	if err != nil {
		return err
	}
	var at int64 // position of the next row read
	var fileSchema *iceberggo.Schema
	convert := func(rec arrow.RecordBatch) (arrow.RecordBatch, error) {
		if fileSchema == nil {
			var err error
			fileSchema, err = table.ArrowSchemaToIcebergWithOptions(rec.Schema(), table.ArrowToIcebergOptions{
				NameMapping: tbl.NameMapping(), TableSchema: tbl.Schema()})
			if err != nil {
				return nil, err
			}
		}
		return table.ToRequestedSchema(ctx, want, fileSchema, rec, table.SchemaOptions{
			FormatVersion: tbl.Metadata().Version(), TableProperties: tbl.Properties()})
	}
	emit := func(rec arrow.RecordBatch) error {
		n := rec.NumRows()
		start := at
		at += n
		// The positions deleted within [start, start+n).
		lo, _ := slices.BinarySearch(deleted, start)
		hi, _ := slices.BinarySearch(deleted, start+n)
		pos := Positions{First: start}
		if lo < hi {
			pos.Pos = make([]int64, 0, n-int64(hi-lo))
			d := deleted[lo:hi]
			for p := start; p < start+n; p++ {
				if len(d) > 0 && d[0] == p {
					d = d[1:]
					continue
				}
				pos.Pos = append(pos.Pos, p)
			}
			if len(pos.Pos) == 0 {
				return nil
			}
			sel, err := takeRows(ctx, mem, rec, pos.Pos, start)
			if err != nil {
				return err
			}
			defer sel.Release()
			rec = sel
		}
		conv, err := convert(rec)
		if err != nil {
			return err
		}
		defer conv.Release()
		if pick != nil {
			return pick.filter(ctx, mem, conv, pos, fn)
		}
		return fn(conv, pos)
	}
	if len(present) == 0 {
		// None of the columns is in the file (all added later): rows of nulls.
		rows := pf.NumRows()
		for at < rows {
			n := min(rows-at, scanLiveBatch)
			rec := array.NewRecordBatch(arrow.NewSchema(nil, nil), nil, n)
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	}
	if err := eachBatch(ctx, fr, present, emit); err != nil {
		return err
	}
	if at != pf.NumRows() {
		return fmt.Errorf("read %d rows of %d", at, pf.NumRows())
	}
	return nil
}

// takeRows returns the rows of rec at positions pos (ascending; the rows
// of rec are at start, start+1, ...) as a new batch the caller releases.
func takeRows(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, pos []int64, start int64) (arrow.RecordBatch, error) {
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	ib.Reserve(len(pos))
	for _, p := range pos {
		ib.UnsafeAppend(p - start)
	}
	idx := ib.NewArray()
	defer idx.Release()
	return Take(ctx, mem, rec, idx)
}

// Take returns the rows of rec at the indices idx (an integer array), in
// that order, as a new batch the caller releases (lake.Take).
func Take(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, idx arrow.Array) (arrow.RecordBatch, error) {
	return lake.Take(ctx, mem, rec, idx)
}

// MergeRows is Merge that also deletes rows by position: rows are rows
// ScanLive reported (live is what it returned), deleted with position
// delete files committed in the same snapshot as the rows appended (and
// after the rows del matches are deleted, if del is not nil). The table
// must be merge-on-read (see MergeOnRead). If the table's current snapshot
// is not the one live read, nothing is written and the error wraps
// ErrCommitConflict: the rows may have moved.
func (t *Table) MergeRows(ctx context.Context, live lake.LiveRows, rows []RowID, del *Filter, recs []arrow.RecordBatch, props map[string]string) error {
	l, err := liveOf(live)
	if err != nil {
		return fmt.Errorf("iceberg: merge into table %s: %w", t.name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	err = t.mergeOnce(ctx, &rowDeletes{l, rows}, nil, del, recs, props)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: merge into table %s (%d rows deleted by position, %d appended): %w",
			t.name, len(rows), countRows(recs), err))
	}
	return nil
}

// rowDeletes are the rows a merge deletes by position.
type rowDeletes struct {
	live *LiveRows
	rows []RowID
}

// check refuses positions read from another snapshot than t's current.
func (d *rowDeletes) check(t *Table) error {
	if d == nil || len(d.rows) == 0 {
		return nil
	}
	if d.live == nil {
		return errors.New("rows to delete without the scan that found them")
	}
	read, cur := d.live.tbl.CurrentSnapshot(), t.tbl.CurrentSnapshot()
	if read == nil || cur == nil || read.SnapshotID != cur.SnapshotID {
		return fmt.Errorf("%w: the table changed since its rows were read", ErrCommitConflict)
	}
	if !mergeOnRead(t.tbl) {
		err := fmt.Errorf("deleting rows by position needs write.delete.mode %s (the table is %s)",
			MergeOnRead, t.tbl.Properties().Get(table.WriteDeleteModeKey, table.WriteDeleteModeDefault))
		if mergeOnRead(d.live.tbl) {
			// An operator changed the mode since the rows were read: redo.
			return fmt.Errorf("%w: %w", ErrCommitConflict, err)
		}
		return err
	}
	for _, r := range d.rows {
		if r.File < 0 || r.File >= len(d.live.files) || r.Pos < 0 || r.Pos >= d.live.files[r.File].Count() {
			return fmt.Errorf("row %d of file %d is not a row the scan read", r.Pos, r.File)
		}
	}
	return nil
}

// writePositionDeletes writes the position delete files for rows: one per
// partition of the data files they are in, rows sorted by file and
// position as the spec asks.
func (t *Table) writePositionDeletes(ctx context.Context, d *rowDeletes) ([]iceberggo.DataFile, error) {
	tbl := d.live.tbl
	byFile := map[int][]int64{}
	for _, r := range d.rows {
		byFile[r.File] = append(byFile[r.File], r.Pos)
	}
	byPart := map[string][]int{}
	var parts []string
	for i := range byFile {
		k := partitionKey(d.live.files[i])
		if _, ok := byPart[k]; !ok {
			parts = append(parts, k)
		}
		byPart[k] = append(byPart[k], i)
	}
	slices.Sort(parts)
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, errors.New("the table's file system cannot write")
	}
	locs, err := tbl.LocationProvider()
	if err != nil {
		return nil, err
	}
	writeID := uuid.New()
	mem := memory.DefaultAllocator
	var out []iceberggo.DataFile
	for n, k := range parts {
		files := byPart[k]
		slices.SortFunc(files, func(a, b int) int {
			return strings.Compare(d.live.files[a].FilePath(), d.live.files[b].FilePath())
		})
		pb := array.NewStringBuilder(mem)
		qb := array.NewInt64Builder(mem)
		var count int64
		minPos, maxPos := int64(-1), int64(-1)
		for _, i := range files {
			ps := byFile[i]
			slices.Sort(ps)
			ps = slices.Compact(ps)
			for _, p := range ps {
				pb.Append(d.live.files[i].FilePath())
				qb.Append(p)
			}
			count += int64(len(ps))
			if minPos < 0 || ps[0] < minPos {
				minPos = ps[0]
			}
			maxPos = max(maxPos, ps[len(ps)-1])
		}
		paths, poss := pb.NewArray(), qb.NewArray()
		pb.Release()
		qb.Release()
		rec := array.NewRecordBatch(table.PositionalDeleteArrowSchema, []arrow.Array{paths, poss}, count)
		paths.Release()
		poss.Release()
		var buf bytes.Buffer
		err := writeParquet(&buf, rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("write a position delete file: %w", err)
		}
		path := locs.NewDataLocation(fmt.Sprintf("%05d-%s-deletes.parquet", n, writeID))
		if err := wfs.WriteFile(path, buf.Bytes()); err != nil {
			return nil, fmt.Errorf("write position delete file %s: %w", path, err)
		}
		first, last := d.live.files[files[0]], d.live.files[files[len(files)-1]]
		df, err := positionDeleteFile(tbl.Metadata(), first, path, count, int64(buf.Len()),
			first.FilePath(), last.FilePath(), minPos, maxPos)
		if err != nil {
			return nil, fmt.Errorf("position delete file %s: %w", path, err)
		}
		out = append(out, df)
	}
	return out, nil
}

func writeParquet(buf *bytes.Buffer, rec arrow.RecordBatch) error {
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithStats(true))
	w, err := pqarrow.NewFileWriter(rec.Schema(), buf, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	if err := w.Write(rec); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// positionDeleteFile describes a position delete file in the partition of
// data file like: count rows, size bytes, file paths from loPath to hiPath
// and positions from loPos to hiPos.
func positionDeleteFile(meta table.Metadata, like iceberggo.DataFile, path string, count, size int64,
	loPath, hiPath string, loPos, hiPos int64) (iceberggo.DataFile, error) {
	spec := meta.PartitionSpecByID(int(like.SpecID()))
	if spec == nil {
		return nil, fmt.Errorf("no partition spec %d", like.SpecID())
	}
	logical := map[int]string{}
	for _, pf := range spec.Fields() {
		src, ok := meta.CurrentSchema().FindFieldByID(pf.SourceID())
		if !ok {
			continue
		}
		switch pf.Transform.ResultType(src.Type).(type) {
		case iceberggo.DateType:
			logical[pf.FieldID] = "date"
		case iceberggo.TimeType:
			logical[pf.FieldID] = "time-micros"
		case iceberggo.TimestampType, iceberggo.TimestampTzType:
			logical[pf.FieldID] = "timestamp-micros"
		case iceberggo.DecimalType:
			logical[pf.FieldID] = "decimal"
		case iceberggo.UUIDType:
			logical[pf.FieldID] = "uuid"
		}
	}
	b, err := iceberggo.NewDataFileBuilder(*spec, iceberggo.EntryContentPosDeletes, path, iceberggo.ParquetFile,
		like.Partition(), logical, nil, count, size)
	if err != nil {
		return nil, err
	}
	// Bounds in Iceberg's single-value encoding: a string's UTF-8 bytes
	// (whole: readers match a delete file to data files by them), a long's
	// 8 little-endian bytes.
	b.ValueCounts(map[int]int64{posDeletePathID: count, posDeletePosID: count})
	b.NullValueCounts(map[int]int64{posDeletePathID: 0, posDeletePosID: 0})
	b.LowerBoundValues(map[int][]byte{posDeletePathID: []byte(loPath),
		posDeletePosID: binary.LittleEndian.AppendUint64(nil, uint64(loPos))})
	b.UpperBoundValues(map[int][]byte{posDeletePathID: []byte(hiPath),
		posDeletePosID: binary.LittleEndian.AppendUint64(nil, uint64(hiPos))})
	return b.Build(), nil
}

// rowDelta stages, in tx, one snapshot that deletes d's rows by position
// and appends recs (schema sc), with the files pre staged (nil: none), its
// summary carrying props.
func (t *Table) rowDelta(ctx context.Context, tx *table.Transaction, d *rowDeletes, pre *staged, sc *arrow.Schema,
	recs []arrow.RecordBatch, props map[string]string) error {
	var dels []iceberggo.DataFile
	if d != nil && len(d.rows) > 0 {
		var err error
		if dels, err = t.writePositionDeletes(ctx, d); err != nil {
			return err
		}
	}
	rd := tx.NewRowDelta(iceberggo.Properties(maps.Clone(props)))
	if pre != nil {
		dels = append(dels, pre.deletes...)
		rd.AddRows(pre.data...)
	}
	rd.AddDeletes(dels...)
	if countRows(recs) > 0 {
		// Through the own writer where it writes this table, as appends
		// do (stageAppend): iceberg-go's writes dictionaries and
		// statistics of every column, which copied a 200 MiB value of an
		// updated row seven times over (1.5 GiB of heap in one merge).
		files, err := t.writeRows(ctx, sc, recs)
		if err != nil {
			return fmt.Errorf("write the appended rows: %w", err)
		}
		rd.AddRows(files...)
	}
	if err := rd.Commit(ctx); err != nil {
		return fmt.Errorf("row delta: %w", err)
	}
	return nil
}

// writeOwn writes recs as data files with dataFileWriter, in the table's
// current schema, when it writes this table (ok false: it does not, and
// nothing was written).
func (t *Table) writeOwn(ctx context.Context, recs []arrow.RecordBatch) (files []iceberggo.DataFile, ok bool, err error) {
	own, ok := withSchema(t.arrowSchema, recs)
	if !ok {
		return nil, false, nil
	}
	defer func() {
		for _, r := range own {
			r.Release()
		}
	}()
	w, ok, err := newDataFileWriter(ctx, t.tbl, t.arrowSchema, t.arrowSchema)
	if err != nil || !ok {
		return nil, false, err
	}
	files, err = w.write(ctx, own)
	return files, err == nil, err
}

// writeSliceBytes bounds the Arrow bytes of one batch handed to a Parquet
// writer: arrow-go's writer checks a column's dictionary against its limit
// after each batch, so a batch is inserted into the dictionary whole before
// the writer falls back to plain encoding. Measured in a storm of 1000-row
// transactions of 3 KB rows: a silver merge step writing one 30 MB batch
// held 32 MiB in the dictionary of its wide column and 36 MiB more in its
// page buffers, the session at 279-287 MiB resident over its 256 MiB
// budget.
const writeSliceBytes = 4 << 20

// writeSlices returns recs cut into zero-copy slices of about
// writeSliceBytes (the same rows, in order), each retained: release them
// with releaseAll.
func writeSlices(recs []arrow.RecordBatch) []arrow.RecordBatch {
	var out []arrow.RecordBatch
	for _, r := range recs {
		n := r.NumRows()
		step := n
		if b := lake.RecordBytes(r); b > writeSliceBytes && n > 1 {
			step = max(1, int64(float64(n)*writeSliceBytes/float64(b)))
		}
		if step >= n {
			r.Retain()
			out = append(out, r)
			continue
		}
		for off := int64(0); off < n; off += step {
			out = append(out, r.NewSlice(off, min(n, off+step)))
		}
	}
	return out
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}
