package delta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file is the format-neutral contract (package lake) on a Delta
// table: the tables a Catalog opens are lake.KeyedTables.
//
// Snapshots are the table's versions that change its data: appends
// (WRITE: operation "append"), merges (MERGE: "overwrite") and deletes
// (DELETE: "delete"). Versions that change only the metadata (CREATE
// TABLE, SET TBLPROPERTIES, ADD COLUMNS, CHANGE COLUMN) are not
// snapshots: the current snapshot, and so the cursor (Summary), stay the
// last data commit's. A snapshot's Props are its commit's userMetadata.

var (
	_ lake.KeyedTable = (*lakeTable)(nil)
	_ lake.LiveRows   = (*liveRows)(nil)
)

// lakeTable is a Table under its catalog identifier.
type lakeTable struct {
	t     *Table
	ident []string

	mu    sync.Mutex
	kinds map[int64]commitKind // commits are immutable: cached by version
}

// maxKinds bounds the commits a table caches.
const maxKinds = 4096

// commitKind is what a commit is in lake terms.
type commitKind struct {
	snap bool // changes data (no metaData or protocol action)
	s    lake.Snapshot
}

func newLakeTable(ident []string, t *Table) *lakeTable {
	return &lakeTable{t: t, ident: slices.Clone(ident), kinds: map[int64]commitKind{}}
}

func (l *lakeTable) name() string { return joinIdent(l.ident) }

func (l *lakeTable) Ident() []string                   { return slices.Clone(l.ident) }
func (l *lakeTable) ArrowSchema() *arrow.Schema        { return l.t.ArrowSchema() }
func (l *lakeTable) Properties() map[string]string     { return l.t.Properties() }
func (l *lakeTable) Refresh(ctx context.Context) error { return l.wrap(l.t.Refresh(ctx)) }
func (l *lakeTable) MergeOnRead() bool                 { return l.t.MergeOnRead() }

// Bucketer is false: this writer does not bucket.
func (l *lakeTable) Bucketer() (lake.Bucketer, bool) { return nil, false }

// wrap names the table in an error.
func (l *lakeTable) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("table %s: %w", l.name(), err)
}

func (l *lakeTable) SetProperties(ctx context.Context, props map[string]string) error {
	return l.wrap(l.t.SetProperties(ctx, props))
}

// kind returns what commit v is (reading its file once).
func (l *lakeTable) kind(v int64) (commitKind, error) {
	l.mu.Lock()
	k, ok := l.kinds[v]
	l.mu.Unlock()
	if ok {
		return k, nil
	}
	acts, err := readCommit(l.t.dir, v)
	if err != nil {
		return k, err
	}
	k.s = lake.Snapshot{ID: v, SequenceNumber: v, Operation: "overwrite"}
	k.snap = true
	for _, a := range acts {
		switch {
		case a.MetaData != nil, a.Protocol != nil:
			k.snap = false
		case a.CommitInfo != nil:
			k.s.Props = userProps(a.CommitInfo)
			if ts, ok := a.CommitInfo["timestamp"].(float64); ok {
				k.s.TimestampMs = int64(ts)
			}
			switch op, _ := a.CommitInfo["operation"].(string); op {
			case "WRITE", "STREAMING UPDATE":
				k.s.Operation = "append"
			case "DELETE":
				k.s.Operation = "delete"
			case "OPTIMIZE":
				k.s.Operation = "replace"
			}
		case a.Add != nil && a.Add.DataChange && (len(a.Add.DeletionVector) == 0 || string(a.Add.DeletionVector) == "null"):
			if n, ok := numRecords(a.Add); ok {
				k.s.AddedRecords += n
			}
			k.s.AddedBytes += a.Add.Size
		}
	}
	if k.s.Props == nil {
		k.s.Props = map[string]string{}
	}
	l.mu.Lock()
	l.kinds[v] = k
	if len(l.kinds) > maxKinds {
		// Keep the newer half: reads go to recent versions (the head,
		// the ranges after a cursor).
		for w := range l.kinds {
			if w < v-maxKinds/2 {
				delete(l.kinds, w)
			}
		}
	}
	l.mu.Unlock()
	return k, nil
}

