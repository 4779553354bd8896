package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/lake"
)

// commitAttempts bounds how often Append, AddColumns and WidenColumn redo
// their work after a commit that lost a race to another writer. Bronze and
// silver have one writer per table, so races are rare; the bound only
// matters when several writers hammer one table.
const commitAttempts = 10

// backoff waits before attempt n+1 (n >= 1) of a commit that lost to
// another writer (counted: lake.RetryCommitConflict): a random 0..n*50ms,
// so that racing writers spread out.
func backoff(ctx context.Context, n int) error {
	lake.CountRetry(lake.RetryCommitConflict)
	return pause(ctx, n)
}

// pause waits a random 0..n*50ms before attempt n+1 (n >= 1).
func pause(ctx context.Context, n int) error {
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(n) * int64(50*time.Millisecond))))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-timer.C:
		return nil
	}
}

// Table is an Iceberg table of the catalog. It caches the table's metadata
// as of its last load, commit or Refresh.
//
// Methods are safe for concurrent use; Append, AddColumns, WidenColumn and
// Refresh are serialized with each other.
type Table struct {
	c     *Catalog // for error classification
	cat   catalog.Catalog
	ident []string
	name  string // dotted identifier, for errors

	mu          sync.Mutex // serializes commits and refreshes
	tbl         *table.Table
	arrowSchema *arrow.Schema
	// view is tbl and arrowSchema for readers, which must not wait behind
	// a commit holding mu (the capture reads a table's schema while that
	// table's previous flush commits in the background).
	view atomic.Pointer[tableView]
}

type tableView struct {
	tbl         *table.Table
	arrowSchema *arrow.Schema
}

// set installs new metadata; t.mu must be held (or t not yet shared).
func (t *Table) set(tbl *table.Table) error {
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		return fmt.Errorf("arrow schema of table schema %d: %w", tbl.Schema().ID, err)
	}
	t.tbl, t.arrowSchema = tbl, sc
	t.view.Store(&tableView{tbl: tbl, arrowSchema: sc})
	return nil
}

// setCommitted installs the table a commit returned, as a copy that holds
// nothing of the commit's transaction (see unchained); t.mu must be held.
func (t *Table) setCommitted(committed *table.Table) error {
	clean, err := t.c.unchained(committed)
	if err != nil {
		return err
	}
	return t.set(clean)
}

// unchained returns committed with a copy of its metadata that holds
// nothing of the commit's transaction, opening files as the catalog's
// loads do.
//
// The table a commit returns is not kept as is: iceberg-go (v0.7.0,
// snapshot_producers.go) points the new snapshot's schema id at a field of
// the transaction's metadata builder (SchemaID: &txn.meta.currentSchemaID),
// and the builder holds the metadata it started from, whose newest
// snapshot points at the builder of the commit before, and so on: every
// version of the metadata since the table was loaded stays reachable, each
// a full copy of the snapshot list, and the heap grows with the square of
// the commits (185 MiB after 300 one-row appends; 480 MiB in bronze after
// 500 commits) until snapshot expiry or a reload. The copy is iceberg-go's
// own (the builder a transaction starts from clones every snapshot, its
// schema id included); it is stamped with the time of the copy as its
// last-updated time, which only serves as a lower bound for the next
// commit's timestamps (the catalog commits on the metadata it loads).
// A copy through the metadata's JSON form would be exact, but costs a
// third of a small commit's CPU at a few hundred snapshots.
func (c *Catalog) unchained(committed *table.Table) (*table.Table, error) {
	b, err := table.MetadataBuilderFromBase(committed.Metadata(), "")
	if err != nil {
		return nil, fmt.Errorf("copy the committed metadata: %w", err)
	}
	meta, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("copy the committed metadata: %w", err)
	}
	loc := committed.MetadataLocation()
	return table.New(committed.Identifier(), meta, loc, iceio.LoadFSFunc(c.props, loc), c.cat), nil
}

// current is the table's metadata as of its last load, commit or refresh.
func (t *Table) current() *table.Table { return t.view.Load().tbl }

// Ident returns the table's identifier (namespace levels, then name).
func (t *Table) Ident() []string { return slices.Clone(t.ident) }

// Schema returns the table's current Iceberg schema.
func (t *Table) Schema() *iceberggo.Schema { return t.current().Schema() }

