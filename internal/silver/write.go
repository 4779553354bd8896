package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/lake"
)

// This file writes a merge's output: the rows silver holds afterwards for
// the touched keys, assembled column by column from the input rows the fold
// chose, and the dead letters.

// outRow is one row to append: its source columns come from base (or fill),
// its position columns from meta.
type outRow struct {
	base, meta int
	fill       map[int]int
	deleted    bool
}

func (r *outRow) source(col int) int {
	if f, ok := r.fill[col]; ok {
		return f
	}
	return r.base
}

// build assembles rows as record batches of the silver table's schema sc
// (field-id metadata dropped: the table maps columns by name), in order:
// one batch, or more where a column keeps a large run of an input batch
// as it is (gatherRuns) and the batches are cut at its ends, as zero-copy
// slices. Release each batch.
func (in *input) build(ctx context.Context, mem memory.Allocator, sc *arrow.Schema, rows []outRow) ([]arrow.RecordBatch, error) {
	fields := make([]arrow.Field, len(sc.Fields()))
	cols := make([][]arrow.Array, len(sc.Fields()))
	defer func() {
		for _, c := range cols {
			for _, a := range c {
				a.Release()
			}
		}
	}()
	one := true
	for j, f := range sc.Fields() {
		fields[j] = arrow.Field{Name: f.Name, Type: f.Type, Nullable: f.Nullable}
		var err error
		switch f.Name {
		case ColDeleted:
			b := array.NewBooleanBuilder(mem)
			for _, r := range rows {
				b.Append(r.deleted)
			}
			cols[j] = []arrow.Array{b.NewArray()}
			b.Release()
			continue
		case ColLSN, ColSeq, ColTS:
			cols[j], err = in.gather(ctx, mem, f, rows, func(r *outRow) int { return r.meta })
		default:
			c, ok := in.colIdx[f.Name]
			if !ok {
				cols[j] = []arrow.Array{array.MakeArrayOfNull(mem, f.Type, len(rows))}
				continue
			}
			cols[j], err = in.gather(ctx, mem, f, rows, func(r *outRow) int { return r.source(c) })
		}
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		fields[j].Type = cols[j][0].DataType()
		one = one && len(cols[j]) == 1
	}
	out := arrow.NewSchema(fields, nil)
	if one {
		flat := make([]arrow.Array, len(cols))
		for j, c := range cols {
			flat[j] = c[0]
		}
		return []arrow.RecordBatch{array.NewRecordBatch(out, flat, int64(len(rows)))}, nil
	}
	tbl := array.NewTableFromSlice(out, cols)
	defer tbl.Release()
	tr := array.NewTableReader(tbl, -1)
	defer tr.Release()
	var recs []arrow.RecordBatch
	for tr.Next() {
		rec := tr.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	return recs, nil
}

// gather takes, for each row, the value of column f from the input row
// pick names: it concatenates the column of every input batch and takes.
// The column comes in chunks (one, unless gatherRuns keeps large runs as
// they are), of the rows in order.
func (in *input) gather(ctx context.Context, mem memory.Allocator, f arrow.Field, rows []outRow, pick func(*outRow) int) ([]arrow.Array, error) {
	parts := make([]arrow.Array, 0, len(in.batches))
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	for _, b := range in.batches {
		a := column(b, f.Name)
		switch {
		case a == nil:
			a = array.MakeArrayOfNull(mem, f.Type, int(b.NumRows()))
		case !arrow.TypeEqual(a.DataType(), f.Type):
			c, err := compute.CastArray(ctx, a, compute.SafeCastOptions(f.Type))
			if err != nil {
				return nil, fmt.Errorf("cast %s to %s: %w", a.DataType(), f.Type, err)
			}
			a = c
		default:
			a.Retain()
		}
		parts = append(parts, a)
	}
	if out, ok, err := in.gatherRuns(mem, f, parts, rows, pick); ok || err != nil {
		return out, err
	}
	all, err := array.Concatenate(parts, mem)
	if err != nil {
		return nil, err
	}
	defer all.Release()
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	for i := range rows {
		if ref := pick(&rows[i]); ref >= 0 {
			ib.Append(int64(ref))
		} else {
			ib.AppendNull()
		}
	}
	idx := ib.NewArray()
	defer idx.Release()
	out, err := compute.TakeArray(compute.WithAllocator(ctx, mem), all, idx)
	if err != nil {
		return nil, err
	}
	return []arrow.Array{out}, nil
}

// gatherRuns is gather when the rows picked come in long runs of
// consecutive rows of one batch (a build's rows are the bronze rows in key
// order, and bronze holds snapshot chunks in key order): it slices the runs
// out of the batches' columns (parts) and copies the short ones once, into
// one chunk of the output between two long ones. A run holding at least
// keepRunBytes of values is not copied: its chunk is the slice of the
// input batch (for a table holding one 200 MiB value, the value is held
// once, in the spilled bronze batch, not again in the output). ok is false
// when the runs are too short for that to pay. A few runs always pay,
// however short: the other way copies every value twice (concatenate,
// then take), which for the two snapshot chunks of a table holding one
// 200 MiB value was two more copies of it in flight.
func (in *input) gatherRuns(mem memory.Allocator, f arrow.Field, parts []arrow.Array, rows []outRow, pick func(*outRow) int) (out []arrow.Array, ok bool, err error) {
	type run struct{ batch, row, n int } // batch -1: nulls
	var runs []run
	maxRuns := max(16, len(rows)/64)
	end := -1 // the global index after the current run's batch
	for i := range rows {
		ref := pick(&rows[i])
		if n := len(runs); n > 0 {
			r := &runs[n-1]
			switch {
			case ref < 0 && r.batch < 0:
				r.n++
				continue
			case ref >= 0 && r.batch >= 0 && ref == in.offsets[r.batch]+r.row+r.n && ref < end:
				r.n++
				continue
			}
		}
		if len(runs) == maxRuns {
			return nil, false, nil
		}
		if ref < 0 {
			runs = append(runs, run{-1, 0, 1})
			continue
		}
		b, found := slices.BinarySearch(in.offsets, ref)
		if !found {
			b--
		}
		end = in.offsets[b] + int(in.batches[b].NumRows())
		runs = append(runs, run{b, ref - in.offsets[b], 1})
	}
	pieces := make([]arrow.Array, 0, len(runs))
	defer func() {
		for _, p := range pieces {
			p.Release()
		}
	}()
	for _, r := range runs {
		if r.batch < 0 {
			pieces = append(pieces, array.MakeArrayOfNull(mem, f.Type, r.n))
		} else {
			pieces = append(pieces, array.NewSlice(parts[r.batch], int64(r.row), int64(r.row+r.n)))
		}
	}
	defer func() {
		if err != nil {
			for _, a := range out {
				a.Release()
			}
			out = nil
		}
	}()
	// flush appends pieces[from:to] as one chunk: copied into it when
	// there are several, the piece itself when one.
	flush := func(from, to int) error {
		switch to - from {
		case 0:
			return nil
		case 1:
			pieces[from].Retain()
			out = append(out, pieces[from])
			return nil
		}
		a, err := array.Concatenate(pieces[from:to], mem)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	}
	from := 0
	for i, p := range pieces {
		if valueBytes(p) < keepRunBytes {
			continue
		}
		if err = flush(from, i); err != nil {
			return out, true, err
		}
		if err = flush(i, i+1); err != nil {
			return out, true, err
		}
		from = i + 1
	}
	err = flush(from, len(pieces))
	return out, true, err
}

// keepRunBytes is the values' bytes from which gatherRuns keeps a run of
// an input batch as its own chunk (and the merge writes it as its own
// batch) rather than copying it into the output.
const keepRunBytes = 4 << 20

// valueBytes is the bytes of a's variable-length values (0 for a column of
// another type).
func valueBytes(a arrow.Array) int {
	if v, ok := a.(interface{ ValueBytes() []byte }); ok {
		return len(v.ValueBytes())
	}
	return 0
}

// Dead-letter table columns.
const (
	dlTable    = "source_table"
	dlKey      = "key"
	dlOp       = "op"
	dlError    = "error"
	dlRow      = "row"
	dlSnapshot = "bronze_snapshot"
	dlMergedAt = "merged_at"
)

func deadLetterSchema() *arrow.Schema {
	f := func(name string, t arrow.DataType, doc string) arrow.Field { return newColumn(name, t, true, doc) }
	str, long, ts := arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64, arrow.FixedWidthTypes.Timestamp_us
	return arrow.NewSchema([]arrow.Field{
		f(dlTable, str, "source table, schema.table"),
		f(dlKey, str, "the change's key, as a JSON object"),
		f(dlOp, str, "the change's cdc_op"),
		f(dlError, str, "why the change was not merged"),
		f(dlRow, str, "the bronze row, as a JSON object"),
		f(ColLSN, long, "the change's position"),
		f(ColSeq, long, ""),
		f(ColTS, ts, "the change's commit time"),
		f(dlSnapshot, long, "the bronze snapshot merged through when the change was set aside"),
		f(dlMergedAt, ts, "when the merge set it aside"),
	}, nil)
}

// openDeadLetter loads (or creates) silver.<source>._dead_letter.
func openDeadLetter(ctx context.Context, cat lake.Catalog, source string) (lake.KeyedTable, error) {
	id := DeadLetterIdent(source)
	t, err := cat.Open(ctx, id)
	if errors.Is(err, lake.ErrNoSuchTable) {
		t, err = cat.Create(ctx, id, lake.TableSpec{Schema: deadLetterSchema()})
		if errors.Is(err, lake.ErrTableExists) {
			t, err = cat.Open(ctx, id)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", strings.Join(id, "."), err)
	}
	return t, nil
}

// writeDeadLetters appends the input's dead rows to the dead-letter table,
// skipping those a crashed earlier attempt of the same merge already wrote
// (same table and position), so a retried merge adds nothing twice.
func (in *input) writeDeadLetters(ctx context.Context, mem memory.Allocator, dl lake.KeyedTable, table string, snapshot int64, now time.Time) (int, error) {
	if len(in.dead) == 0 {
		return 0, nil
	}
	type key struct{ lsn, seq int64 }
	lsns := make([]any, 0, len(in.dead))
	for _, d := range in.dead {
		b, i := in.locate(d.ref)
		if a, ok := column(b, ColLSN).(*array.Int64); ok && !a.IsNull(i) {
			lsns = append(lsns, a.Value(i))
		}
	}
	have := map[key]bool{}
	if len(lsns) > 0 {
		err := dl.ScanWhere(ctx, lake.And(lake.Equal(dlTable, table), lake.In(ColLSN, lsns)), func(rec arrow.RecordBatch) error {
			l, _ := column(rec, ColLSN).(*array.Int64)
			s, _ := column(rec, ColSeq).(*array.Int64)
			for i := 0; l != nil && s != nil && i < int(rec.NumRows()); i++ {
				have[key{l.Value(i), s.Value(i)}] = true
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	sc := dl.ArrowSchema()
	rb := array.NewRecordBuilder(mem, sc)
	defer rb.Release()
	idx := map[string]int{}
	for i, f := range sc.Fields() {
		idx[f.Name] = i
	}
	str := func(name, v string) { rb.Field(idx[name]).(*array.StringBuilder).Append(v) }
	n := 0
	for _, d := range in.dead {
		b, i := in.locate(d.ref)
		var lsn, seq int64
		if a, ok := column(b, ColLSN).(*array.Int64); ok && !a.IsNull(i) {
			lsn = a.Value(i)
		}
		if a, ok := column(b, ColSeq).(*array.Int64); ok && !a.IsNull(i) {
			seq = a.Value(i)
		}
		if have[key{lsn, seq}] {
			continue
		}
		have[key{lsn, seq}] = true
		str(dlTable, table)
		str(dlKey, rowJSON(b, i, in.key))
		op := ""
		if a, ok := column(b, bronze.ColOp).(*array.String); ok && !a.IsNull(i) {
			op = a.Value(i)
		}
		str(dlOp, op)
		str(dlError, d.reason)
		str(dlRow, rowJSON(b, i, nil))
		rb.Field(idx[ColLSN]).(*array.Int64Builder).Append(lsn)
		rb.Field(idx[ColSeq]).(*array.Int64Builder).Append(seq)
		tsb := rb.Field(idx[ColTS]).(*array.TimestampBuilder)
		if a, ok := column(b, ColTS).(*array.Timestamp); ok && !a.IsNull(i) {
			tsb.Append(a.Value(i))
		} else {
			tsb.AppendNull()
		}
		rb.Field(idx[dlSnapshot]).(*array.Int64Builder).Append(snapshot)
		rb.Field(idx[dlMergedAt]).(*array.TimestampBuilder).Append(arrow.Timestamp(now.UnixMicro()))
		n++
	}
	if n == 0 {
		return 0, nil
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if err := dl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
		return 0, err
	}
	return n, nil
}

// rowJSON renders row i of b as a JSON object: only the columns named in
// cols, or every column when cols is nil.
func rowJSON(b arrow.RecordBatch, i int, cols []string) string {
	m := map[string]any{}
	for j, f := range b.Schema().Fields() {
		if cols != nil && !contains(cols, f.Name) {
			continue
		}
		c := b.Column(j)
		if c.IsNull(i) {
			m[f.Name] = nil
		} else {
			m[f.Name] = c.GetOneForMarshal(i)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprintf("{%q: %q}", "unrenderable", err.Error())
	}
	return string(out)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