// headAt returns the last snapshot at or before version v.
func (l *lakeTable) headAt(v int64) (lake.Snapshot, bool, error) {
	for w := v; w >= 0; w-- {
		k, err := l.kind(w)
		if errors.Is(err, os.ErrNotExist) {
			return lake.Snapshot{}, false, nil
		}
		if err != nil {
			return lake.Snapshot{}, false, err
		}
		if k.snap {
			s := k.s
			p, err := l.headID(w - 1)
			if err != nil {
				return s, false, err
			}
			s.ParentID = p
			s.Props = maps.Clone(s.Props)
			return s, true, nil
		}
	}
	return lake.Snapshot{}, false, nil
}

// headID returns the id of the last snapshot at or before version v
// (NoSnapshot if none), without its parent.
func (l *lakeTable) headID(v int64) (int64, error) {
	for w := v; w >= 0; w-- {
		k, err := l.kind(w)
		if errors.Is(err, os.ErrNotExist) {
			return lake.NoSnapshot, nil
		}
		if err != nil {
			return lake.NoSnapshot, err
		}
		if k.snap {
			return w, nil
		}
	}
	return lake.NoSnapshot, nil
}

func (l *lakeTable) CurrentSnapshot() (lake.Snapshot, bool) {
	s, ok, err := l.headAt(l.t.Version())
	if err != nil {
		return lake.Snapshot{}, false
	}
	return s, ok
}

func (l *lakeTable) Summary() map[string]string {
	s, ok := l.CurrentSnapshot()
	if !ok {
		return nil
	}
	out := maps.Clone(s.Props)
	out["operation"] = s.Operation
	return out
}

func (l *lakeTable) Snapshot(id int64) (lake.Snapshot, error) {
	if id < 0 || id > l.t.Version() {
		return lake.Snapshot{}, fmt.Errorf("table %s: snapshot %d (the table is at version %d): %w", l.name(), id, l.t.Version(), lake.ErrSnapshotNotFound)
	}
	k, err := l.kind(id)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !k.snap) {
		return lake.Snapshot{}, fmt.Errorf("table %s: version %d is not a snapshot (a metadata change, or gone from the log): %w", l.name(), id, lake.ErrSnapshotNotFound)
	}
	if err != nil {
		return lake.Snapshot{}, l.wrap(err)
	}
	s, _, err := l.headAt(id)
	return s, l.wrap(err)
}

// History returns the snapshots of versions (after, to]: the history is
// linear, every earlier snapshot is an ancestor.
func (l *lakeTable) History(after, to int64) ([]lake.Snapshot, error) {
	if _, err := l.Snapshot(to); err != nil {
		return nil, err
	}
	if after != lake.NoSnapshot {
		if after > to {
			return nil, fmt.Errorf("table %s: snapshot %d is not an ancestor of %d: %w", l.name(), after, to, lake.ErrSnapshotNotFound)
		}
		if _, err := l.Snapshot(after); err != nil {
			return nil, err
		}
	}
	var out []lake.Snapshot
	parent := after
	for v := after + 1; v <= to; v++ {
		k, err := l.kind(v)
		if errors.Is(err, os.ErrNotExist) && after == lake.NoSnapshot {
			continue // expired (ExpireSnapshots): the history starts later
		}
		if err != nil {
			return nil, l.wrap(err)
		}
		if !k.snap {
			continue
		}
		s := k.s
		s.ParentID = parent
		s.Props = maps.Clone(s.Props)
		out = append(out, s)
		parent = v
	}
	return out, nil
}

func (l *lakeTable) Append(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) error {
	_, err := l.t.Append(ctx, recs, Commit{Props: props})
	return l.wrap(err)
}

// Evolve refuses deletes and renames (ErrColumnMapping), then widens and
// adds columns in one commit (Table.Evolve), with e.Note's properties as
// table properties.
func (l *lakeTable) Evolve(ctx context.Context, e lake.Evolution) error {
	sc := l.ArrowSchema()
	for _, d := range e.Delete {
		if len(sc.FieldIndices(d)) > 0 {
			return fmt.Errorf("table %s: delete column %s: %w", l.name(), d, ErrColumnMapping)
		}
	}
	for _, r := range e.Rename {
		if len(sc.FieldIndices(r.From)) > 0 {
			return fmt.Errorf("table %s: rename column %s to %s: %w", l.name(), r.From, r.To, ErrColumnMapping)
		}
	}
	var note func(int64) map[string]string
	if e.Note != nil && len(e.Add) > 0 {
		note = func(read int64) map[string]string {
			head, err := l.headID(read)
			if err != nil {
				head = lake.NoSnapshot
			}
			return e.Note(head)
		}
	}
	return l.wrap(l.t.Evolve(ctx, e.Widen, e.Add, note))
}

