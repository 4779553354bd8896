package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/lake"
)

// This file holds what silver needs beyond bronze's append-only writes:
// keyed tables (identifier fields, bucket partitioning, sort order), reading
// the rows appended between two snapshots, filtered scans, and a merge
// commit that deletes and appends in one atomic step.

// ErrCommitConflict: another writer committed to the table between the
// moment a merge read it and its commit. The merge's inputs are stale; the
// caller must reload and recompute. Nothing was applied.
// It is fault.ErrCommitConflict, so the error keeps its name
// ([commit_conflict]) and its class (transient) up to the exit code.
var ErrCommitConflict = lake.ErrCommitConflict

// ErrSnapshotNotFound: a snapshot id is not in the table's history (it
// never was, or it was expired).
var ErrSnapshotNotFound = lake.ErrSnapshotNotFound

// NoSnapshot stands for "before the first snapshot" where a snapshot id is
// expected. Iceberg snapshot ids are never negative.
const NoSnapshot = lake.NoSnapshot

// Delete modes of a keyed table (the Iceberg property write.delete.mode).
const (
	// MergeOnRead writes position delete files: a merge rewrites nothing,
	// readers apply the deletes until compaction folds them in.
	MergeOnRead = lake.MergeOnRead
	// CopyOnWrite rewrites every data file that holds a deleted row.
	CopyOnWrite = lake.CopyOnWrite
)

// KeyedTableSpec describes a table with a primary key.
type KeyedTableSpec struct {
	// Schema is the table's columns. Key columns must be required.
	Schema *iceberggo.Schema
	// Key names the key columns, in key order. They become the schema's
	// identifier fields (unless a key column is a floating-point type, which
	// Iceberg does not allow as an identifier) and the sort order.
	Key []string
	// Buckets > 0 partitions the table by bucket(Buckets, Key[0]), when
	// Iceberg can bucket that column's type; otherwise the table is
	// unpartitioned.
	Buckets int
	// DeleteMode is MergeOnRead (the default when empty) or CopyOnWrite.
	DeleteMode string
	// Properties are further table properties (see TableSpec.Properties).
	Properties map[string]string
	// PlaceAs, if set, names the identifier whose directory the table's
	// files go to (lake.TableSpec.PlaceAs).
	PlaceAs []string
}

