package iceberg

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// Large values. A Parquet page holds whole values, so a 200 MB text value
// makes a page of 200 MB (PostgreSQL allows 1 GB). arrow-go's readers
// refuse pages over parquet.DefaultMaxCompressedPageSize (64 MiB) and
// DefaultMaxUncompressedPageSize (256 MiB) unless told otherwise, and
// iceberg-go's scans give no way to tell them. So tidemark's own reader
// (openParquet) accepts any page the format can describe (its sizes are
// int32), and the scans below read a data file that may hold a page over
// those defaults with it instead of iceberg-go's.

// maxPageSize is the page size limit of tidemark's own Parquet reader.
const maxPageSize = math.MaxInt32

// readerProps are the reader properties of every Parquet file tidemark
// opens itself.
func readerProps(mem memory.Allocator) *parquet.ReaderProperties {
	p := parquet.NewReaderProperties(mem)
	p.MaxCompressedPageSize = maxPageSize
	p.MaxUncompressedPageSize = maxPageSize
	// A column chunk is read through a buffer of readBufferBytes (grown
	// to a page larger than that), not read whole into memory: a merge
	// reads every column of a data file it must read rows of whole, and a
	// row group's wide column is as large as the row group (16 MiB as
	// compaction writes them, more as iceberg-go's writes do).
	p.BufferedStreamEnabled = true
	p.BufferSize = readBufferBytes
	return p
}

// readBufferBytes is the read buffer of a column chunk (readerProps).
const readBufferBytes = 1 << 20

// hasBigPages reports whether a column chunk of md is larger than a page
// iceberg-go's reader accepts (no page is larger than its column chunk).
func hasBigPages(md *metadata.FileMetaData) bool {
	for i := 0; i < md.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		for j := 0; j < rg.NumColumns(); j++ {
			cc, err := rg.ColumnChunk(j)
			if err != nil {
				return true // let our own reader say what is wrong
			}
			if cc.TotalCompressedSize() > parquet.DefaultMaxCompressedPageSize ||
				cc.TotalUncompressedSize() > parquet.DefaultMaxUncompressedPageSize {
				return true
			}
		}
	}
	return false
}

// bigPageFile reports whether data file df may hold a page iceberg-go's
// reader refuses. Its footer is read once per process (footers).
func bigPageFile(fs icebergio.IO, mem memory.Allocator, df iceberggo.DataFile) (bool, error) {
	if md := footers.get(df.FilePath(), df.FileSizeBytes()); md != nil {
		return hasBigPages(md), nil
	}
	pf, err := openParquet(fs, mem, df.FilePath())
	if err != nil {
		return false, fmt.Errorf("data file %s: %w", df.FilePath(), err)
	}
	defer pf.Close()
	return hasBigPages(pf.MetaData()), nil
}

// readTasks reads the data files of tasks as reader (a scan of tbl with
// the table's current schema, and row filter f, nil for none) would: the
// files that may hold a page over arrow-go's default limits with
// tidemark's own reader (which applies the position deletes of the tasks
// and f itself), the others with iceberg-go's. fn gets batches of tbl's
// current schema; they are released when it returns.
func (t *Table) readTasks(ctx context.Context, tbl *table.Table, reader *table.Scan, tasks []table.FileScanTask, f *Filter,
	fn func(arrow.RecordBatch) error) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: table %s: %w", t.name, err))
	}
	mem := memory.DefaultAllocator
	var normal []table.FileScanTask
	var big []iceberggo.DataFile
	var deletes [][]iceberggo.DataFile
	byPath := map[string]int{}
	for _, task := range tasks {
		isBig, err := bigPageFile(fs, mem, task.File)
		if err != nil {
			return t.classify(fmt.Errorf("iceberg: table %s: %w", t.name, err))
		}
		if !isBig {
			normal = append(normal, task)
			continue
		}
		if len(task.EqualityDeleteFiles) > 0 || len(task.DeletionVectorFiles) > 0 {
			return fmt.Errorf("iceberg: table %s: data file %s holds a value too large for iceberg-go's reader and has equality deletes "+
				"or deletion vectors, which tidemark does not write", t.name, task.File.FilePath())
		}
		i, seen := byPath[task.File.FilePath()]
		if !seen { // a file split into tasks is read once, whole
			i = len(big)
			byPath[task.File.FilePath()] = i
			big = append(big, task.File)
			deletes = append(deletes, nil)
		}
		deletes[i] = append(deletes[i], task.DeleteFiles...)
	}
	if len(normal) > 0 {
		_, itr, err := reader.ReadTasks(ctx, normal)
		if err != nil {
			return t.classify(fmt.Errorf("iceberg: scan table %s: %w", t.name, err))
		}
		if err := t.drain(itr, fn); err != nil {
			return err
		}
	}
	if len(big) == 0 {
		return nil
	}
	deleted, err := readPositionDeletes(ctx, fs, mem, byPath, deletes)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: scan table %s: %w", t.name, err))
	}
	var fnErr error
	for i, df := range big {
		err := readLiveFile(ctx, fs, mem, tbl, tbl.Schema(), nil, df, deleted[i], func(rec arrow.RecordBatch, _ Positions) error {
			if f != nil {
				sel, err := f.SelectRows(ctx, mem, rec)
				if err != nil || sel == nil {
					return err
				}
				defer sel.Release()
				rec = sel
			}
			fnErr = fn(rec)
			return fnErr
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return t.classify(fmt.Errorf("iceberg: scan table %s: data file %s: %w", t.name, df.FilePath(), err))
		}
	}
	return nil
}