func (l *lakeTable) Scan(ctx context.Context, fn func(arrow.RecordBatch) error) error {
	return l.ScanWhere(ctx, nil, fn)
}

func (l *lakeTable) ScanWhere(ctx context.Context, f *lake.Filter, fn func(arrow.RecordBatch) error) error {
	_, files := l.t.snapshot()
	return l.wrap(l.scanFiles(ctx, files, f, fn))
}

// ScanSnapshotWhere is ScanWhere as of version id, an earlier snapshot of
// the table. The error wraps lake.ErrSnapshotNotFound when the log no
// longer holds the version, or VACUUM removed a file it needs.
func (l *lakeTable) ScanSnapshotWhere(ctx context.Context, id int64, f *lake.Filter, fn func(arrow.RecordBatch) error) error {
	if _, err := l.Snapshot(id); err != nil {
		return err
	}
	st, err := loadStateAt(ctx, l.t.dir, id)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("%w (%v)", lake.ErrSnapshotNotFound, err)
		}
		return l.wrap(fmt.Errorf("read version %d: %w", id, err))
	}
	files := make([]Add, 0, len(st.order))
	for _, p := range st.order {
		files = append(files, *st.files[p])
	}
	err = l.scanFiles(ctx, files, f, fn)
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("a file of version %d is gone (vacuumed): %w (%v)", id, lake.ErrSnapshotNotFound, err)
	}
	return l.wrap(err)
}

