package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Checkpoints (PROTOCOL.md, "Checkpoints", V1 spec, classic naming): a
// Parquet file `%020d.checkpoint.parquet` holding the whole state at its
// version, one action a row, each in its column (txn, add, remove,
// metaData, protocol); then `_last_checkpoint` names it.

func strMap() arrow.DataType { return arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String) }

func strList() arrow.DataType { return arrow.ListOf(arrow.BinaryTypes.String) }

func nf(name string, t arrow.DataType) arrow.Field {
	return arrow.Field{Name: name, Type: t, Nullable: true}
}

// checkpointSchema is the checkpoint schema of the protocol's appendix
// (without the optional stats_parsed / partitionValues_parsed).
var checkpointSchema = arrow.NewSchema([]arrow.Field{
	nf("txn", arrow.StructOf(
		nf("appId", arrow.BinaryTypes.String),
		nf("version", arrow.PrimitiveTypes.Int64),
		nf("lastUpdated", arrow.PrimitiveTypes.Int64))),
	nf("add", arrow.StructOf(
		nf("path", arrow.BinaryTypes.String),
		nf("partitionValues", strMap()),
		nf("size", arrow.PrimitiveTypes.Int64),
		nf("modificationTime", arrow.PrimitiveTypes.Int64),
		nf("dataChange", arrow.FixedWidthTypes.Boolean),
		nf("stats", arrow.BinaryTypes.String),
		nf("tags", strMap()),
		nf("deletionVector", arrow.StructOf(
			nf("storageType", arrow.BinaryTypes.String),
			nf("pathOrInlineDv", arrow.BinaryTypes.String),
			nf("offset", arrow.PrimitiveTypes.Int32),
			nf("sizeInBytes", arrow.PrimitiveTypes.Int32),
			nf("cardinality", arrow.PrimitiveTypes.Int64))),
		nf("baseRowId", arrow.PrimitiveTypes.Int64),
		nf("defaultRowCommitVersion", arrow.PrimitiveTypes.Int64))),
	nf("remove", arrow.StructOf(
		nf("path", arrow.BinaryTypes.String),
		nf("deletionTimestamp", arrow.PrimitiveTypes.Int64),
		nf("dataChange", arrow.FixedWidthTypes.Boolean),
		nf("extendedFileMetadata", arrow.FixedWidthTypes.Boolean),
		nf("partitionValues", strMap()),
		nf("size", arrow.PrimitiveTypes.Int64))),
	nf("metaData", arrow.StructOf(
		nf("id", arrow.BinaryTypes.String),
		nf("name", arrow.BinaryTypes.String),
		nf("description", arrow.BinaryTypes.String),
		nf("format", arrow.StructOf(
			nf("provider", arrow.BinaryTypes.String),
			nf("options", strMap()))),
		nf("schemaString", arrow.BinaryTypes.String),
		nf("partitionColumns", strList()),
		nf("configuration", strMap()),
		nf("createdTime", arrow.PrimitiveTypes.Int64))),
	nf("protocol", arrow.StructOf(
		nf("minReaderVersion", arrow.PrimitiveTypes.Int32),
		nf("minWriterVersion", arrow.PrimitiveTypes.Int32),
		nf("readerFeatures", strList()),
		nf("writerFeatures", strList()))),
}, nil)

// kv is one entry of a map in the JSON form arrow-go builds maps from.
type kv struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

func kvs(m map[string]*string) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}

func kvsOf(m map[string]string) []kv {
	p := make(map[string]*string, len(m))
	for k, v := range m {
		p[k] = &v
	}
	return kvs(p)
}