// CreateKeyedTable creates the table ident (and its namespace) laid out for
// upserts by key: identifier fields, bucket partition on the first key
// column, sort order by key, and the delete mode. If the table exists the
// error wraps ErrTableExists and nothing is changed.
func (c *Catalog) CreateKeyedTable(ctx context.Context, ident []string, spec KeyedTableSpec) (*Table, error) {
	name := joinIdent(ident)
	if err := validateTableIdent(ident); err != nil {
		return nil, fmt.Errorf("iceberg: create table %q: %w", ident, err)
	}
	if spec.Schema == nil || len(spec.Key) == 0 {
		return nil, fmt.Errorf("iceberg: create table %s: a keyed table needs a schema and a key", name)
	}
	mode := spec.DeleteMode
	if mode == "" {
		mode = MergeOnRead
	}
	if mode != MergeOnRead && mode != CopyOnWrite {
		return nil, fmt.Errorf("iceberg: create table %s: delete mode %q: want %s or %s", name, mode, MergeOnRead, CopyOnWrite)
	}

	var ids []int
	identifiers := true
	var sortFields []table.SortField
	for _, k := range spec.Key {
		f, ok := spec.Schema.FindFieldByName(k)
		if !ok {
			return nil, fmt.Errorf("iceberg: create table %s: key column %q is not in the schema", name, k)
		}
		if !f.Required {
			return nil, fmt.Errorf("iceberg: create table %s: key column %q must be required", name, k)
		}
		switch f.Type.(type) {
		case iceberggo.Float32Type, iceberggo.Float64Type:
			identifiers = false
		}
		ids = append(ids, f.ID)
		sortFields = append(sortFields, table.SortField{SourceIDs: []int{f.ID}, Transform: iceberggo.IdentityTransform{},
			Direction: table.SortASC, NullOrder: table.NullsFirst})
	}
	sch := spec.Schema
	if identifiers {
		sch = iceberggo.NewSchemaWithIdentifiers(spec.Schema.ID, ids, spec.Schema.Fields()...)
	}
	if err := c.EnsureNamespace(ctx, ident[:len(ident)-1]); err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: %w", name, err)
	}

	props := iceberggo.Properties{}
	maps.Copy(props, defaultTableProps)
	maps.Copy(props, spec.Properties)
	props[table.WriteDeleteModeKey] = mode
	props["write.update.mode"] = mode
	props["write.merge.mode"] = mode

	loc, err := c.tableLocation(ident, spec.PlaceAs)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: %w", name, err)
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props), catalog.WithLocation(loc)}
	if spec.Buckets > 0 && bucketable(sch, spec.Key[0]) {
		ps, err := iceberggo.NewPartitionSpecOpts(iceberggo.AddPartitionFieldByName(
			spec.Key[0], partitionFieldName(spec.Key[0], "bucket"), iceberggo.BucketTransform{NumBuckets: spec.Buckets}, sch, nil))
		if err != nil {
			return nil, fmt.Errorf("iceberg: create table %s: partition by bucket(%d, %s): %w", name, spec.Buckets, spec.Key[0], err)
		}
		opts = append(opts, catalog.WithPartitionSpec(&ps))
	}
	so, err := table.NewSortOrder(1, sortFields)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: sort order: %w", name, err)
	}
	opts = append(opts, catalog.WithSortOrder(so))

	// SQLite can answer a concurrent writer SQLITE_BUSY at once (see
	// retryBusy): the row was not written, so creating again is safe.
	var tbl *table.Table
	err = retryBusy(ctx, func() (err error) {
		tbl, err = c.cat.CreateTable(ctx, table.Identifier(slices.Clone(ident)), sch, opts...)
		return err
	})
	if err != nil {
		return nil, neutral(fmt.Errorf("iceberg: create table %s: %w", name, err))
	}
	return c.newTable(ident, tbl)
}

// bucketable reports whether Iceberg's bucket transform applies to the
// column's type.
func bucketable(sch *iceberggo.Schema, col string) bool {
	f, ok := sch.FindFieldByName(col)
	if !ok {
		return false
	}
	return iceberggo.BucketTransform{NumBuckets: 2}.CanTransform(f.Type)
}

// RenameTable moves the table from to the identifier to (creating to's
// namespace if needed) in one catalog transaction, and returns it. Its data
// and metadata stay where they are. If to exists the error wraps
// ErrTableExists; if from does not, ErrNoSuchTable.
func (c *Catalog) RenameTable(ctx context.Context, from, to []string) (*Table, error) {
	if err := validateTableIdent(from); err != nil {
		return nil, fmt.Errorf("iceberg: rename table %q: %w", from, err)
	}
	if err := validateTableIdent(to); err != nil {
		return nil, fmt.Errorf("iceberg: rename table to %q: %w", to, err)
	}
	if err := c.EnsureNamespace(ctx, to[:len(to)-1]); err != nil {
		return nil, fmt.Errorf("iceberg: rename table %s: %w", joinIdent(from), err)
	}
	// SQLite's immediate SQLITE_BUSY beside a concurrent commit: nothing
	// was renamed, so renaming again is safe (retryBusy).
	var tbl *table.Table
	err := retryBusy(ctx, func() (err error) {
		tbl, err = c.cat.RenameTable(ctx, table.Identifier(slices.Clone(from)), table.Identifier(slices.Clone(to)))
		return err
	})
	if err != nil {
		err = fmt.Errorf("iceberg: rename table %s to %s: %w", joinIdent(from), joinIdent(to), err)
		if c.db == nil && strings.Contains(err.Error(), "AlreadyExistsException") {
			// iceberg-go's REST client (v0.7.0) does not map the REST
			// catalog's 409 on a rename to catalog.ErrTableAlreadyExists.
			return nil, &lakeError{err: err, is: lake.ErrTableExists}
		}
		return nil, neutral(err)
	}
	return c.newTable(to, tbl)
}

