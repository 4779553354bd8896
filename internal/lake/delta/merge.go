package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake"
)

// errMoved: the table has commits after the version a merge read. It is
// an ErrCommitConflict.
var errMoved = fmt.Errorf("the table moved since it was read: %w", ErrCommitConflict)

// MergeOnRead reports whether the table deletes rows with deletion
// vectors (delta.enableDeletionVectors) rather than by rewriting files.
func (t *Table) MergeOnRead() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.meta.Configuration[PropDeletionVectors] == "true" && slices.Contains(t.st.protocol.ReaderFeatures, "deletionVectors")
}

// MergeAt deletes rows (a file's add path -> positions in it) and the rows
// del matches (nil: none), and appends recs, in one commit with props as
// its userMetadata, on top of version read only: when the table is not at
// read (the cached snapshot, or the log, has a later commit), nothing is
// written and the error wraps ErrCommitConflict (reload, recompute).
//
// On a table with deletion vectors the files keep their rows
// (merge-on-read); without, every file holding a deleted row is rewritten
// without it (copy-on-write: its live rows are read into memory). The
// table must not be append-only. With the change data feed on, a commit
// that deletes rows writes a change data file (cdc.go): the files holding
// deleted rows are read for their preimages.
func (t *Table) MergeAt(ctx context.Context, read int64, rows map[string][]int64, del *lake.Filter, recs []arrow.RecordBatch, props map[string]string) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mergeAt(ctx, read, rows, del, recs, props, nil)
}

// mergeAt is MergeAt (t.mu held), committing besides what the parts of a
// staged merge wrote (pre, nil: none; stage.go): their rows deleted are
// deleted with the others, their files added, their change data files
// (which hold their deletes and inserts) committed with the one of the
// rows del matches. On an error before the commit, pre's files are
// removed with the merge's own.
func (t *Table) mergeAt(ctx context.Context, read int64, rows map[string][]int64, del *lake.Filter, recs []arrow.RecordBatch, props map[string]string, pre *staged) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, fmt.Errorf("merge into Delta table %s: %w", t.dir, err)
	}
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return fail(err)
	}
	conf := t.st.meta.Configuration
	switch {
	case conf[PropAppendOnly] == "true":
		if len(rows) > 0 || del != nil {
			return fail(errors.New("the table is append-only: rows cannot be deleted from it"))
		}
	case conf[PropChangeDataFeed] == "true" && len(t.st.meta.PartitionColumns) > 0 && (len(rows) > 0 || del != nil):
		return fail(fmt.Errorf("%w: change data files of a partitioned table", ErrUnsupported))
	}
	if t.st.version != read {
		return fail(fmt.Errorf("read at version %d, the table is at %d: %w", read, t.st.version, errMoved))
	}
	dvMode := conf[PropDeletionVectors] == "true" && slices.Contains(t.st.protocol.ReaderFeatures, "deletionVectors")
	sc := t.schema
	// The rows del matches, by position.
	if del != nil {
		rows = cloneRows(rows)
		cols := filterSchema(sc, del)
		for _, k := range slices.Clone(t.st.order) {
			f := t.st.files[k]
			if !mayMatch(del, f) {
				continue
			}
			err := t.readFile(ctx, *f, cols, func(rec arrow.RecordBatch, pos lake.Positions) error {
				for i := 0; i < int(rec.NumRows()); i++ {
					ok, err := del.MatchRow(rec, i)
					if err != nil {
						return err
					}
					if ok {
						rows[f.Path] = append(rows[f.Path], pos.At(i))
					}
				}
				return nil
			})
			if err != nil {
				return fail(err)
			}
		}
	}
	if pre != nil {
		if !dvMode {
			return fail(errors.New("a staged merge deletes rows with deletion vectors, which the table lacks"))
		}
		// rows (the rows del matches) are deleted by this commit alone;
		// a row a part deleted is in that part's change data already.
		rows = pre.without(rows)
	}
	var deleted int64
	for _, ps := range rows {
		deleted += int64(len(ps))
	}
	var changes []dvChange
	var removed []*Add
	// kept: the live rows of files rewritten (copy-on-write); gone: the
	// rows deleted, for the change data file.
	var kept, gone []arrow.RecordBatch
	defer func() {
		for _, r := range append(kept, gone...) {
			r.Release()
		}
	}()
	cdf := conf[PropChangeDataFeed] == "true" && deleted > 0
	if dvMode {
		all := rows
		if pre != nil {
			all = pre.union(rows)
			deleted += pre.deleted()
		}
		var err error
		if changes, _, err = t.planDV(all); err != nil {
			return fail(err)
		}
	}
	if !dvMode || cdf {
		// Copy-on-write: each file with deleted rows is removed, and its
		// other live rows appended with recs. The change data feed needs
		// the rows deleted.
		paths := make([]string, 0, len(rows))
		for p := range rows {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		for _, p := range paths {
			f := t.activeFile(p)
			if f == nil {
				return fail(fmt.Errorf("file %s is not in the table (version %d)", p, t.st.version))
			}
			deleting := map[int64]bool{}
			for _, r := range rows[p] {
				deleting[r] = true
			}
			err := t.readFile(ctx, *f, sc, func(rec arrow.RecordBatch, pos lake.Positions) error {
				if !dvMode {
					k, _, err := t.selectRows(ctx, rec, pos, func(i int) bool { return !deleting[pos.At(i)] })
					if err != nil {
						return err
					}
					if k != nil {
						kept = append(kept, k)
					}
				}
				if cdf {
					g, _, err := t.selectRows(ctx, rec, pos, func(i int) bool { return deleting[pos.At(i)] })
					if err != nil {
						return err
					}
					if g != nil {
						gone = append(gone, g)
					}
				}
				return nil
			})
			if err != nil {
				return fail(err)
			}
			if !dvMode {
				removed = append(removed, f)
			}
		}
	}
	adds, err := t.writeData(ctx, append(slices.Clone(recs), kept...))
	if err != nil {
		return fail(err)
	}
	var cdc *CDCFile
	if cdf {
		if cdc, err = t.writeChanges(ctx, gone, recs); err != nil {
			for _, a := range adds {
				if p, err := t.filePath(a.add.Path); err == nil {
					os.Remove(p)
				}
			}
			return fail(err)
		}
	}
	cdcs := []*CDCFile{}
	if pre != nil {
		adds = append(slices.Clone(pre.adds), adds...)
		cdcs = append(cdcs, pre.cdcs...)
	}
	if cdc != nil {
		cdcs = append(cdcs, cdc)
	}
	drop := func() {
		for _, a := range adds {
			if p, err := t.filePath(a.add.Path); err == nil {
				os.Remove(p)
			}
		}
		for _, c := range cdcs {
			os.Remove(filepath.Join(t.dir, filepath.FromSlash(c.Path)))
		}
	}
	if err := ctx.Err(); err != nil {
		drop()
		return 0, err
	}
	v := read + 1
	acts := t.mutationActions(read, changes, removed, adds, Commit{Props: props}, nowMs(), deleted)
	for _, c := range cdcs {
		raw, err := json.Marshal(c)
		if err != nil {
			drop()
			return fail(err)
		}
		acts = append(acts, action{CDC: raw})
	}
	data, err := encodeCommit(acts)
	if err != nil {
		drop()
		return fail(err)
	}
	err = putIfAbsent(t.dir, v, data)
	var unsynced *unsyncedError
	switch {
	case err == nil || errors.As(err, &unsynced):
		t.st.apply(v, acts)
		if err != nil {
			return v, fmt.Errorf("merge into Delta table %s: %w", t.dir, err)
		}
		return v, t.maybeCheckpoint(v)
	case errors.Is(err, errVersionTaken):
		drop()
		if st, err := loadState(ctx, t.dir); err == nil {
			_ = t.setState(st)
		}
		return fail(fmt.Errorf("version %d was committed by another writer: %w", v, errMoved))
	default:
		drop()
		return fail(err)
	}
}