// checkpointRows returns the rows of a checkpoint of s, as JSON objects
// over checkpointSchema.
func checkpointRows(s *state) ([]map[string]any, int) {
	var rows []map[string]any
	p := s.protocol
	proto := map[string]any{"minReaderVersion": p.MinReaderVersion, "minWriterVersion": p.MinWriterVersion}
	// Reader version 3 / writer version 7 need the lists, not null ones.
	if p.MinReaderVersion >= 3 {
		proto["readerFeatures"] = append([]string{}, p.ReaderFeatures...)
	}
	if p.MinWriterVersion >= 7 {
		proto["writerFeatures"] = append([]string{}, p.WriterFeatures...)
	}
	rows = append(rows, map[string]any{"protocol": proto})
	m := s.meta
	meta := map[string]any{
		"id":               m.ID,
		"format":           map[string]any{"provider": m.Format.Provider, "options": kvsOf(m.Format.Options)},
		"schemaString":     m.SchemaString,
		"partitionColumns": append([]string{}, m.PartitionColumns...),
		"configuration":    kvsOf(m.Configuration),
	}
	if m.Name != nil {
		meta["name"] = *m.Name
	}
	if m.Description != nil {
		meta["description"] = *m.Description
	}
	if m.CreatedTime != nil {
		meta["createdTime"] = *m.CreatedTime
	}
	rows = append(rows, map[string]any{"metaData": meta})
	apps := make([]string, 0, len(s.txns))
	for a := range s.txns {
		apps = append(apps, a)
	}
	slices.Sort(apps)
	for _, a := range apps {
		t := s.txns[a]
		txn := map[string]any{"appId": t.AppID, "version": t.Version}
		if t.LastUpdated != nil {
			txn["lastUpdated"] = *t.LastUpdated
		}
		rows = append(rows, map[string]any{"txn": txn})
	}
	for _, path := range s.order {
		f := s.files[path]
		add := map[string]any{
			"path":             f.Path,
			"partitionValues":  kvs(f.PartitionValues),
			"size":             f.Size,
			"modificationTime": f.ModificationTime,
			"dataChange":       f.DataChange,
		}
		if f.Stats != "" {
			add["stats"] = f.Stats
		}
		if len(f.Tags) > 0 {
			add["tags"] = kvsOf(f.Tags)
		}
		if dv, err := parseDV(f.DeletionVector); err == nil && dv != nil {
			d := map[string]any{"storageType": dv.StorageType, "pathOrInlineDv": dv.PathOrInlineDv, "sizeInBytes": dv.SizeInBytes, "cardinality": dv.Cardinality}
			if dv.Offset != nil {
				d["offset"] = *dv.Offset
			}
			add["deletionVector"] = d
		}
		if f.BaseRowID != nil {
			add["baseRowId"] = *f.BaseRowID
		}
		if f.DefaultRowCommit != nil {
			add["defaultRowCommitVersion"] = *f.DefaultRowCommit
		}
		rows = append(rows, map[string]any{"add": add})
	}
	paths := make([]string, 0, len(s.tombstones))
	for p := range s.tombstones {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		r := s.tombstones[p]
		rm := map[string]any{"path": r.Path, "dataChange": r.DataChange, "extendedFileMetadata": r.ExtendedFileMetadata}
		if r.DeletionTimestamp != nil {
			rm["deletionTimestamp"] = *r.DeletionTimestamp
		}
		if r.PartitionValues != nil {
			rm["partitionValues"] = kvs(r.PartitionValues)
		}
		if r.Size != nil {
			rm["size"] = *r.Size
		}
		rows = append(rows, map[string]any{"remove": rm})
	}
	return rows, len(s.files)
}

// lastCheckpoint is the _last_checkpoint file.
type lastCheckpoint struct {
	Version       int64 `json:"version"`
	Size          int64 `json:"size"`
	SizeInBytes   int64 `json:"sizeInBytes"`
	NumOfAddFiles int64 `json:"numOfAddFiles"`
}

// writeCheckpoint writes the checkpoint of s (at s.version) and points
// _last_checkpoint at it. Both are written to a temporary file renamed
// into place: a reader sees a whole file or none. Two writers writing the
// checkpoint of the same version write the same state.
func writeCheckpoint(dir string, s *state, mem memory.Allocator) error {
	return writeCheckpointFile(dir, s, mem, true)
}

// writeCheckpointFile writes the checkpoint of s, and points
// _last_checkpoint at it when last is set (an older version's checkpoint,
// written for log cleanup, leaves it alone).
func writeCheckpointFile(dir string, s *state, mem memory.Allocator, last bool) error {
	rows, nAdds := checkpointRows(s)
	js, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	rec, _, err := array.RecordFromJSON(mem, checkpointSchema, bytes.NewReader(js))
	if err != nil {
		return fmt.Errorf("checkpoint %d: building rows: %w", s.version, err)
	}
	defer rec.Release()
	ldir := filepath.Join(dir, logDir)
	final := filepath.Join(ldir, checkpointName(s.version))
	size, err := writeFileAtomic(final, func(f io.WriteCloser) error {
		w, err := pqarrow.NewFileWriter(checkpointSchema, f,
			parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy)),
			pqarrow.DefaultWriterProps())
		if err != nil {
			return err
		}
		if err := w.Write(rec); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	})
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", s.version, err)
	}
	if !last {
		return nil
	}
	lc, _ := json.Marshal(lastCheckpoint{Version: s.version, Size: int64(len(rows)), SizeInBytes: size, NumOfAddFiles: int64(nAdds)})
	if _, err := writeFileAtomic(filepath.Join(ldir, "_last_checkpoint"), func(f io.WriteCloser) error {
		_, err := f.Write(lc)
		return err
	}); err != nil {
		return fmt.Errorf("checkpoint %d: _last_checkpoint: %w", s.version, err)
	}
	return nil
}

// readCheckpoint reads the state of the checkpoint of version v.
func readCheckpoint(ctx context.Context, dir string, v int64) (*state, error) {
	pf, err := file.OpenParquetFile(filepath.Join(dir, logDir, checkpointName(v)), false)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, err
	}
	defer rr.Release()
	var acts []action
	for rr.Next() {
		var buf bytes.Buffer
		if err := array.RecordToJSON(rr.RecordBatch(), &buf); err != nil {
			return nil, err
		}
		got, err := parseCommit(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d: %w", v, err)
		}
		acts = append(acts, got...)
	}
	if err := rr.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint %d: %w", v, err)
	}
	s := newState()
	s.apply(v, acts)
	if s.protocol == nil || s.meta == nil {
		return nil, fmt.Errorf("checkpoint %d has no protocol or metaData", v)
	}
	return s, nil
}