// Properties returns the table's properties. The map is the caller's.
func (t *Table) Properties() map[string]string {
	return maps.Clone(map[string]string(t.current().Properties()))
}

// SnapshotInfo describes one snapshot of a table (lake.Snapshot).
type SnapshotInfo = lake.Snapshot

func snapshotInfo(s *table.Snapshot) SnapshotInfo {
	si := SnapshotInfo{ID: s.SnapshotID, ParentID: NoSnapshot, TimestampMs: s.TimestampMs, SequenceNumber: s.SequenceNumber,
		Props: map[string]string{}}
	if s.ParentSnapshotID != nil {
		si.ParentID = *s.ParentSnapshotID
	}
	if s.Summary != nil {
		si.Operation = string(s.Summary.Operation)
		maps.Copy(si.Props, s.Summary.Properties)
		si.AddedRecords, _ = strconv.ParseInt(s.Summary.Properties["added-records"], 10, 64)
		si.AddedBytes, _ = strconv.ParseInt(s.Summary.Properties["added-files-size"], 10, 64)
	}
	return si
}

// CurrentSnapshot returns the table's current snapshot, or false if the
// table has none.
func (t *Table) CurrentSnapshot() (SnapshotInfo, bool) {
	s := t.current().CurrentSnapshot()
	if s == nil {
		return SnapshotInfo{}, false
	}
	return snapshotInfo(s), true
}

// Snapshot returns the snapshot id of the table's history. The error wraps
// ErrSnapshotNotFound if the metadata does not hold it.
func (t *Table) Snapshot(id int64) (SnapshotInfo, error) {
	s := t.current().Metadata().SnapshotByID(id)
	if s == nil {
		return SnapshotInfo{}, fmt.Errorf("iceberg: table %s: snapshot %d: %w", t.name, id, ErrSnapshotNotFound)
	}
	return snapshotInfo(s), nil
}

// History returns the snapshots that follow after (exclusive; NoSnapshot:
// from the first) up to and including to, oldest first, along to's parent
// chain. It is empty when after == to. The error wraps ErrSnapshotNotFound
// when to is unknown, or when after is not an ancestor of to (the table
// was replaced, or the snapshots between were expired).
func (t *Table) History(after, to int64) ([]SnapshotInfo, error) {
	meta := t.current().Metadata()
	if after == to {
		return nil, nil
	}
	lookup := snapshotLookup(meta) // appended.go
	if lookup(to) == nil {
		return nil, fmt.Errorf("iceberg: table %s: snapshot %d: %w", t.name, to, ErrSnapshotNotFound)
	}
	var chain []table.Snapshot
	if after == NoSnapshot {
		chain = table.AncestorsOf(to, lookup)
		if n := len(chain); n > 0 && chain[n-1].ParentSnapshotID != nil {
			return nil, fmt.Errorf("iceberg: table %s: the history before snapshot %d was expired: %w",
				t.name, chain[n-1].SnapshotID, ErrSnapshotNotFound)
		}
	} else {
		var ok bool
		chain, ok = table.AncestorsBetween(to, after, lookup)
		if !ok {
			return nil, fmt.Errorf("iceberg: table %s: snapshot %d is not an ancestor of snapshot %d (expired, or the table was replaced): %w",
				t.name, after, to, ErrSnapshotNotFound)
		}
	}
	out := make([]SnapshotInfo, len(chain))
	for i := range chain {
		out[len(chain)-1-i] = snapshotInfo(&chain[i])
	}
	return out, nil
}

// ScanAppended calls fn with the rows that the append snapshots after
// `after` (exclusive; NoSnapshot: from the first) up to and including to
// added, read with the table's current schema (columns added since read as
// null). Snapshots that are not appends (compaction, deletes) are skipped:
// this is for append-only tables. Batches are released when fn returns;
// Retain to keep one. Row order within a data file is kept; files come in
// no particular order.
func (t *Table) ScanAppended(ctx context.Context, after, to int64, fn func(arrow.RecordBatch) error) error {
	return t.ScanAppendedWhere(ctx, after, to, nil, fn)
}

