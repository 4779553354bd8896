package postgres

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/coltype"
)

// badRow is a row of a chunk that failed to decode.
type badRow struct {
	index int    // among the rows read: its Seq is index+1
	raw   string // JSON of its text
	err   error
}

// colChunk decodes the rows of one chunk into one Arrow builder per column.
// A row whose value does not decode is completed with NULLs, to keep the
// columns aligned, and cut out at the end.
type colChunk struct {
	rel  *Relation
	b    []array.Builder
	varw []bool // column's values are variable-width (size estimate)
	rows int
	bad  []badRow
	size int64 // estimated buffered size, as bronze estimates a Change's
}

// sizeHint remembers the average width of a table's variable-width values,
// to reserve a chunk's builders at once rather than grow them.
type sizeHint struct {
	perRow []int64 // bytes per row of each column, in the last chunk
}

func newColChunk(rel *Relation, rows int, hint *sizeHint) *colChunk {
	c := &colChunk{rel: rel, b: make([]array.Builder, len(rel.Columns)), varw: make([]bool, len(rel.Columns))}
	for i, col := range rel.Columns {
		b := array.NewBuilder(memory.DefaultAllocator, col.Map.ArrowType())
		b.Reserve(rows)
		switch bb := b.(type) {
		case *array.StringBuilder:
			c.varw[i] = true
			if hint != nil && len(hint.perRow) == len(rel.Columns) {
				bb.ReserveData(int(hint.perRow[i]) * rows)
			}
		case *array.BinaryBuilder:
			c.varw[i] = true
		case array.ListLikeBuilder:
			c.varw[i] = true
		}
		c.b[i] = b
	}
	return c
}

// add decodes one row. A value that has no exact lake representation makes
// the row a dead letter (added to bad); any other error is returned.
func (c *colChunk) add(raw [][]byte) error {
	index := c.rows
	c.rows++
	c.size += 64
	for i, v := range raw {
		if i >= len(c.b) {
			break
		}
		if v != nil && c.varw[i] {
			c.size += int64(len(v)) + 16
		} else {
			c.size += 8
		}
		err := c.rel.Columns[i].Map.AppendText(c.b[i], v)
		if err == nil {
			continue
		}
		var ve *coltype.ValueError
		if !errors.As(err, &ve) {
			return err
		}
		for _, b := range c.b[i:] {
			b.AppendNull()
		}
		c.bad = append(c.bad, badRow{index: index, raw: rawJSON(c.rel, raw), err: err})
		return nil
	}
	for _, b := range c.b[min(len(raw), len(c.b)):] {
		b.AppendNull()
	}
	return nil
}

// finish builds the chunk's arrays, without its bad rows, and their
// sequence numbers (nil: 1..n). It notes the columns' widths in hint.
func (c *colChunk) finish(hint *sizeHint) (cols []arrow.Array, seq []int64, err error) {
	cols = make([]arrow.Array, len(c.b))
	for i, b := range c.b {
		cols[i] = b.NewArray()
		b.Release()
	}
	c.b = nil
	if hint != nil && c.rows > 0 {
		hint.perRow = make([]int64, len(cols))
		for i, a := range cols {
			if s, ok := a.(*array.String); ok {
				hint.perRow[i] = int64(len(s.ValueBytes()))/int64(c.rows) + 1
			}
		}
	}
	if len(c.bad) == 0 {
		return cols, nil, nil
	}
	// Keep the runs of rows between the bad ones.
	type run struct{ from, to int }
	var runs []run
	from := 0
	for _, b := range c.bad {
		if b.index > from {
			runs = append(runs, run{from, b.index})
		}
		from = b.index + 1
	}
	if from < c.rows {
		runs = append(runs, run{from, c.rows})
	}
	for _, r := range runs {
		for i := r.from; i < r.to; i++ {
			seq = append(seq, int64(i+1))
		}
	}
	if seq == nil {
		seq = []int64{} // every row bad: none left, but not "1..n"
	}
	for i, a := range cols {
		parts := make([]arrow.Array, len(runs))
		for k, r := range runs {
			parts[k] = array.NewSlice(a, int64(r.from), int64(r.to))
		}
		var kept arrow.Array
		if len(parts) == 0 {
			kept = array.NewSlice(a, 0, 0)
		} else {
			kept, err = array.Concatenate(parts, memory.DefaultAllocator)
		}
		for _, p := range parts {
			p.Release()
		}
		a.Release()
		cols[i] = kept
		if err != nil {
			for _, x := range cols {
				if x != nil {
					x.Release()
				}
			}
			return nil, nil, fmt.Errorf("column %q: drop undecodable rows: %w", c.rel.Columns[i].Name, err)
		}
	}
	return cols, seq, nil
}

// release drops the builders of a chunk abandoned before finish.
func (c *colChunk) release() {
	for _, b := range c.b {
		b.Release()
	}
	c.b = nil
}

// output returns what emitChunk writes for w: its rows as changes (or, read
// in columnar form, as a chunk), the dead letters of the rows that failed to
// decode, and the number of rows written.
func (w *window) output() (cs []*change.Change, chunk *change.Chunk, dls []change.DeadLetter, n int) {
	dead := func(index int, raw string, err error) {
		dls = append(dls, change.DeadLetter{Table: w.table, Op: change.OpRead, Pos: change.Position{LSN: w.lowLSN, Seq: int64(index + 1)},
			TxID: w.lowTx, CommitTime: w.lowTime, Raw: raw, Error: err.Error()})
	}
	if w.cols != nil {
		for _, b := range w.bad {
			dead(b.index, b.raw, b.err)
		}
		chunk = &change.Chunk{Table: w.table, Schema: w.schema, Columns: w.cols, Rows: w.nrows, LSN: w.lowLSN, Seq: w.seq,
			TxID: w.lowTx, CommitTime: w.lowTime, Size: w.size}
		return nil, chunk, dls, w.nrows
	}
	cs = make([]*change.Change, 0, len(w.rows))
	for i, r := range w.rows {
		if r.err != nil {
			dead(i, r.raw, r.err)
			continue
		}
		cs = append(cs, &change.Change{Table: w.table, Op: change.OpRead, Values: r.values, Schema: w.schema,
			Pos: change.Position{LSN: w.lowLSN, Seq: int64(i + 1)}, TxID: w.lowTx, CommitTime: w.lowTime})
	}
	return cs, nil, dls, len(cs)
}

// release drops the arrays of a window read in columnar form and not
// written.
func (w *window) release() {
	for _, a := range w.cols {
		a.Release()
	}
	w.cols = nil
}