// ArrowSchema returns the Arrow schema of the current Iceberg schema: one
// field per column, in order, each (and each list element) carrying its
// Iceberg field id in the "PARQUET:field_id" metadata; string, binary and
// list are the regular (not large) Arrow types; timestamps are µs, with
// time zone "UTC" for timestamptz. Build records for Append from it, e.g.
// array.NewRecordBuilder(mem, t.ArrowSchema()).
func (t *Table) ArrowSchema() *arrow.Schema { return t.view.Load().arrowSchema }

// Summary returns the properties of the current snapshot's summary plus
// its "operation", or nil if the table has no snapshot. It includes the
// keys the writer passed to Append, such as "tidemark.position". The map is
// the caller's to keep.
func (t *Table) Summary() map[string]string {
	snap := t.current().CurrentSnapshot()
	if snap == nil || snap.Summary == nil {
		return nil
	}
	out := maps.Clone(map[string]string(snap.Summary.Properties))
	if out == nil {
		out = map[string]string{}
	}
	out["operation"] = string(snap.Summary.Operation)
	return out
}

// SnapshotCount returns how many snapshots the table's metadata holds.
func (t *Table) SnapshotCount() int { return len(t.current().Metadata().Snapshots()) }

// Refresh reloads the table's metadata from the catalog.
func (t *Table) Refresh(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.refreshLocked(ctx); err != nil {
		return fmt.Errorf("iceberg: refresh table %s: %w", t.name, err)
	}
	return nil
}

func (t *Table) refreshLocked(ctx context.Context) error {
	fresh, err := t.cat.LoadTable(ctx, table.Identifier(slices.Clone(t.ident)))
	if err != nil {
		return classify(err, t.c.tableWhat(ctx, t.ident))
	}
	if old, now := t.tbl.Metadata().TableUUID(), fresh.Metadata().TableUUID(); old != now {
		return fmt.Errorf("table was replaced (uuid %s, now %s): load it again", old, now)
	}
	return t.set(fresh)
}

// Append writes recs as new data files and commits them as ONE snapshot
// whose summary also carries props (e.g. "tidemark.position"): the data and
// the keys become visible together or not at all.
//
// All recs must share one Arrow schema, whose fields the table must know
// (by "PARQUET:field_id", else by name) with the same type or a type the
// column was widened from; required columns must be present. Records are
// not released or retained beyond the call. An empty recs commits a
// snapshot with no data files that still carries props, which moves a
// table's position forward when it received no rows.
//
// If another writer committed to the table since t's metadata was loaded,
// Append reloads it and redoes the append, up to a few times (files written
// by an abandoned attempt are left for orphan-file cleanup). If the commit
// fails in a way that leaves its outcome unknown, Append reloads the table
// and looks for its own snapshot, so a commit is never applied twice. On
// success t reflects the new snapshot; on error t reflects the catalog as
// last seen.
func (t *Table) Append(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()

	sc := t.arrowSchema
	if len(recs) > 0 {
		sc = recs[0].Schema()
		for i, rec := range recs[1:] {
			if !rec.Schema().Equal(sc) {
				return fmt.Errorf("iceberg: append to table %s: record %d has a different schema than record 0", t.name, i+1)
			}
		}
	}

	var err error
	for attempt := 1; ; attempt++ {
		if err = checkWriteSchema(t.tbl.Schema(), sc); err != nil {
			break
		}
		var retry bool
		retry, err = t.appendOnce(ctx, sc, recs, props)
		if err != nil && retry && attempt == commitAttempts {
			err = fmt.Errorf("%w (another writer won %d attempts in a row): %w", ErrCommitConflict, commitAttempts, err)
		}
		if err == nil || !retry || attempt == commitAttempts {
			break
		}
		if berr := backoff(ctx, attempt); berr != nil {
			err = errors.Join(err, berr)
			break
		}
	}
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: append %d rows to table %s: %w", countRows(recs), t.name, err))
	}
	return nil
}