// scanBatch reads Parquet in batches of 8192 rows rather than iceberg-go's
// 131072: a batch of wide rows is built by doubling buffers, and 128k rows
// of 1 KB made every read allocate (and hold) hundreds of MiB at once.
var scanBatch = table.WithOptions(iceberggo.Properties{table.ParquetBatchSizeKey: "8192"})

func (t *Table) drain(itr func(func(arrow.RecordBatch, error) bool), fn func(arrow.RecordBatch) error) error {
	for rec, err := range itr {
		if err != nil {
			return t.classify(fmt.Errorf("iceberg: scan table %s: %w", t.name, err))
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// ScanWhere is Scan restricted to the rows matching f (nil: all rows).
// Data files whose partition or column statistics rule f out are not read.
func (t *Table) ScanWhere(ctx context.Context, f *Filter, fn func(arrow.RecordBatch) error) error {
	return t.scanWhere(ctx, t.current(), nil, f, fn)
}

// ScanSnapshotWhere is ScanWhere as of snapshot id, an earlier snapshot
// of the table: the rows live in it. The error wraps ErrSnapshotNotFound
// when the table's history no longer holds it (expired).
func (t *Table) ScanSnapshotWhere(ctx context.Context, id int64, f *Filter, fn func(arrow.RecordBatch) error) error {
	tbl := t.current()
	if tbl.Metadata().SnapshotByID(id) == nil {
		return fmt.Errorf("iceberg: scan table %s as of snapshot %d: %w", t.name, id, ErrSnapshotNotFound)
	}
	return t.scanWhere(ctx, tbl, []table.ScanOption{table.WithSnapshotID(id)}, f, fn)
}

func (t *Table) scanWhere(ctx context.Context, tbl *table.Table, at []table.ScanOption, f *Filter, fn func(arrow.RecordBatch) error) error {
	opts := append([]table.ScanOption{scanBatch}, at...)
	var plan *table.Scan // nil: the scan plans with the row filter
	if f != nil {
		expr, err := filterExpr(f, tbl.Schema())
		if err != nil {
			return fmt.Errorf("iceberg: scan table %s: %w", t.name, err)
		}
		opts = append(opts, table.WithRowFilter(expr))
		pexpr, exact, err := filterPlanExpr(f, tbl)
		if err != nil {
			return fmt.Errorf("iceberg: scan table %s: %w", t.name, err)
		}
		if !exact {
			plan = tbl.Scan(append([]table.ScanOption{scanBatch, table.WithRowFilter(pexpr)}, at...)...)
			defer plan.Close()
		}
	}
	scan := tbl.Scan(opts...)
	defer scan.Close()
	if plan == nil {
		plan = scan
	}
	tasks, err := plan.PlanFiles(ctx)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: scan table %s: %w", t.name, err))
	}
	return t.readTasks(ctx, tbl, scan, tasks, f, fn)
}

// Merge deletes the rows matching del (nil: none) and appends recs, as one
// commit whose snapshot summaries carry props: readers see the table before
// or after, never between. How the rows are deleted follows the table's
// write.delete.mode: position delete files (merge-on-read) or rewritten data
// files (copy-on-write). With a filter, the commit holds two snapshots (a
// delete, then an append) made current together; with no rows to append,
// only the delete; with neither, an empty append that records props.
//
// Records follow the rules of Append. Merge does not retry a commit that
// lost a race: its inputs were read from the old state, so the error wraps
// ErrCommitConflict and the caller must recompute. A commit whose outcome
// is unknown is resolved by reloading the table, as Append does. On
// success t reflects the new snapshot.
func (t *Table) Merge(ctx context.Context, del *Filter, recs []arrow.RecordBatch, props map[string]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.mergeOnce(ctx, nil, nil, del, recs, props)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: merge into table %s (%d rows appended): %w", t.name, countRows(recs), err))
	}
	return nil
}

// mergeOnce commits one merge; pre are files a staged merge wrote
// (stage.go), committed in the row delta with byPos's deletes and recs.
func (t *Table) mergeOnce(ctx context.Context, byPos *rowDeletes, pre *staged, del *Filter, recs []arrow.RecordBatch, props map[string]string) error {
	if err := byPos.check(t); err != nil {
		return err
	}
	sc := t.arrowSchema
	if len(recs) > 0 {
		sc = recs[0].Schema()
		for i, rec := range recs[1:] {
			if !rec.Schema().Equal(sc) {
				return fmt.Errorf("record %d has a different schema than record 0", i+1)
			}
		}
	}
	if err := checkWriteSchema(t.tbl.Schema(), sc); err != nil {
		return err
	}
	tx := t.tbl.NewTransaction()
	// Compare-and-swap: iceberg-go would otherwise replay the commit on a
	// newer head, applying changes computed from rows another writer has
	// since replaced.
	if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
		return err
	}
	if del != nil && t.tbl.CurrentSnapshot() != nil {
		expr, err := filterExpr(del, t.tbl.Schema())
		if err != nil {
			return err
		}
		// A file holding a value too large for iceberg-go's reader is
		// rewritten by tidemark's reader and writer instead (deleteOwn).
		done, err := t.deleteOwn(ctx, tx, del, expr, props)
		if err != nil {
			return err
		}
		if !done {
			if err := tx.Delete(ctx, expr, iceberggo.Properties(maps.Clone(props))); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
		}
	}
	if (byPos != nil && len(byPos.rows) > 0) || !pre.empty() {
		// The rows deleted by position and the rows appended: one snapshot.
		if err := t.rowDelta(ctx, tx, byPos, pre, sc, recs, props); err != nil {
			return err
		}
	} else if del == nil && len(recs) > 0 {
		// Appends only (a silver build's pass, a merge that deletes
		// nothing): through the own writer where it writes this table
		// (stageAppend), which writes each bucket's rows as they are
		// rather than copying every row into its partition first.
		if own, ok := withSchema(t.arrowSchema, recs); ok {
			err := t.stageAppend(ctx, tx, t.arrowSchema, own, props)
			for _, r := range own {
				r.Release()
			}
			if err != nil {
				return fmt.Errorf("append: %w", err)
			}
		} else if err := t.stageAppend(ctx, tx, sc, recs, props); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	} else if len(recs) > 0 || del == nil || t.tbl.CurrentSnapshot() == nil {
		parts := writeSlices(recs)
		defer releaseAll(parts)
		// Through the own writer where it writes this table, as a row
		// delta does (rowDelta): iceberg-go's copies a large value several
		// times over (dictionary, statistics, compression).
		own := false
		if countRows(parts) > 0 {
			files, ok, err := t.writeOwn(ctx, parts)
			if err != nil {
				return fmt.Errorf("append: %w", err)
			}
			if ok {
				if err := tx.AddDataFiles(ctx, files, iceberggo.Properties(maps.Clone(props))); err != nil {
					return fmt.Errorf("append: %w", err)
				}
				own = true
			}
		}
		if !own {
			rdr, err := array.NewRecordReader(sc, parts)
			if err != nil {
				return err
			}
			err = tx.Append(ctx, rdr, iceberggo.Properties(maps.Clone(props)))
			rdr.Release()
			if err != nil {
				return fmt.Errorf("append: %w", err)
			}
		}
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return err
	}
	snap := staged.CurrentSnapshot()
	if snap == nil {
		return errors.New("merge staged no snapshot")
	}
	if cur := t.tbl.CurrentSnapshot(); cur != nil && snap.SnapshotID == cur.SnapshotID {
		// The delete matched nothing and there was nothing to append:
		// record props with an empty append so the cursor still moves.
		rdr, err := array.NewRecordReader(sc, nil)
		if err != nil {
			return err
		}
		err = tx.Append(ctx, rdr, iceberggo.Properties(maps.Clone(props)))
		rdr.Release()
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		if staged, err = tx.StagedTable(); err != nil {
			return err
		}
		snap = staged.CurrentSnapshot()
	}
	// Inside a merge (silver): files written, delete planned, not committed.
	failpoint.Inject("lake-merge-before-commit")
	committed, err := tx.Commit(ctx)
	if err == nil {
		// "error" here: committed, but the answer was lost (row 3).
		if err = failpoint.Err("lake-merge-after-commit"); err == nil {
			if err := t.setCommitted(committed); err != nil {
				return fmt.Errorf("committed snapshot %d, but %w", snap.SnapshotID, err)
			}
			return nil
		}
	}
	retry, err := t.afterFailedCommit(ctx, err, func(m table.Metadata) bool {
		return m.SnapshotByID(snap.SnapshotID) != nil
	})
	if err == nil {
		return nil
	}
	if retry {
		return fmt.Errorf("%w: %w", ErrCommitConflict, err)
	}
	return err
}

