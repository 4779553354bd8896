package delta

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/google/uuid"

	"github.com/tidemark/tidemark/internal/lake"
)

// Commit says how an Append is committed.
type Commit struct {
	// AppID and Version, if AppID is set, are recorded in a txn action
	// committed atomically with the rows. An Append whose Version is not
	// above the last one AppID recorded commits nothing (it is a replay):
	// the idempotence a writer resuming after a crash relies on.
	AppID   string
	Version int64
	// Props are recorded in the commit's commitInfo.userMetadata (a JSON
	// object), which readers show in the table's history.
	Props map[string]string
}

// Result is what an Append did.
type Result struct {
	// Version is the version committed, or, when Committed is false, the
	// version of the snapshot whose txn already recorded Commit.Version
	// (the latest when the replay was found before writing anything, the
	// winner's when another writer committed it meanwhile).
	Version   int64
	Committed bool
}

// Append writes recs (built on ArrowSchema; any number of batches, none
// allowed) as Parquet data files, one per partition, and commits them in
// one commit with a commitInfo and the txn of c. The rows become visible
// together or not at all, to every reader and after a crash.
//
// A commit that loses the race for its version to another writer is
// retried at the next version after checking the winners for conflicts
// (PROTOCOL.md, optimistic concurrency): a blind append conflicts only
// with a change of the protocol or the metaData (the error wraps
// ErrCommitConflict; the records are stale) and with a txn of the same
// AppID (a version at or above c.Version: the append was done by the other
// writer and is a no-op; a lower one: two writers run the same
// application, an ErrCommitConflict). Data files of a commit that does not
// happen are removed.
//
// When the commit is a checkpoint version and the checkpoint cannot be
// written, or the log directory cannot be synced after the commit, the
// error says so and Result.Committed is true: the commit happened, a retry
// with the same txn is a no-op.
func (t *Table) Append(ctx context.Context, recs []arrow.RecordBatch, c Commit) (Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return Result{}, fmt.Errorf("append to Delta table %s: %w", t.dir, err)
	}
	if len(t.st.meta.PartitionColumns) > 0 && t.dayOf == "" {
		return Result{}, fmt.Errorf("append to Delta table %s: %w: partitioned by %q, which tidemark does not derive", t.dir, ErrUnsupported, t.st.meta.PartitionColumns)
	}
	if c.AppID != "" {
		if x, ok := t.st.txns[c.AppID]; ok && x.Version >= c.Version {
			return Result{Version: t.st.version}, nil
		}
	}
	adds, err := t.writeData(ctx, recs)
	if err != nil {
		return Result{}, fmt.Errorf("append to Delta table %s: %w", t.dir, err)
	}
	drop := func() {
		for _, a := range adds {
			if p, err := url.PathUnescape(a.add.Path); err == nil {
				os.Remove(filepath.Join(t.dir, filepath.FromSlash(p)))
			}
		}
	}
	var rows, bytes int64
	for _, a := range adds {
		rows += a.numRecords
		bytes += a.add.Size
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			drop()
			return Result{}, err
		}
		v := t.st.version + 1
		acts := t.appendActions(v-1, adds, c, rows, bytes)
		data, err := encodeCommit(acts)
		if err != nil {
			drop()
			return Result{}, err
		}
		err = putIfAbsent(t.dir, v, data)
		var unsynced *unsyncedError
		if errors.As(err, &unsynced) {
			// Committed: the files are the table's now, keep them.
			t.st.apply(v, acts)
			return Result{Version: v, Committed: true}, fmt.Errorf("append to Delta table %s: %w", t.dir, err)
		}
		if err == nil {
			t.st.apply(v, acts)
			return Result{Version: v, Committed: true}, t.maybeCheckpoint(v)
		}
		if !errors.Is(err, errVersionTaken) {
			drop()
			return Result{}, fmt.Errorf("append to Delta table %s: %w", t.dir, err)
		}
		if attempt == maxCommitAttempts {
			drop()
			return Result{}, fmt.Errorf("append to Delta table %s: version %d taken after %d attempts: %w", t.dir, v, attempt, ErrCommitConflict)
		}
		res, done, err := t.checkWinners(v, c)
		if err != nil || done {
			drop()
			return res, err
		}
	}
}