// appendOnce makes one attempt; t.mu is held. retry reports that the
// attempt lost a race to another writer and t now holds the new metadata.
func (t *Table) appendOnce(ctx context.Context, sc *arrow.Schema, recs []arrow.RecordBatch, props map[string]string) (retry bool, err error) {
	base := currentID(t.tbl)
	tx := t.tbl.NewTransaction()
	if err := t.stageAppend(ctx, tx, sc, recs, props); err != nil {
		return t.baseGone(ctx, base, err)
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return false, err
	}
	snap := staged.CurrentSnapshot()
	if snap == nil {
		return false, errors.New("append staged no snapshot")
	}
	// The data files are written; the commit is next (RELIABILITY row 2).
	failpoint.Inject("lake-append-before-commit")
	committed, err := tx.Commit(ctx)
	if err == nil {
		// Committed, and the caller does not know yet (row 3). The "error"
		// action stands for an answer lost on the way back: the outcome is
		// unknown, and is resolved as below.
		if err = failpoint.Err("lake-append-after-commit"); err == nil {
			if err := t.setCommitted(committed); err != nil {
				return false, fmt.Errorf("committed snapshot %d, but %w", snap.SnapshotID, err)
			}
			return false, nil
		}
	}
	if isMissingFile(err) {
		return t.baseGone(ctx, base, err)
	}
	return t.afterFailedCommit(ctx, err, func(m table.Metadata) bool {
		// iceberg-go keeps the snapshot id when it replays a commit.
		return m.SnapshotByID(snap.SnapshotID) != nil
	})
}

// currentID is tbl's current snapshot id (-1: none).
func currentID(tbl *table.Table) int64 {
	if cs := tbl.CurrentSnapshot(); cs != nil {
		return cs.SnapshotID
	}
	return -1
}

// isMissingFile reports whether err is a file of the table's metadata
// that is not there (a manifest list or manifest).
func isMissingFile(err error) bool {
	return err != nil && (errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "no such file or directory"))
}

// baseGone decides a write that failed on err while it read the snapshot
// it was built on (base): when a file of that snapshot is missing and the
// table has moved on since (another writer committed, and maintenance
// expired base and deleted its files), the write lost a race: t now holds
// the new metadata and it is retried. Otherwise err stands (a file of the
// current snapshot missing is damage, named as such).
func (t *Table) baseGone(ctx context.Context, base int64, err error) (bool, error) {
	if !isMissingFile(err) {
		return false, err
	}
	if rerr := t.refreshLocked(ctx); rerr != nil {
		return false, errors.Join(err, rerr)
	}
	return currentID(t.tbl) != base, err
}

// stageAppend writes recs as data files and stages, in tx, the snapshot
// that appends them. Rows go through dataFileWriter when it writes this
// table (see newDataFileWriter), else through iceberg-go's writer; no rows
// still stage a snapshot (one that carries props).
func (t *Table) stageAppend(ctx context.Context, tx *table.Transaction, sc *arrow.Schema, recs []arrow.RecordBatch, props map[string]string) error {
	if countRows(recs) > 0 {
		w, ok, err := newDataFileWriter(ctx, t.tbl, t.arrowSchema, sc)
		if err != nil {
			return err
		}
		if ok {
			files, err := w.write(ctx, recs)
			if err != nil {
				return err
			}
			// The files are new (a fresh write id): no need to look for
			// them among the table's files. They carry field ids, so no
			// name mapping is needed to read them.
			return tx.AddDataFiles(ctx, files, iceberggo.Properties(maps.Clone(props)),
				table.WithoutDuplicateCheck(), table.WithoutAutoNameMapping())
		}
	}
	rdr, err := array.NewRecordReader(sc, recs)
	if err != nil {
		return err
	}
	defer rdr.Release()
	return tx.Append(ctx, rdr, iceberggo.Properties(maps.Clone(props)))
}

// afterFailedCommit decides what a failed commit means; t.mu is held.
// iceberg-go reports a lost race either as table.ErrCommitFailed or, when
// the SQL catalog checks the commit's requirements against newer metadata,
// as a plain "requirement failed" error; other errors (a dropped database
// connection) may hide a commit that landed. So it reloads the table: if
// landed says the commit is in the new metadata, the commit succeeded; if
// another writer moved the table, the caller should retry on the new
// metadata; if nothing moved, the commit failed for a reason of its own.
func (t *Table) afterFailedCommit(ctx context.Context, commitErr error, landed func(table.Metadata) bool) (retry bool, err error) {
	base := t.tbl.MetadataLocation()
	if rerr := t.refreshLocked(ctx); rerr != nil {
		return false, errors.Join(commitErr, fmt.Errorf("reload after failed commit (outcome unknown): %w", rerr))
	}
	if landed(t.tbl.Metadata()) {
		return false, nil
	}
	if t.tbl.MetadataLocation() == base {
		return false, commitErr
	}
	return true, commitErr
}

func countRows(recs []arrow.RecordBatch) int64 {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	return n
}