func cloneRows(rows map[string][]int64) map[string][]int64 {
	out := make(map[string][]int64, len(rows))
	for k, v := range rows {
		out[k] = slices.Clone(v)
	}
	return out
}

// filterSchema returns the columns of sc that f names.
func filterSchema(sc *arrow.Schema, f *lake.Filter) *arrow.Schema {
	names := map[string]bool{}
	var walk func(f *lake.Filter)
	walk = func(f *lake.Filter) {
		if f.Col != "" {
			names[f.Col] = true
		}
		for _, k := range f.Kids {
			walk(k)
		}
	}
	walk(f)
	var fields []arrow.Field
	for _, fl := range sc.Fields() {
		if names[fl.Name] {
			fields = append(fields, fl)
		}
	}
	return arrow.NewSchema(fields, nil)
}

// fileBounds are the statistics of a file's add action that prune it.
type fileBounds struct {
	NumRecords *int64                     `json:"numRecords"`
	Min        map[string]json.RawMessage `json:"minValues"`
	Max        map[string]json.RawMessage `json:"maxValues"`
	Nulls      map[string]json.RawMessage `json:"nullCount"`
}

func boundsOf(a *Add) (fileBounds, bool) {
	var b fileBounds
	if a.Stats == "" || json.Unmarshal([]byte(a.Stats), &b) != nil {
		return b, false
	}
	return b, true
}

// mayMatch reports whether file a may hold a row f matches, from its
// statistics (min/max of integer and string columns; true when they say
// nothing).
func mayMatch(f *lake.Filter, a *Add) bool {
	b, ok := boundsOf(a)
	if !ok {
		return true
	}
	return b.mayMatch(f)
}

func (b fileBounds) mayMatch(f *lake.Filter) bool {
	switch f.Op {
	case lake.OpAnd:
		for _, k := range f.Kids {
			if !b.mayMatch(k) {
				return false
			}
		}
		return true
	case lake.OpOr:
		for _, k := range f.Kids {
			if b.mayMatch(k) {
				return true
			}
		}
		return len(f.Kids) == 0
	}
	lo, hi := b.Min[f.Col], b.Max[f.Col]
	if lo == nil || hi == nil {
		return true
	}
	for _, v := range f.Vals {
		cl, okl := compareStat(v, lo)
		ch, okh := compareStat(v, hi)
		if !okl || !okh {
			return true
		}
		switch f.Op {
		case lake.OpIn, lake.OpEqual:
			if cl >= 0 && ch <= 0 {
				return true
			}
		case lake.OpLess: // some value below v: min < v
			return cl > 0
		case lake.OpAtLeast: // some value at or above v: max >= v
			return ch <= 0
		default:
			return true
		}
	}
	return false
}

// compareStat compares a filter value with a statistic (a JSON number for
// integer columns, a string for string columns); ok is false when they do
// not compare.
func compareStat(v any, raw json.RawMessage) (int, bool) {
	switch x := v.(type) {
	case int32, int64, int:
		var n int64
		switch y := x.(type) {
		case int32:
			n = int64(y)
		case int64:
			n = y
		case int:
			n = int64(y)
		}
		s, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0, false
		}
		switch {
		case n < s:
			return -1, true
		case n > s:
			return 1, true
		}
		return 0, true
	case string:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		switch {
		case x < s:
			return -1, true
		case x > s:
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
