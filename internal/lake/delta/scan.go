package delta

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark/tidemark/internal/lake"
)

func nowMs() int64 { return time.Now().UnixMilli() }

// Scan calls fn with the rows of every active file of the cached
// snapshot, in the order the files were added (row order kept within a
// file), on the columns of ArrowSchema (the partition column is not
// included). Batches are released when fn returns.
func (t *Table) Scan(ctx context.Context, fn func(arrow.RecordBatch) error) error {
	for _, a := range t.Files() {
		if err := t.scanFile(ctx, a, fn); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) scanFile(ctx context.Context, a Add, fn func(arrow.RecordBatch) error) error {
	return t.readFile(ctx, a, t.ArrowSchema(), func(rec arrow.RecordBatch, _ lake.Positions) error { return fn(rec) })
}

// readFile calls fn with the rows of file a that its deletion vector does
// not delete, on the columns of sc (table columns, by name: a column the
// file lacks, added after it was written, reads as null; a column written
// with a narrower type is widened), each batch with the positions of its
// rows in the file. Only the columns of sc are read from the file. The
// batch and the positions are released when fn returns.
func (t *Table) readFile(ctx context.Context, a Add, sc *arrow.Schema, fn func(arrow.RecordBatch, lake.Positions) error) error {
	dv, err := parseDV(a.DeletionVector)
	if err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	var deleted []uint64
	if dv != nil {
		if deleted, err = dv.rows(); err != nil {
			return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
		}
	}
	var first uint64 // the file position of the batch's first row
	path, err := t.filePath(a.Path)
	if err != nil {
		return err
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, t.mem)
	if err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	// The leaf columns of the fields of sc the file holds.
	var leaves []int
	for _, f := range fr.Manifest.Fields {
		if f.Field != nil && len(sc.FieldIndices(f.Field.Name)) > 0 {
			leaves = appendLeaves(leaves, f)
		}
	}
	emit := func(n int64, col func(f arrow.Field) (arrow.Array, error)) error {
		// The batch is given sc's schema, without the file's field ids.
		cols := make([]arrow.Array, sc.NumFields())
		defer release(cols)
		for j, f := range sc.Fields() {
			c, err := col(f)
			if err != nil {
				return err
			}
			cols[j] = c
		}
		out := array.NewRecordBatch(sc, cols, n)
		defer out.Release()
		pos := lake.Positions{First: int64(first)}
		if len(deleted) > 0 {
			kept, kpos, err := t.withoutDeleted(ctx, out, first, deleted)
			if err != nil {
				return err
			}
			first += uint64(n)
			if kept == nil {
				return nil
			}
			defer kept.Release()
			out, pos = kept, lake.Positions{Pos: kpos}
		} else {
			first += uint64(n)
		}
		return fn(out, pos)
	}
	if len(leaves) == 0 {
		// None of the columns asked for is in the file: its rows read as
		// nulls, counted from its metadata.
		n := fr.ParquetReader().NumRows()
		return emit(n, func(f arrow.Field) (arrow.Array, error) { return array.MakeArrayOfNull(t.mem, f.Type, int(n)), nil })
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		err := emit(rec.NumRows(), func(f arrow.Field) (arrow.Array, error) {
			idx := rec.Schema().FieldIndices(f.Name)
			if len(idx) == 0 {
				return array.MakeArrayOfNull(t.mem, f.Type, int(rec.NumRows())), nil
			}
			c := rec.Column(idx[0])
			if arrow.TypeEqual(c.DataType(), f.Type) {
				c.Retain()
				return c, nil
			}
			if !widens(c.DataType(), f.Type) {
				return nil, fmt.Errorf("Delta table %s: file %s: column %s is %s, the table's %s, not a widening: %w", t.dir, a.Path, f.Name, c.DataType(), f.Type, ErrUnsupported)
			}
			w, err := compute.CastArray(ctx, c, compute.SafeCastOptions(f.Type))
			if err != nil {
				return nil, fmt.Errorf("Delta table %s: file %s: widen column %s from %s to %s: %w", t.dir, a.Path, f.Name, c.DataType(), f.Type, err)
			}
			return w, nil
		})
		if err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	return nil
}

func appendLeaves(out []int, f pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(out, f.ColIndex)
	}
	for _, c := range f.Children {
		out = appendLeaves(out, c)
	}
	return out
}

func release(as []arrow.Array) {
	for _, a := range as {
		if a != nil {
			a.Release()
		}
	}
}

// filePath is the local path of an add action's path: relative to the
// table (URL-encoded), absolute, or a file:// URI.
func (t *Table) filePath(p string) (string, error) {
	if strings.Contains(p, "://") {
		u, err := url.Parse(p)
		if err != nil || u.Scheme != "file" {
			return "", fmt.Errorf("Delta table %s: file %q: %w: only local files", t.dir, p, ErrUnsupported)
		}
		return filepath.FromSlash(u.Path), nil
	}
	rel, err := url.PathUnescape(p)
	if err != nil {
		return "", fmt.Errorf("Delta table %s: file path %q: %w", t.dir, p, err)
	}
	if filepath.IsAbs(rel) {
		return rel, nil
	}
	return filepath.Join(t.dir, filepath.FromSlash(rel)), nil
}

// withoutDeleted returns the rows of rec (whose first row is at file
// position first) not in deleted (sorted), with their file positions; nil
// when none is left.
func (t *Table) withoutDeleted(ctx context.Context, rec arrow.RecordBatch, first uint64, deleted []uint64) (arrow.RecordBatch, []int64, error) {
	n := uint64(rec.NumRows())
	i, _ := slices.BinarySearch(deleted, first)
	if i == len(deleted) || deleted[i] >= first+n {
		rec.Retain()
		pos := make([]int64, n)
		for k := range pos {
			pos[k] = int64(first) + int64(k)
		}
		return rec, pos, nil
	}
	b := array.NewInt64Builder(t.mem)
	defer b.Release()
	var pos []int64
	for p := first; p < first+n; p++ {
		if i < len(deleted) && deleted[i] == p {
			i++
			continue
		}
		b.Append(int64(p - first))
		pos = append(pos, int64(p))
	}
	if b.Len() == 0 {
		return nil, nil, nil
	}
	idx := b.NewArray()
	defer idx.Release()
	out, err := lake.Take(ctx, t.mem, rec, idx)
	return out, pos, err
}

// selectRows returns the rows of rec that keep accepts, with their file
// positions (pos: rec's); nil when none is.
func (t *Table) selectRows(ctx context.Context, rec arrow.RecordBatch, pos lake.Positions, keep func(i int) bool) (arrow.RecordBatch, []int64, error) {
	b := array.NewInt64Builder(t.mem)
	defer b.Release()
	var out []int64
	for i := 0; i < int(rec.NumRows()); i++ {
		if keep(i) {
			b.Append(int64(i))
			out = append(out, pos.At(i))
		}
	}
	if b.Len() == 0 {
		return nil, nil, nil
	}
	idx := b.NewArray()
	defer idx.Release()
	sel, err := lake.Take(ctx, t.mem, rec, idx)
	return sel, out, err
}

// snapshot returns the cached version and its active files, in the order
// they were added.
func (t *Table) snapshot() (int64, []Add) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Add, 0, len(t.st.order))
	for _, p := range t.st.order {
		out = append(out, *t.st.files[p])
	}
	return t.st.version, out
}

// fileHasColumn reports whether data file a holds the top-level column
// name (files written before a column was added lack it).
func (t *Table) fileHasColumn(a Add, name string) (bool, error) {
	path, err := t.filePath(a.Path)
	if err != nil {
		return false, err
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return false, fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	defer pf.Close()
	root := pf.MetaData().Schema.Root()
	for i := 0; i < root.NumFields(); i++ {
		if root.Field(i).Name() == name {
			return true, nil
		}
	}
	return false, nil
}
