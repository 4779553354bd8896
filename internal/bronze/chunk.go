package bronze

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

var _ pipeline.ChunkSink = (*Writer)(nil)

// WriteChunk implements pipeline.ChunkSink: it buffers a snapshot chunk
// with its table state props, as WriteBatch does for the same rows as
// changes. The chunk's arrays become the record's columns as they are
// (their types are the table's; a column the table has widened since is
// converted), so a chunk costs no per-row work here.
func (w *Writer) WriteChunk(ctx context.Context, c *change.Chunk, props map[string]string) error {
	tb, ok := w.tables[c.Table]
	if !ok {
		return fmt.Errorf("bronze: chunk for table %s before OpenTable", c.Table)
	}
	if c.Rows > 0 {
		l, err := w.layout(ctx, c.Table, tb, c.Schema, c.Pos(0))
		if err != nil {
			return err
		}
		rec, err := w.chunkRecord(tb, l, c)
		if err != nil {
			return fmt.Errorf("bronze: table %s at %s: %w", tb.name(), c.Pos(0), err)
		}
		// Rows already in the builder come first, as they were written.
		if tb.b.Field(0).Len() > 0 {
			tb.recs = append(tb.recs, tb.b.NewRecordBatch())
		}
		tb.recs = append(tb.recs, rec)
		tb.rows += c.Rows
		tb.bytes += c.Size
		w.buffered += c.Size
		tb.ops[OpIndexRead] += int64(c.Rows)
		tb.chunks++
	}
	tb.noteProgress(props)
	return nil
}

// chunkRecord is c as a record of tb's schema: the chunk's columns, NULL
// for the table's columns the chunk lacks, and the cdc_ columns of reads
// at c's positions.
func (w *Writer) chunkRecord(tb *tableBuf, l *layout, c *change.Chunk) (arrow.RecordBatch, error) {
	n := c.Rows
	fields := tb.sch.Fields()
	cols := make([]arrow.Array, len(fields))
	defer func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}()
	for i, a := range c.Columns {
		if a.Len() != n {
			return nil, fmt.Errorf("chunk column %q holds %d rows, want %d", c.Schema.Fields[i].Name, a.Len(), n)
		}
		j := l.idx[i]
		conv, err := asType(w.mem, a, fields[j].Type)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Schema.Fields[i].Name, err)
		}
		cols[j] = conv
	}
	fills := l.fill
	for _, j := range l.missing {
		if v, ok := tb.chunkFill(fields[j].Name, c.LSN); ok {
			fills = append(fills[:len(fills):len(fills)], fill{j, v})
			continue
		}
		cols[j] = array.MakeArrayOfNull(w.mem, fields[j].Type, n)
	}
	for _, f := range fills {
		b := array.NewBuilder(w.mem, fields[f.j].Type)
		for range n {
			if err := appendValue(b, f.v); err != nil {
				b.Release()
				return nil, fmt.Errorf("column %q (its default): %w", fields[f.j].Name, err)
			}
		}
		cols[f.j] = b.NewArray()
		b.Release()
	}
	x := tb.cdc
	cols[x.op] = repeatString(w.mem, fields[x.op].Type, change.OpRead.String(), n)
	cols[x.ts] = fillInt64(w.mem, fields[x.ts].Type, n, func(int) int64 { return c.CommitTime.UnixMicro() })
	now := w.now().UnixMicro()
	cols[x.processedAt] = fillInt64(w.mem, fields[x.processedAt].Type, n, func(int) int64 { return now })
	cols[x.lsn] = fillInt64(w.mem, fields[x.lsn].Type, n, func(int) int64 { return int64(c.LSN) })
	cols[x.txID] = fillInt64(w.mem, fields[x.txID].Type, n, func(int) int64 { return c.TxID })
	cols[x.seq] = fillInt64(w.mem, fields[x.seq].Type, n, func(i int) int64 { return c.Pos(i).Seq })
	unchanged, err := emptyLists(w.mem, fields[x.unchanged].Type, n)
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", ColUnchanged, err)
	}
	cols[x.unchanged] = unchanged
	for j, a := range cols {
		if a == nil {
			return nil, fmt.Errorf("no value for column %q", fields[j].Name)
		}
	}
	return array.NewRecordBatch(tb.sch, cols, int64(n)), nil
}

// asType returns a (a new reference) as an array of type to: as it is when
// its type is to, or differs only in field metadata (a list's element field
// ID); converted when the table widened the column (int to long, float to
// double, a decimal's precision, a list's element).
func asType(mem memory.Allocator, a arrow.Array, to arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(a.DataType(), to, arrow.CheckMetadata()) {
		a.Retain()
		return a, nil
	}
	if arrow.TypeEqual(a.DataType(), to) {
		d := a.Data()
		nd := array.NewData(to, d.Len(), d.Buffers(), d.Children(), d.NullN(), d.Offset())
		defer nd.Release()
		return array.MakeFromData(nd), nil
	}
	return widen(mem, a, to)
}