// SameType reports whether two column types are the same, ignoring the
// field ids inside nested types (which differ from table to table).
func SameType(a, b iceberggo.Type) bool { return sameType(a, b) }

// AppendedBounds returns, for the rows the append snapshots after `after`
// up to and including to added, how many there are and the largest value
// of the long column col, from the data files' statistics (no data file is
// read). ok is false when the range holds no rows, or when a file records
// no upper bound for col.
func (t *Table) AppendedBounds(ctx context.Context, after, to int64, col string) (rows, maxVal int64, ok bool, err error) {
	tbl := t.current()
	if after == to {
		return 0, 0, false, nil
	}
	f, found := tbl.Schema().FindFieldByName(col)
	if !found {
		return 0, 0, false, fmt.Errorf("iceberg: table %s has no column %s", t.name, col)
	}
	if _, isLong := f.Type.(iceberggo.Int64Type); !isLong {
		return 0, 0, false, fmt.Errorf("iceberg: table %s: column %s is %s, not long", t.name, col, f.Type)
	}
	tasks, err := appendedTasks(ctx, tbl, after, to)
	if err != nil {
		return 0, 0, false, fmt.Errorf("iceberg: table %s: plan the files appended after snapshot %d up to %d: %w", t.name, after, to, err)
	}
	ok = true
	seen := false
	for _, task := range tasks {
		rows += task.File.Count()
		ub, has := task.File.UpperBoundValues()[f.ID]
		if !has || len(ub) != 8 {
			ok = false
			continue
		}
		v := int64(binary.LittleEndian.Uint64(ub))
		if !seen || v > maxVal {
			maxVal, seen = v, true
		}
	}
	return rows, maxVal, ok && seen, nil
}