// AddColumns adds cols as new optional top-level columns, in one commit.
// Field ids are assigned by Iceberg (any ID in cols is ignored), as are the
// ids inside nested types. A column that already exists with the same type
// is skipped, so a retried evolution is harmless; one that exists with
// another type is an error wrapping ErrIncompatibleType. Required columns
// are refused: old data files have no value for them. Rows written before
// the change read back with null in the new columns.
func (t *Table) AddColumns(ctx context.Context, cols []iceberggo.NestedField) error {
	return t.AddColumnsNoting(ctx, cols, nil)
}

// AddColumnsNoting is AddColumns that also sets the table properties note
// returns, in the same commit: note is called with the id of the snapshot
// that is current when the columns are added (NoSnapshot if none), so a
// property can say which rows were written before the columns existed.
// note == nil sets none. A retry that finds the columns added sets nothing.
func (t *Table) AddColumnsNoting(ctx context.Context, cols []iceberggo.NestedField, note func(snapshot int64) map[string]string) error {
	for _, c := range cols {
		if c.Name == "" {
			return fmt.Errorf("iceberg: add columns to table %s: a column has no name", t.name)
		}
		if c.Required {
			return fmt.Errorf("iceberg: add column %s to table %s: new columns must be optional", c.Name, t.name)
		}
	}
	return t.evolveTx(ctx, "add columns to", func(tx *table.Transaction, sc *iceberggo.Schema, us *table.UpdateSchema) (bool, error) {
		changed := false
		for _, c := range cols {
			if f, ok := sc.FindFieldByName(c.Name); ok {
				if sameType(f.Type, c.Type) {
					continue
				}
				return false, fmt.Errorf("%w: column %s exists as %s, cannot add it as %s", ErrIncompatibleType, c.Name, f.Type, c.Type)
			}
			us.AddColumn([]string{c.Name}, c.Type, c.Doc, false, nil)
			changed = true
		}
		if changed && note != nil {
			snap := NoSnapshot
			if cur := t.tbl.CurrentSnapshot(); cur != nil {
				snap = cur.SnapshotID
			}
			if props := note(snap); len(props) > 0 {
				if err := tx.SetProperties(props); err != nil {
					return false, err
				}
			}
		}
		return changed, nil
	})
}

// WidenColumn changes the type of the top-level column name to a wider
// one: int -> long, float -> double, or decimal(p,s) -> decimal(p2,s) with
// p2 > p. Data files written before keep their type and are read as the new
// one. Widening to the column's current type does nothing; any other change
// is an error wrapping ErrIncompatibleType.
func (t *Table) WidenColumn(ctx context.Context, name string, to iceberggo.Type) error {
	return t.evolve(ctx, "widen column "+name+" of", func(sc *iceberggo.Schema, us *table.UpdateSchema) (bool, error) {
		f, ok := sc.FindFieldByName(name)
		if !ok {
			return false, fmt.Errorf("no column %s", name)
		}
		if f.Type.Equals(to) {
			return false, nil
		}
		if !canWiden(f.Type, to) {
			return false, fmt.Errorf("%w: cannot change column %s from %s to %s", ErrIncompatibleType, name, f.Type, to)
		}
		us.UpdateColumn([]string{name}, table.ColumnUpdate{
			FieldType: iceberggo.Optional[iceberggo.Type]{Valid: true, Val: to},
		})
		return true, nil
	})
}