// widen converts a to the wider type to, value by value.
func widen(mem memory.Allocator, a arrow.Array, to arrow.DataType) (arrow.Array, error) {
	b := array.NewBuilder(mem, to)
	defer b.Release()
	b.Reserve(a.Len())
	switch src := a.(type) {
	case *array.Int32:
		if dst, ok := b.(*array.Int64Builder); ok {
			widenEach(src, dst, func(v int32) int64 { return int64(v) })
			return b.NewArray(), nil
		}
	case *array.Float32:
		if dst, ok := b.(*array.Float64Builder); ok {
			widenEach(src, dst, func(v float32) float64 { return float64(v) })
			return b.NewArray(), nil
		}
	case *array.Decimal128:
		dst, ok := b.(*array.Decimal128Builder)
		if !ok || src.DataType().(*arrow.Decimal128Type).Scale != to.(*arrow.Decimal128Type).Scale {
			break
		}
		p := to.(*arrow.Decimal128Type).Precision
		for i := range src.Len() {
			if src.IsNull(i) {
				dst.AppendNull()
				continue
			}
			v := src.Value(i)
			if !v.FitsInPrecision(p) {
				return nil, fmt.Errorf("decimal value has more than %d digits", p)
			}
			dst.Append(v)
		}
		return b.NewArray(), nil
	case *array.List:
		lt, ok := to.(*arrow.ListType)
		if !ok {
			break
		}
		values, err := asType(mem, src.ListValues(), lt.Elem())
		if err != nil {
			return nil, fmt.Errorf("list element: %w", err)
		}
		defer values.Release()
		d := src.Data()
		nd := array.NewData(to, d.Len(), d.Buffers()[:2], []arrow.ArrayData{values.Data()}, d.NullN(), d.Offset())
		defer nd.Release()
		return array.MakeFromData(nd), nil
	}
	return nil, fmt.Errorf("a chunk column of type %s does not convert to the table's %s", a.DataType(), to)
}

// fillInt64 is an array of n 64-bit values (int64, timestamp) of type dt.
func fillInt64(mem memory.Allocator, dt arrow.DataType, n int, v func(i int) int64) arrow.Array {
	buf := memory.NewResizableBuffer(mem)
	defer buf.Release()
	buf.Resize(n * 8)
	vals := arrow.Int64Traits.CastFromBytes(buf.Bytes())
	for i := range vals {
		vals[i] = v(i)
	}
	d := array.NewData(dt, n, []*memory.Buffer{nil, buf}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// repeatString is a string array (of type dt) of n times s.
func repeatString(mem memory.Allocator, dt arrow.DataType, s string, n int) arrow.Array {
	offsets := memory.NewResizableBuffer(mem)
	defer offsets.Release()
	offsets.Resize((n + 1) * 4)
	offs := arrow.Int32Traits.CastFromBytes(offsets.Bytes())
	for i := range offs {
		offs[i] = int32(i * len(s))
	}
	data := memory.NewResizableBuffer(mem)
	defer data.Release()
	data.Resize(n * len(s))
	bs := data.Bytes()
	for i := 0; len(s) > 0 && i < len(bs); i += len(s) {
		copy(bs[i:], s)
	}
	d := array.NewData(dt, n, []*memory.Buffer{nil, offsets, data}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// emptyLists is a list array (of type dt) of n empty lists.
func emptyLists(mem memory.Allocator, dt arrow.DataType, n int) (arrow.Array, error) {
	lt, ok := dt.(*arrow.ListType)
	if !ok {
		return nil, fmt.Errorf("type %s is not a list", dt)
	}
	offsets := memory.NewResizableBuffer(mem)
	defer offsets.Release()
	offsets.Resize((n + 1) * 4)
	clear(offsets.Bytes())
	elems := array.MakeArrayOfNull(mem, lt.Elem(), 0)
	defer elems.Release()
	d := array.NewData(dt, n, []*memory.Buffer{nil, offsets}, []arrow.ArrayData{elems.Data()}, 0, 0)
	defer d.Release()
	return array.MakeFromData(d), nil
}

// widenEach appends each value of src, converted, to dst (nulls as nulls).
func widenEach[N, W any](src interface {
	Len() int
	IsNull(int) bool
	Value(int) N
}, dst interface {
	AppendNull()
	Append(W)
}, conv func(N) W) {
	for i := range src.Len() {
		if src.IsNull(i) {
			dst.AppendNull()
		} else {
			dst.Append(conv(src.Value(i)))
		}
	}
}
