package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// This file gives rows that predate a column the value the source reads
// for them: the constant DEFAULT of `ADD COLUMN … DEFAULT`, which
// PostgreSQL keeps as the column's missing value and never writes to the
// WAL. Bronze records it in its table property tidemark.defaults with the
// bronze snapshot current when it added the column (internal/bronze/
// defaults.go); the rows that snapshot holds read the value. So:
//
//   - a merge reads the bronze rows of snapshots up to that one with NULL in
//     the column replaced by the value (scanBronze);
//   - the silver rows written before silver had the column (in data files
//     without it) are rewritten with the value, in steps of at most
//     MaxChanges rows, each one commit that carries the cursor forward
//     (fillStep). Silver's table property tidemark.fill-pending lists the
//     columns still to fill; it is set in the commit that adds them, so a
//     crash resumes the fill, and maintenance does not compact the table
//     meanwhile (a rewritten file would hold the column as NULL).

// errFillFirst: the merge must wait for the pending fill (the caller runs
// it, then merges).
var errFillFirst = errors.New("silver: a default fill is pending on a copy-on-write table")

// PropFillPending is the silver table property listing (JSON) the columns
// whose older rows still have to be given their default.
const PropFillPending = "tidemark.fill-pending"

// fillPending parses PropFillPending.
func fillPending(s lake.Table) []string {
	var cols []string
	if raw := s.Properties()[PropFillPending]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &cols)
	}
	return cols
}

// FillPending reports the columns of silver table s whose older rows are
// still being given their default (for status and maintenance).
func FillPending(s lake.Table) []string { return fillPending(s) }

// segment is a sub-range (after, to] of bronze snapshots whose rows take
// the defaults of fills for NULL.
type segment struct {
	after, to int64
	fills     map[string]bronze.Default
}

// segments splits the bronze range (after, to] at the snapshots at which
// columns with a default were added. Bronze's history is one line, so a
// snapshot's sequence number says whether it is before, inside or after
// the range; a snapshot no longer in the metadata (expired) is before it.
func segments(b lake.Table, after, to int64, defs map[string]bronze.Default) ([]segment, error) {
	seqOf := func(id int64) (int64, bool) {
		if id == lake.NoSnapshot {
			return 0, true
		}
		si, err := b.Snapshot(id)
		return si.SequenceNumber, err == nil
	}
	lo, ok1 := seqOf(after)
	hi, ok2 := seqOf(to)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("bronze table %s: snapshot %d or %d is not in its metadata", strings.Join(b.Ident(), "."), after, to)
	}
	all := map[string]bronze.Default{}
	inside := map[string]int64{} // column -> sequence number of its snapshot, within (lo, hi)
	for name, d := range defs {
		seq, ok := seqOf(d.Snapshot)
		switch {
		case d.Snapshot == lake.NoSnapshot || !ok || seq <= lo:
		case seq >= hi:
			all[name] = d
		default:
			inside[name] = seq
		}
	}
	if len(inside) == 0 {
		return []segment{{after: after, to: to, fills: all}}, nil
	}
	hist, err := b.History(after, to)
	if err != nil {
		return nil, err
	}
	var out []segment
	from := after
	for i, si := range hist {
		cut := i == len(hist)-1
		for _, seq := range inside {
			cut = cut || seq == si.SequenceNumber
		}
		if !cut {
			continue
		}
		seg := segment{after: from, to: si.ID, fills: maps.Clone(all)}
		for name, seq := range inside {
			if seq >= si.SequenceNumber {
				seg.fills[name] = defs[name]
			}
		}
		out = append(out, seg)
		from = si.ID
	}
	return out, nil
}