// DeleteColumns removes top-level columns in one commit that also sets
// props (if any column was removed). Iceberg never reuses a field id (the
// table's last-column-id only grows), so a column added later under a
// deleted one's name is a new field, null in the files written before;
// the deleted field's values stay in those files, unread. A name the table
// lacks is deleted already (a retry).
func (t *Table) DeleteColumns(ctx context.Context, names []string, props map[string]string) error {
	return t.evolveTx(ctx, "delete columns of", func(tx *table.Transaction, sc *iceberggo.Schema, us *table.UpdateSchema) (bool, error) {
		changed := false
		for _, n := range names {
			if _, ok := sc.FindFieldByName(n); !ok {
				continue
			}
			us.DeleteColumn([]string{n})
			changed = true
		}
		if !changed {
			return false, nil
		}
		if len(props) > 0 {
			if err := tx.SetProperties(props); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// RenameColumns renames top-level columns in one commit that also sets
// props: Iceberg tracks columns by field id, so data files written before
// read under the new name. A rename whose From is gone and whose To exists
// is done already (a retry); a From that does not exist otherwise, or a To
// that the table has (a swap of two names included), is an error.
func (t *Table) RenameColumns(ctx context.Context, renames []lake.Rename, props map[string]string) error {
	return t.evolveTx(ctx, "rename columns of", func(tx *table.Transaction, sc *iceberggo.Schema, us *table.UpdateSchema) (bool, error) {
		// names: the current name of each field id, as the renames go.
		names := map[string]int{}
		for _, f := range sc.Fields() {
			names[f.Name] = f.ID
		}
		changed := false
		for _, r := range renames {
			id, ok := names[r.From]
			_, taken := names[r.To]
			switch {
			case !ok && taken:
				continue
			case !ok:
				return false, fmt.Errorf("no column %s to rename to %s", r.From, r.To)
			case taken:
				return false, fmt.Errorf("cannot rename column %s to %s: the table has a column %s", r.From, r.To, r.To)
			}
			delete(names, r.From)
			names[r.To] = id
			changed = true
		}
		if !changed {
			return false, nil
		}
		// UpdateSchema renames by the column's original path: each field
		// renamed once, to its final name (onto no name the table has).
		final := map[int]string{}
		for name, id := range names {
			final[id] = name
		}
		for _, f := range sc.Fields() {
			if n := final[f.ID]; n != f.Name {
				us.RenameColumn([]string{f.Name}, n)
			}
		}
		if len(props) > 0 {
			if err := tx.SetProperties(props); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// evolve runs one schema change as its own commit. build inspects the
// current schema and stages the change, reporting whether there is one; it
// must make a change that already happened a no-op, so that a retry after
// an unknown outcome is harmless.
func (t *Table) evolve(ctx context.Context, what string, build func(*iceberggo.Schema, *table.UpdateSchema) (bool, error)) error {
	return t.evolveTx(ctx, what, func(_ *table.Transaction, sc *iceberggo.Schema, us *table.UpdateSchema) (bool, error) {
		return build(sc, us)
	})
}

// evolveTx is evolve whose build may also stage other changes (table
// properties) on the commit's transaction.
func (t *Table) evolveTx(ctx context.Context, what string, build func(*table.Transaction, *iceberggo.Schema, *table.UpdateSchema) (bool, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()

	var err error
	for attempt := 1; ; attempt++ {
		tx := t.tbl.NewTransaction()
		us := tx.UpdateSchema(true, false)
		var changed bool
		changed, err = build(tx, t.tbl.Schema(), us)
		if err != nil || !changed {
			break
		}
		if err = us.Commit(); err != nil {
			break
		}
		var committed *table.Table
		if committed, err = tx.Commit(ctx); err == nil {
			if err = t.setCommitted(committed); err != nil {
				err = fmt.Errorf("committed, but %w", err)
			}
			break
		}
		var retry bool
		retry, err = t.afterFailedCommit(ctx, err, func(table.Metadata) bool { return false })
		if !retry || attempt == commitAttempts {
			break
		}
		if berr := backoff(ctx, attempt); berr != nil {
			err = errors.Join(err, berr)
			break
		}
	}
	if err != nil {
		return fmt.Errorf("iceberg: %s table %s: %w", what, t.name, err)
	}
	return nil
}

// Scan calls fn with every live row of the current snapshot, in record
// batches whose schema is ArrowSchema() without field-id metadata. A batch
// is released when fn returns: call Retain to keep it longer. Scan stops at
// the first error fn returns and returns it. A table with no snapshot has no
// rows.
func (t *Table) Scan(ctx context.Context, fn func(arrow.RecordBatch) error) error {
	tbl := t.current()
	scan := tbl.Scan()
	defer scan.Close()
	tasks, err := scan.PlanFiles(ctx)
	if err != nil {
		return t.classify(fmt.Errorf("iceberg: scan table %s: %w", t.name, err))
	}
	return t.readTasks(ctx, tbl, scan, tasks, nil, fn)
}

// classify is classify for errors reading t's files.
func (t *Table) classify(err error) error { return classify(err, "table "+t.name) }

// SetProperties sets table properties, in one commit (a metadata commit,
// no snapshot). Setting values the table already has commits nothing, so a
// retry is harmless.
func (t *Table) SetProperties(ctx context.Context, props map[string]string) error {
	return t.evolveTx(ctx, "set properties of", func(tx *table.Transaction, _ *iceberggo.Schema, _ *table.UpdateSchema) (bool, error) {
		cur := t.tbl.Properties()
		changed := false
		for k, v := range props {
			if have, ok := cur[k]; !ok || have != v {
				changed = true
			}
		}
		if !changed {
			return false, nil
		}
		return true, tx.SetProperties(props)
	})
}
