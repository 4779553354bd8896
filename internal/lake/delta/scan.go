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
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	defer rr.Release()
	sc := t.ArrowSchema()
	for rr.Next() {
		rec := rr.RecordBatch()
		// The batch is given the table's schema, without the file's field
		// ids; a column added after the file was written reads as null.
		cols := make([]arrow.Array, sc.NumFields())
		var nulls []arrow.Array
		for j, f := range sc.Fields() {
			idx := rec.Schema().FieldIndices(f.Name)
			if len(idx) == 0 {
				cols[j] = array.MakeArrayOfNull(t.mem, f.Type, int(rec.NumRows()))
				nulls = append(nulls, cols[j])
				continue
			}
			c := rec.Column(idx[0])
			if !arrow.TypeEqual(c.DataType(), f.Type) {
				release(nulls)
				return fmt.Errorf("Delta table %s: file %s: column %s is %s, the table's %s: %w (type widening)", t.dir, a.Path, f.Name, c.DataType(), f.Type, ErrUnsupported)
			}
			cols[j] = c
		}
		out := array.NewRecordBatch(sc, cols, rec.NumRows())
		release(nulls)
		n := uint64(rec.NumRows())
		if len(deleted) > 0 {
			kept, err := t.withoutDeleted(ctx, out, first, deleted)
			out.Release()
			if err != nil {
				return err
			}
			out = kept
		}
		first += n
		if out == nil {
			continue
		}
		err := fn(out)
		out.Release()
		if err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil {
		return fmt.Errorf("Delta table %s: file %s: %w", t.dir, a.Path, err)
	}
	return nil
}

func release(as []arrow.Array) {
	for _, a := range as {
		a.Release()
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
// position first) not in deleted (sorted), nil when none is left.
func (t *Table) withoutDeleted(ctx context.Context, rec arrow.RecordBatch, first uint64, deleted []uint64) (arrow.RecordBatch, error) {
	n := uint64(rec.NumRows())
	i, _ := slices.BinarySearch(deleted, first)
	if i == len(deleted) || deleted[i] >= first+n {
		rec.Retain()
		return rec, nil
	}
	b := array.NewInt64Builder(t.mem)
	defer b.Release()
	for p := first; p < first+n; p++ {
		if i < len(deleted) && deleted[i] == p {
			i++
			continue
		}
		b.Append(int64(p - first))
	}
	if b.Len() == 0 {
		return nil, nil
	}
	idx := b.NewArray()
	defer idx.Release()
	return lake.Take(ctx, t.mem, rec, idx)
}