// checkWinners applies the commits from version v on, which other writers
// made since the snapshot, checking each for a conflict with a blind
// append of c. done is true when c's txn was committed by a winner.
func (t *Table) checkWinners(v int64, c Commit) (Result, bool, error) {
	for w := v; ; w++ {
		acts, err := readCommit(t.dir, w)
		if errors.Is(err, os.ErrNotExist) {
			return Result{}, false, nil
		}
		if err != nil {
			return Result{}, false, fmt.Errorf("append to Delta table %s: reading commit %d: %w", t.dir, w, err)
		}
		var conflict error
		dup := false
		for _, a := range acts {
			switch {
			case a.MetaData != nil:
				conflict = fmt.Errorf("append to Delta table %s: commit %d changed the table's metadata: %w", t.dir, w, ErrCommitConflict)
			case a.Protocol != nil:
				conflict = fmt.Errorf("append to Delta table %s: commit %d changed the table's protocol: %w", t.dir, w, ErrCommitConflict)
			case a.Txn != nil && c.AppID != "" && a.Txn.AppID == c.AppID:
				if a.Txn.Version >= c.Version {
					dup = true
				} else {
					conflict = fmt.Errorf("append to Delta table %s: commit %d holds a txn of %s (version %d) made concurrently: two writers of one application: %w", t.dir, w, c.AppID, a.Txn.Version, ErrCommitConflict)
				}
			}
		}
		t.st.apply(w, acts)
		if conflict != nil {
			// The table's schema may have changed: reload it.
			if st, err := loadState(context.Background(), t.dir); err == nil {
				_ = t.setState(st)
			}
			return Result{}, false, conflict
		}
		if dup {
			return Result{Version: w}, true, nil
		}
	}
}

// written is a data file written and not yet committed.
type written struct {
	add        *Add
	numRecords int64
}

// appendActions returns the actions of an append commit reading version
// read.
func (t *Table) appendActions(read int64, adds []written, c Commit, rows, bytes int64) []action {
	now := t.nowMs()
	ci := map[string]any{
		"timestamp": now,
		"operation": "WRITE",
		"operationParameters": map[string]any{
			"mode":        "Append",
			"partitionBy": mustJSON(t.st.meta.PartitionColumns),
		},
		"readVersion":   read,
		"isBlindAppend": true,
		"operationMetrics": map[string]any{
			"numFiles":       strconv.Itoa(len(adds)),
			"numOutputRows":  strconv.FormatInt(rows, 10),
			"numOutputBytes": strconv.FormatInt(bytes, 10),
		},
		"engineInfo": engineInfo,
		"txnId":      uuid.NewString(),
	}
	if len(c.Props) > 0 {
		ci["userMetadata"] = mustJSON(c.Props)
	}
	acts := []action{{CommitInfo: ci}}
	if c.AppID != "" {
		acts = append(acts, action{Txn: &Txn{AppID: c.AppID, Version: c.Version, LastUpdated: &now}})
	}
	for _, a := range adds {
		acts = append(acts, action{Add: a.add})
	}
	return acts
}

func (t *Table) nowMs() int64 { return nowMs() }

// maybeCheckpoint writes the checkpoint of version v when v is a multiple
// of the checkpoint interval.
func (t *Table) maybeCheckpoint(v int64) error {
	n := DefaultCheckpointInterval
	if s := t.st.meta.Configuration[PropCheckpointInterval]; s != "" {
		if i, err := strconv.Atoi(s); err == nil && i > 0 {
			n = i
		}
	}
	if v == 0 || v%int64(n) != 0 {
		return nil
	}
	if err := writeCheckpoint(t.dir, t.st, t.mem); err != nil {
		return fmt.Errorf("Delta table %s: version %d is committed, but its checkpoint failed: %w", t.dir, v, err)
	}
	return nil
}

// Checkpoint writes a checkpoint of the cached snapshot now.
func (t *Table) Checkpoint() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return writeCheckpoint(t.dir, t.st, t.mem)
}

// partWriter is the data file being written for one partition.
type partWriter struct {
	f     *os.File
	w     *pqarrow.FileWriter
	rel   string  // path relative to the table directory, slash-separated
	value *string // the partition value, nil for null
	stats *fileStats
}

// hivePartitionNull is the directory name of a null partition value.
const hivePartitionNull = "__HIVE_DEFAULT_PARTITION__"

