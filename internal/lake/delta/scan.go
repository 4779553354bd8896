package delta

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
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
	if len(a.DeletionVector) > 0 && string(a.DeletionVector) != "null" {
		return fmt.Errorf("Delta table %s: file %s: %w: deletion vectors", t.dir, a.Path, ErrUnsupported)
	}
	rel, err := url.PathUnescape(a.Path)
	if err != nil {
		return fmt.Errorf("Delta table %s: file path %q: %w", t.dir, a.Path, err)
	}
	path := rel
	if !filepath.IsAbs(path) {
		path = filepath.Join(t.dir, filepath.FromSlash(rel))
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
		// The file's columns are the table's (the writer checked them); the
		// batch is given the table's schema, without the file's field ids.
		if int(rec.NumCols()) != sc.NumFields() {
			return fmt.Errorf("Delta table %s: file %s has %d columns, the table %d: %w (schema evolution)", t.dir, a.Path, rec.NumCols(), sc.NumFields(), ErrUnsupported)
		}
		for j, f := range sc.Fields() {
			if rec.Schema().Field(j).Name != f.Name || !arrow.TypeEqual(rec.Column(j).DataType(), f.Type) {
				return fmt.Errorf("Delta table %s: file %s: column %d is %s %s, the table's %s %s: %w (schema evolution)", t.dir, a.Path, j, rec.Schema().Field(j).Name, rec.Column(j).DataType(), f.Name, f.Type, ErrUnsupported)
			}
		}
		out := array.NewRecordBatch(sc, rec.Columns(), rec.NumRows())
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