// scanBronze is b.ScanAppended(after, to) with the defaults of bronze's
// tidemark.defaults applied to the rows that predate their columns.
func scanBronze(ctx context.Context, mem memory.Allocator, b lake.Table, after, to int64, fn func(arrow.RecordBatch) error) error {
	defs, err := bronze.Defaults(b.Properties())
	if err != nil {
		return fmt.Errorf("bronze table %s: %w", strings.Join(b.Ident(), "."), err)
	}
	if len(defs) == 0 {
		return b.ScanAppended(ctx, after, to, fn)
	}
	segs, err := segments(b, after, to, defs)
	if err != nil {
		return err
	}
	for _, seg := range segs {
		if len(seg.fills) == 0 {
			if err := b.ScanAppended(ctx, seg.after, seg.to, fn); err != nil {
				return err
			}
			continue
		}
		err := b.ScanAppended(ctx, seg.after, seg.to, func(rec arrow.RecordBatch) error {
			out, err := withDefaults(ctx, mem, rec, seg.fills)
			if err != nil {
				return err
			}
			defer out.Release()
			return fn(out)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// withDefaults returns rec with NULL in the columns of fills replaced by
// their defaults (a new reference the caller releases).
func withDefaults(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, fills map[string]bronze.Default) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, rec.NumCols())
	changed := false
	for i, f := range rec.Schema().Fields() {
		cols[i] = rec.Column(i)
		d, ok := fills[f.Name]
		if !ok || cols[i].NullN() == 0 {
			continue
		}
		c, err := coalesce(ctx, mem, cols[i], d)
		if err != nil {
			for k, a := range cols[:i] {
				if a != rec.Column(k) {
					a.Release()
				}
			}
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		cols[i] = c
		changed = true
	}
	if !changed {
		rec.Retain()
		return rec, nil
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for i, a := range cols {
		if a != rec.Column(i) {
			a.Release()
		}
	}
	return out, nil
}

// coalesce returns col with its NULLs replaced by d's value.
func coalesce(ctx context.Context, mem memory.Allocator, col arrow.Array, d bronze.Default) (arrow.Array, error) {
	one, err := bronze.DefaultArray(mem, col.DataType(), d)
	if err != nil {
		return nil, err
	}
	defer one.Release()
	cat, err := array.Concatenate([]arrow.Array{col, one}, mem)
	if err != nil {
		return nil, err
	}
	defer cat.Release()
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	n := col.Len()
	ib.Reserve(n)
	for i := range n {
		if col.IsNull(i) {
			ib.Append(int64(n))
		} else {
			ib.Append(int64(i))
		}
	}
	idx := ib.NewArray()
	defer idx.Release()
	return compute.TakeArray(compute.WithAllocator(ctx, mem), cat, idx)
}

// fillStep gives at most limit silver rows that predate column col its
// default (fewer once their batches hold maxBytes of Arrow memory), in one
// commit that carries the silver summary's tidemark keys
// forward. done: there were none left.
func (j *job) fillStep(ctx context.Context, col string, d bronze.Default, limit, maxBytes int64) (done bool, err error) {
	s := j.s
	sch := s.ArrowSchema()
	names := make([]string, len(sch.Fields()))
	for i, f := range sch.Fields() {
		names[i] = f.Name
	}
	var (
		recs  []arrow.RecordBatch
		ids   []lake.RowID
		n     int64
		bytes int64 // Arrow memory of the rows taken (their batches' buffers: an upper bound)
	)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	// A copy-on-write delete rewrites the files it may touch with their
	// other rows, and a rewritten file holds the column (as NULL), so the
	// fill would miss them: there one step takes every file.
	whole := !s.MergeOnRead()
	if whole {
		limit, maxBytes = math.MaxInt64, math.MaxInt64
	}
	files := map[int]bool{} // whole: file -> taken
	live, err := s.ScanLiveWithout(ctx, col, names, func(rec arrow.RecordBatch, file int, pos lake.Positions) error {
		take := min(rec.NumRows(), limit-n)
		full := take <= 0 || (n > 0 && bytes >= maxBytes)
		if whole {
			taken, seen := files[file]
			if !seen {
				taken = !full
				files[file] = taken
			}
			if !taken {
				return nil
			}
			take = rec.NumRows()
		} else if full {
			return nil
		}
		bytes += lake.RecordBytes(rec)
		part := rec.NewSlice(0, take)
		defer part.Release()
		out, err := withDefaults(ctx, j.m.mem, part, map[string]bronze.Default{col: d})
		if err != nil {
			return err
		}
		// The table's own Arrow schema (field ids), same columns.
		cols := make([]arrow.Array, out.NumCols())
		for i := range cols {
			cols[i] = out.Column(i)
		}
		recs = append(recs, array.NewRecordBatch(sch, cols, out.NumRows()))
		out.Release()
		for i := range int(take) {
			ids = append(ids, lake.RowID{File: file, Pos: pos.At(i)})
		}
		n += take
		return nil
	})
	if err != nil {
		return false, err
	}
	if n == 0 {
		return true, nil
	}
	props := map[string]string{}
	for k, v := range s.Summary() {
		if strings.HasPrefix(k, "tidemark.") {
			props[k] = v
		}
	}
	if s.MergeOnRead() {
		err = s.MergeRows(ctx, live, ids, nil, recs, props)
	} else {
		err = j.fillCopyOnWrite(ctx, recs, props)
	}
	if err != nil {
		if errors.Is(err, lake.ErrCommitConflict) {
			return false, fault.MarkTransient(err)
		}
		return false, err
	}
	j.m.log.Info("silver rows given the default of a column added at the source", "table", strings.Join(s.Ident(), "."),
		"column", col, "rows", n)
	// The step is committed; a crash here resumes with the next one.
	if err := failpoint.Err("silver-after-fill-step"); err != nil {
		return false, err
	}
	return false, nil
}

// fillCopyOnWrite replaces the rows of recs' keys (a one-column key) by
// recs on a copy-on-write table.
func (j *job) fillCopyOnWrite(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) error {
	if len(j.key) != 1 {
		return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
			"silver table %s (copy-on-write, key of %d columns): the rows that predate a column added with a default cannot be rewritten in steps; "+
				"drop the silver table (the next merge rebuilds it from bronze) or use merge-on-read", strings.Join(j.s.Ident(), "."), len(j.key)), nil)
	}
	var keys []any
	for _, r := range recs {
		a := column(r, j.key[0])
		for i := range a.Len() {
			keys = append(keys, goValue(a, i))
		}
	}
	return j.s.Merge(ctx, lake.In(j.key[0], keys), recs, props)
}

// fill gives the silver rows that predate the columns PropFillPending
// lists their defaults, step by step, then clears the property.
func (j *job) fill(ctx context.Context) error {
	pending := fillPending(j.s)
	if len(pending) == 0 {
		return nil
	}
	defs, err := bronze.Defaults(j.b.Properties())
	if err != nil {
		return err
	}
	limit := int64(j.m.opts.MaxChanges)
	for len(pending) > 0 {
		col := pending[0]
		d, ok := defs[col]
		if ok {
			for {
				if err := ctx.Err(); err != nil {
					return err
				}
				done, err := j.fillStep(ctx, col, d, limit, j.m.opts.MaxBytes)
				if err != nil {
					return err
				}
				if done {
					break
				}
			}
		}
		pending = pending[1:]
		js, _ := json.Marshal(pending)
		if len(pending) == 0 {
			js = []byte("[]")
		}
		if err := j.s.SetProperties(ctx, map[string]string{PropFillPending: string(js)}); err != nil {
			return err
		}
	}
	return nil
}