// writeData writes recs as Parquet files, one per partition value.
func (t *Table) writeData(ctx context.Context, recs []arrow.RecordBatch) ([]written, error) {
	sc := t.schema
	parts := map[string]*partWriter{}
	var order []string
	fail := func(err error) ([]written, error) {
		for _, p := range parts {
			if p.w != nil {
				p.w.Close()
			}
			p.f.Close()
			os.Remove(filepath.Join(t.dir, filepath.FromSlash(p.rel)))
		}
		return nil, err
	}
	open := func(key string, value *string) (*partWriter, error) {
		if p, ok := parts[key]; ok {
			return p, nil
		}
		name := fmt.Sprintf("part-%05d-%s.c000.snappy.parquet", len(parts), uuid.NewString())
		rel := name
		if t.dayOf != "" {
			dirName := DayColumn(t.dayOf) + "=" + hivePartitionNull
			if value != nil {
				dirName = DayColumn(t.dayOf) + "=" + *value
			}
			rel = dirName + "/" + name
			if err := os.MkdirAll(filepath.Join(t.dir, dirName), 0o755); err != nil {
				return nil, err
			}
		}
		f, err := os.OpenFile(filepath.Join(t.dir, filepath.FromSlash(rel)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, err
		}
		p := &partWriter{f: f, rel: rel, value: value, stats: newFileStats(sc)}
		parts[key] = p
		order = append(order, key)
		w, err := pqarrow.NewFileWriter(sc, noClose{f},
			parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithAllocator(t.mem)),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(t.mem)))
		if err != nil {
			return nil, err
		}
		p.w = w
		return p, nil
	}
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if rec.NumRows() == 0 {
			continue
		}
		rec, err := conform(sc, rec)
		if err != nil {
			return fail(err)
		}
		groups, err := t.partitionRows(rec)
		if err != nil {
			rec.Release()
			return fail(err)
		}
		for _, g := range groups {
			p, err := open(g.key, g.value)
			if err != nil {
				rec.Release()
				return fail(err)
			}
			part := rec
			if g.idx != nil {
				part, err = lake.Take(ctx, t.mem, rec, g.idx)
				g.idx.Release()
				if err != nil {
					rec.Release()
					return fail(err)
				}
			}
			p.stats.add(part)
			err = p.w.Write(part)
			if g.idx != nil {
				part.Release()
			}
			if err != nil {
				rec.Release()
				return fail(err)
			}
		}
		rec.Release()
	}
	var out []written
	dirs := map[string]bool{}
	for _, key := range order {
		p := parts[key]
		if err := p.w.Close(); err != nil {
			return fail(err)
		}
		p.w = nil
		if err := p.f.Sync(); err != nil {
			return fail(err)
		}
		fi, err := p.f.Stat()
		if err != nil {
			return fail(err)
		}
		stats, err := p.stats.json()
		if err != nil {
			return fail(err)
		}
		pv := valueMap{}
		if t.dayOf != "" {
			pv[DayColumn(t.dayOf)] = p.value
		}
		out = append(out, written{numRecords: p.stats.rows, add: &Add{
			Path:             (&url.URL{Path: p.rel}).EscapedPath(),
			PartitionValues:  pv,
			Size:             fi.Size(),
			ModificationTime: fi.ModTime().UnixMilli(),
			DataChange:       true,
			Stats:            stats,
		}})
		dirs[filepath.Dir(filepath.Join(t.dir, filepath.FromSlash(p.rel)))] = true
	}
	for _, p := range parts {
		p.f.Close()
	}
	dirs[t.dir] = true
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

// conform checks that rec holds the table's columns, in order, with their
// types, and no null in a non-nullable column, and returns it on the
// table's schema (the caller releases it).
func conform(sc *arrow.Schema, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	if int(rec.NumCols()) != sc.NumFields() {
		return nil, fmt.Errorf("records have %d columns, the table %d (%s)", rec.NumCols(), sc.NumFields(), sc)
	}
	for j, f := range sc.Fields() {
		rf := rec.Schema().Field(j)
		if rf.Name != f.Name || !arrow.TypeEqual(rf.Type, f.Type) {
			return nil, fmt.Errorf("records' column %d is %s %s, the table's is %s %s", j, rf.Name, rf.Type, f.Name, f.Type)
		}
		if !f.Nullable && rec.Column(j).NullN() > 0 {
			return nil, fmt.Errorf("column %s is not nullable but %d records hold null", f.Name, rec.Column(j).NullN())
		}
	}
	return array.NewRecordBatch(sc, rec.Columns(), rec.NumRows()), nil
}

// rowGroup is the rows of a batch in one partition (idx nil: all).
type rowGroup struct {
	key   string
	value *string
	idx   arrow.Array
}

// partitionRows groups rec's rows by the UTC day of the day partition
// column.
func (t *Table) partitionRows(rec arrow.RecordBatch) ([]rowGroup, error) {
	if t.dayOf == "" {
		return []rowGroup{{key: ""}}, nil
	}
	col := rec.Column(rec.Schema().FieldIndices(t.dayOf)[0])
	day := func(i int) (int32, bool) {
		if col.IsNull(i) {
			return 0, false
		}
		switch a := col.(type) {
		case *array.Timestamp:
			us := int64(a.Value(i))
			d := us / 86_400_000_000
			if us < 0 && us%86_400_000_000 != 0 {
				d--
			}
			return int32(d), true
		case *array.Date32:
			return int32(a.Value(i)), true
		}
		return 0, false
	}
	type grp struct {
		value *string
		rows  []int64
	}
	byKey := map[string]*grp{}
	var keys []string
	for i := 0; i < col.Len(); i++ {
		key := hivePartitionNull
		var value *string
		if d, ok := day(i); ok {
			s := formatDate(d)
			key, value = s, &s
		}
		g, ok := byKey[key]
		if !ok {
			g = &grp{value: value}
			byKey[key] = g
			keys = append(keys, key)
		}
		g.rows = append(g.rows, int64(i))
	}
	if len(keys) == 1 {
		return []rowGroup{{key: keys[0], value: byKey[keys[0]].value}}, nil
	}
	out := make([]rowGroup, 0, len(keys))
	for _, k := range keys {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues(byKey[k].rows, nil)
		out = append(out, rowGroup{key: k, value: byKey[k].value, idx: b.NewArray()})
		b.Release()
	}
	return out, nil
}