// errSampled stops a scan once its first batch has been measured.
var errSampled = errors.New("sampled")

// AppendedRowBytes estimates how many bytes of Arrow memory one row of the
// append snapshots after `after` up to to takes once read: it reads the
// first batch of the largest data file in the range and measures it. 0 when
// the range holds no rows. Callers size their reads with it (memory is a
// budget: a row count says nothing about 16 MiB values).
func (t *Table) AppendedRowBytes(ctx context.Context, after, to int64) (float64, error) {
	tbl := t.current()
	if after == to {
		return 0, nil
	}
	tasks, err := appendedTasks(ctx, tbl, after, to)
	if err != nil {
		return 0, fmt.Errorf("iceberg: table %s: plan the files appended after snapshot %d up to %d: %w", t.name, after, to, err)
	}
	best := -1
	for i, task := range tasks {
		if task.File.Count() > 0 && (best < 0 || task.File.FileSizeBytes() > tasks[best].File.FileSizeBytes()) {
			best = i
		}
	}
	if best < 0 {
		return 0, nil
	}
	reader := tbl.Scan(scanBatch)
	defer reader.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var perRow float64
	err = t.readTasks(ctx, tbl, reader, tasks[best:best+1], nil, func(rec arrow.RecordBatch) error {
		if rec.NumRows() == 0 {
			return nil
		}
		perRow = float64(RecordBytes(rec)) / float64(rec.NumRows())
		return errSampled
	})
	if err != nil && !errors.Is(err, errSampled) {
		return 0, err
	}
	return perRow, nil
}

// RecordBytes is the size of the buffers behind rec's columns (shared
// buffers counted once per column that refers to them): lake.RecordBytes.
func RecordBytes(rec arrow.RecordBatch) int64 { return lake.RecordBytes(rec) }
