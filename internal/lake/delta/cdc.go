package delta

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"
)

// Change data files (PROTOCOL.md, "Change Data Files", "Add CDC File"):
// a commit that deletes rows of a table with the change data feed on
// writes, in _change_data/, every row it changes with a column
// _change_type: insert, delete, update_preimage, update_postimage. A
// reader of the feed takes that version's changes from its cdc files
// alone (the rows a copy-on-write merge rewrote unchanged are in its adds
// but not in the feed); versions without one (appends) from their adds.

// cdcDir is the directory of the change data files.
const cdcDir = "_change_data"

// ColChangeType is the column of a change data file that says what the
// row is.
const ColChangeType = "_change_type"

// PropKey is the table property (a JSON array of column names) a keyed
// table's writer records its key in: a row deleted and a row appended
// with the same key in one commit are an update (update_preimage and
// update_postimage), not a delete and an insert.
const PropKey = "tidemark.key"

// CDCFile is the cdc action: a change data file of a commit.
type CDCFile struct {
	Path            string   `json:"path"`
	PartitionValues valueMap `json:"partitionValues"`
	Size            int64    `json:"size"`
	DataChange      bool     `json:"dataChange"`
}

// writeChanges writes the change data file of a commit that deletes the
// rows gone and appends recs (t.mu held).
func (t *Table) writeChanges(ctx context.Context, gone, recs []arrow.RecordBatch) (*CDCFile, error) {
	var key []string
	if k := t.st.meta.Configuration[PropKey]; k != "" {
		_ = json.Unmarshal([]byte(k), &key) // no key: deletes and inserts
	}
	keyOf := func(rec arrow.RecordBatch, i int) (string, bool) {
		if len(key) == 0 {
			return "", false
		}
		parts := make([]string, len(key))
		for j, c := range key {
			idx := rec.Schema().FieldIndices(c)
			if len(idx) != 1 {
				return "", false
			}
			col := rec.Column(idx[0])
			if col.IsNull(i) {
				return "", false
			}
			parts[j] = col.ValueStr(i)
		}
		return strings.Join(parts, "\x00"), true
	}
	keys := func(batches []arrow.RecordBatch) map[string]bool {
		out := map[string]bool{}
		for _, rec := range batches {
			for i := 0; i < int(rec.NumRows()); i++ {
				if k, ok := keyOf(rec, i); ok {
					out[k] = true
				}
			}
		}
		return out
	}
	goneKeys, newKeys := keys(gone), keys(recs)

	fields := append(t.schema.Fields(), arrow.Field{Name: ColChangeType, Type: arrow.BinaryTypes.String})
	sc := arrow.NewSchema(fields, nil)
	if err := os.MkdirAll(filepath.Join(t.dir, cdcDir), 0o755); err != nil {
		return nil, err
	}
	rel := cdcDir + "/cdc-00000-" + uuid.NewString() + ".c000.snappy.parquet"
	path := filepath.Join(t.dir, filepath.FromSlash(rel))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*CDCFile, error) {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("change data file: %w", err)
	}
	w, err := pqarrow.NewFileWriter(sc, noClose{f},
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithAllocator(t.mem)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(t.mem)))
	if err != nil {
		return fail(err)
	}
	write := func(batches []arrow.RecordBatch, other map[string]bool, plain, paired string) error {
		for _, rec := range batches {
			if rec.NumRows() == 0 {
				continue
			}
			rec, err := conform(t.schema, rec)
			if err != nil {
				return err
			}
			b := array.NewStringBuilder(t.mem)
			for i := 0; i < int(rec.NumRows()); i++ {
				if k, ok := keyOf(rec, i); ok && other[k] {
					b.Append(paired)
				} else {
					b.Append(plain)
				}
			}
			ct := b.NewArray()
			b.Release()
			out := array.NewRecordBatch(sc, append(rec.Columns(), ct), rec.NumRows())
			err = w.Write(out)
			out.Release()
			ct.Release()
			rec.Release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := write(gone, newKeys, "delete", "update_preimage"); err != nil {
		w.Close()
		return fail(err)
	}
	if err := write(recs, goneKeys, "insert", "update_postimage"); err != nil {
		w.Close()
		return fail(err)
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		os.Remove(path)
		return nil, err
	}
	return &CDCFile{Path: rel, PartitionValues: valueMap{}, Size: fi.Size(), DataChange: false}, nil
}