// scanFiles reads files, keeping the rows f matches (nil: all).
func (l *lakeTable) scanFiles(ctx context.Context, files []Add, f *lake.Filter, fn func(arrow.RecordBatch) error) error {
	sc := l.t.ArrowSchema()
	for i := range files {
		if f != nil && !mayMatch(f, &files[i]) {
			continue
		}
		err := l.t.readFile(ctx, files[i], sc, func(rec arrow.RecordBatch, _ lake.Positions) error {
			if f == nil {
				return fn(rec)
			}
			sel, err := f.SelectRows(ctx, l.t.mem, rec)
			if err != nil || sel == nil {
				return err
			}
			defer sel.Release()
			return fn(sel)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// appended returns the files the append snapshots of (after, to] added.
func (l *lakeTable) appended(after, to int64) ([]Add, error) {
	if to > l.t.Version() || after > to {
		return nil, fmt.Errorf("table %s: appended range (%d, %d] is not in the log (version %d): %w", l.name(), after, to, l.t.Version(), lake.ErrSnapshotNotFound)
	}
	var out []Add
	for v := after + 1; v <= to; v++ {
		k, err := l.kind(v)
		if errors.Is(err, os.ErrNotExist) && after == lake.NoSnapshot {
			continue // expired (ExpireSnapshots)
		}
		if err != nil {
			return nil, l.wrap(err)
		}
		if !k.snap || k.s.Operation != "append" {
			continue
		}
		adds, err := l.t.Appended(v-1, v)
		if err != nil {
			return nil, l.wrap(err)
		}
		out = append(out, adds...)
	}
	return out, nil
}

func (l *lakeTable) ScanAppended(ctx context.Context, after, to int64, fn func(arrow.RecordBatch) error) error {
	return l.ScanAppendedWhere(ctx, after, to, nil, fn)
}

func (l *lakeTable) ScanAppendedWhere(ctx context.Context, after, to int64, f *lake.Filter, fn func(arrow.RecordBatch) error) error {
	adds, err := l.appended(after, to)
	if err != nil {
		return err
	}
	return l.wrap(l.scanFiles(ctx, adds, f, fn))
}

func (l *lakeTable) AppendedBounds(ctx context.Context, after, to int64, col string) (rows, maxVal int64, ok bool, err error) {
	adds, err := l.appended(after, to)
	if err != nil {
		return 0, 0, false, err
	}
	rows, maxVal, ok = appendedBounds(adds, col)
	return rows, maxVal, ok, nil
}

// errSampled stops a read once a batch was measured.
var errSampled = errors.New("sampled")

// AppendedRowBytes measures the first batch of the largest file the
// appends of (after, to] added.
func (l *lakeTable) AppendedRowBytes(ctx context.Context, after, to int64) (float64, error) {
	if after == to {
		return 0, nil
	}
	adds, err := l.appended(after, to)
	if err != nil {
		return 0, err
	}
	best := -1
	for i, a := range adds {
		if n, ok := numRecords(&a); ok && n > 0 && (best < 0 || a.Size > adds[best].Size) {
			best = i
		}
	}
	if best < 0 {
		return 0, nil
	}
	var perRow float64
	err = l.t.scanFile(ctx, adds[best], func(rec arrow.RecordBatch) error {
		if rec.NumRows() == 0 {
			return nil
		}
		perRow = float64(lake.RecordBytes(rec)) / float64(rec.NumRows())
		return errSampled
	})
	if err != nil && !errors.Is(err, errSampled) {
		return 0, l.wrap(err)
	}
	return perRow, nil
}

// liveRows is the snapshot a live scan read: its version and files.
type liveRows struct {
	dir     string
	version int64
	files   []Add
}

// UpperBound returns the maxValues statistic of the long column col of
// file.
func (lr *liveRows) UpperBound(file int, col string) (int64, bool) {
	if file < 0 || file >= len(lr.files) {
		return 0, false
	}
	b, ok := boundsOf(&lr.files[file])
	if !ok || b.Max[col] == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(string(b.Max[col]), 10, 64)
	return v, err == nil
}

func (l *lakeTable) liveOf(live lake.LiveRows) (*liveRows, error) {
	lr, ok := live.(*liveRows)
	if !ok || lr == nil || lr.dir != l.t.dir {
		return nil, fmt.Errorf("table %s: live rows of type %T were not read from this Delta table", l.name(), live)
	}
	return lr, nil
}

// columns returns the table's fields named cols, in that order.
func (l *lakeTable) columns(cols []string) (*arrow.Schema, error) {
	sc := l.t.ArrowSchema()
	fields := make([]arrow.Field, 0, len(cols))
	for _, c := range cols {
		i := sc.FieldIndices(c)
		if len(i) == 0 {
			return nil, fmt.Errorf("table %s: no column %s", l.name(), c)
		}
		fields = append(fields, sc.Field(i[0]))
	}
	return arrow.NewSchema(fields, nil), nil
}

// ScanLiveKeys reads the columns cols of the live rows of every file
// (files whose key statistics rule out every key are skipped; f is not
// used), reporting the rows whose first column holds one of keys.
func (l *lakeTable) ScanLiveKeys(ctx context.Context, f *lake.Filter, cols []string, keys []int64,
	fn func(rec arrow.RecordBatch, file int, pos lake.Positions) error) (lake.LiveRows, error) {
	sc, err := l.columns(cols)
	if err != nil {
		return nil, err
	}
	version, files := l.t.snapshot()
	lr := &liveRows{dir: l.t.dir, version: version, files: files}
	var want map[int64]bool
	var prune *lake.Filter
	if keys != nil {
		want = make(map[int64]bool, len(keys))
		vals := make([]any, len(keys))
		for i, k := range keys {
			want[k] = true
			vals[i] = k
		}
		prune = lake.In(cols[0], vals)
	}
	for i := range files {
		if prune != nil && !mayMatch(prune, &files[i]) {
			continue
		}
		err := l.t.readFile(ctx, files[i], sc, func(rec arrow.RecordBatch, pos lake.Positions) error {
			if want == nil {
				return fn(rec, i, pos)
			}
			sel, spos, err := l.t.selectRows(ctx, rec, pos, func(i int) bool { return want[keyAt(rec.Column(0), i)] })
			if err != nil || sel == nil {
				return err
			}
			defer sel.Release()
			return fn(sel, i, lake.Positions{Pos: spos})
		})
		if err != nil {
			return nil, l.wrap(err)
		}
	}
	return lr, nil
}

// ScanLiveWithout is ScanLiveKeys over the files that lack the column
// without (written before it was added).
func (l *lakeTable) ScanLiveWithout(ctx context.Context, without string, cols []string,
	fn func(rec arrow.RecordBatch, file int, pos lake.Positions) error) (lake.LiveRows, error) {
	sc, err := l.columns(cols)
	if err != nil {
		return nil, err
	}
	version, files := l.t.snapshot()
	lr := &liveRows{dir: l.t.dir, version: version, files: files}
	for i := range files {
		has, err := l.t.fileHasColumn(files[i], without)
		if err != nil {
			return nil, l.wrap(err)
		}
		if has {
			continue
		}
		err = l.t.readFile(ctx, files[i], sc, func(rec arrow.RecordBatch, pos lake.Positions) error { return fn(rec, i, pos) })
		if err != nil {
			return nil, l.wrap(err)
		}
	}
	return lr, nil
}

// ReadLiveRows reads the columns cols of rows, file by file.
func (l *lakeTable) ReadLiveRows(ctx context.Context, live lake.LiveRows, rows []lake.RowID, cols []string,
	fn func(rec arrow.RecordBatch, ids []lake.RowID) error) error {
	lr, err := l.liveOf(live)
	if err != nil {
		return err
	}
	sc, err := l.columns(cols)
	if err != nil {
		return err
	}
	byFile := map[int]map[int64]bool{}
	for _, r := range rows {
		if r.File < 0 || r.File >= len(lr.files) {
			return fmt.Errorf("table %s: row %+v: no such file in the live rows read", l.name(), r)
		}
		if byFile[r.File] == nil {
			byFile[r.File] = map[int64]bool{}
		}
		byFile[r.File][r.Pos] = true
	}
	order := make([]int, 0, len(byFile))
	for f := range byFile {
		order = append(order, f)
	}
	slices.Sort(order)
	for _, fi := range order {
		want := byFile[fi]
		err := l.t.readFile(ctx, lr.files[fi], sc, func(rec arrow.RecordBatch, pos lake.Positions) error {
			sel, spos, err := l.t.selectRows(ctx, rec, pos, func(i int) bool { return want[pos.At(i)] })
			if err != nil || sel == nil {
				return err
			}
			defer sel.Release()
			ids := make([]lake.RowID, len(spos))
			for i, p := range spos {
				ids[i] = lake.RowID{File: fi, Pos: p}
			}
			return fn(sel, ids)
		})
		if err != nil {
			return l.wrap(err)
		}
	}
	return nil
}

// MergeRows deletes rows (by position, as the live scan found them) and
// the rows del matches and appends recs in one commit on top of the
// version live was read at (Table.MergeAt).
func (l *lakeTable) MergeRows(ctx context.Context, live lake.LiveRows, rows []lake.RowID, del *lake.Filter, recs []arrow.RecordBatch, props map[string]string) error {
	if live == nil && len(rows) == 0 {
		return l.Merge(ctx, del, recs, props)
	}
	lr, err := l.liveOf(live)
	if err != nil {
		return err
	}
	if len(rows) > 0 && !l.MergeOnRead() {
		return fmt.Errorf("table %s: rows deleted by position need deletion vectors (merge-on-read); the table is copy-on-write", l.name())
	}
	byPath := map[string][]int64{}
	for _, r := range rows {
		if r.File < 0 || r.File >= len(lr.files) {
			return fmt.Errorf("table %s: row %+v: no such file in the live rows read", l.name(), r)
		}
		p := lr.files[r.File].Path
		byPath[p] = append(byPath[p], r.Pos)
	}
	_, err = l.t.MergeAt(ctx, lr.version, byPath, del, recs, props)
	return l.wrap(err)
}

// mergeAttempts bounds Merge's retries after losing races.
const mergeAttempts = 20

// Merge deletes the rows del matches and appends recs in one commit; a
// commit that loses the race to another writer is recomputed on the new
// state (the rows del matches may have changed).
func (l *lakeTable) Merge(ctx context.Context, del *lake.Filter, recs []arrow.RecordBatch, props map[string]string) error {
	for attempt := 1; ; attempt++ {
		_, err := l.t.MergeAt(ctx, l.t.Version(), nil, del, recs, props)
		if err == nil || !errors.Is(err, errMoved) || attempt == mergeAttempts {
			return l.wrap(err)
		}
		if err := l.t.Refresh(ctx); err != nil {
			return l.wrap(err)
		}
	}
}

// String names the table (for logs).
func (l *lakeTable) String() string {
	return "Delta table " + strings.Join(l.ident, ".") + " at " + l.t.dir
}

// keyAt returns row i of an int or long key column (a null or another
// type: a value no key has).
func keyAt(a arrow.Array, i int) int64 {
	if a.IsNull(i) {
		return -1 << 63
	}
	switch x := a.(type) {
	case *array.Int64:
		return x.Value(i)
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Int16:
		return int64(x.Value(i))
	case *array.Int8:
		return int64(x.Value(i))
	}
	return -1 << 63
}
