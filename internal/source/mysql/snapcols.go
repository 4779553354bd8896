package mysql

import (
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/coltype"
)

// A keyed table's snapshot chunk, when the Sink is a pipeline.ChunkSink
// (bronze), is decoded straight into one Arrow builder per column and
// handed over whole (WriteChunk), as the PostgreSQL source does: no boxed
// value, []any or change.Change per row, and bronze keeps the arrays
// instead of appending every value again. What the reconciliation needs
// per row is kept beside the columns: the key as keyOf renders it (the
// stream notes changed keys in that form), and the rows that failed to
// decode (dead letters). Rows the reconciliation drops are cut out of the
// arrays when the chunk is written (emitColumns).

// colChunk decodes the rows of one chunk into Arrow builders.
type colChunk struct {
	t    *table
	b    []array.Builder
	rows int
	// keys holds the keyOf text of each row, back to back; keyEnd[i] is
	// where row i's ends.
	keys   []byte
	keyEnd []int32
	vals   []any // the row's decoded key values (reused)
	bad    []badRow
	size   int64 // the rows' buffered size, as bronze estimates a Change's
	// varBytes is the bytes of each variable-width column read, for the
	// next chunk's reservation (colHint).
	varBytes []int64
}

// badRow is a row of a chunk that failed to decode: a dead letter.
type badRow struct {
	index int    // among the chunk's rows
	raw   string // rawTextJSON of its text
	err   error
}

// colHint is what a table's last chunk saw, to reserve the next chunk's
// builders at once rather than grow them: bytes per row of each
// variable-width column.
type colHint struct {
	perRow []int64
	limit  int64 // cap per column (chunk_bytes)
}

func newColChunk(t *table, rows int, hint *colHint) *colChunk {
	c := &colChunk{t: t, b: make([]array.Builder, len(t.maps)), vals: make([]any, len(t.maps)),
		varBytes: make([]int64, len(t.maps)), keyEnd: make([]int32, 0, rows)}
	for i, m := range t.maps {
		b := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
		b.Reserve(rows)
		if bb, ok := b.(*array.StringBuilder); ok && hint != nil && len(hint.perRow) == len(t.maps) {
			n := hint.perRow[i] * int64(rows)
			if hint.limit > 0 {
				n = min(n, hint.limit)
			}
			bb.ReserveData(int(n))
		}
		c.b[i] = b
	}
	return c
}

// add decodes one row. A value with no exact lake form, or over
// max_value_bytes, makes the row a dead letter (its columns completed with
// NULLs, cut out when the chunk is written); any other error is returned.
func (c *colChunk) add(raw []sql.RawBytes, maxValue int64) error {
	t := c.t
	index := c.rows
	c.rows++
	c.size += 64
	err := func() error {
		for i, b := range raw {
			m := t.maps[i]
			if b == nil {
				c.b[i].AppendNull()
				c.vals[i] = nil
				c.size += 8
				continue
			}
			if isVarWidth(m) {
				c.size += int64(len(b)) + 16
				c.varBytes[i] += int64(len(b))
			} else {
				c.size += 8
			}
			if err := m.overRaw([]byte(b), true, maxValue); err != nil {
				return err
			}
			if c.t.isKey(i) {
				// The key's value is kept for keyOf.
				v, err := m.DecodeText(b)
				if err != nil {
					return fmt.Errorf("column %q: %w", t.cols[i].Name, err)
				}
				if err := m.overDecoded(v, true, maxValue); err != nil {
					return err
				}
				c.vals[i] = v
				if err := coltype.AppendValue(c.b[i], v); err != nil {
					return &appendError{fmt.Errorf("column %q: %w", t.cols[i].Name, err)}
				}
				continue
			}
			if err := m.appendText(c.b[i], b, maxValue); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		var ae *appendError
		if errors.As(err, &ae) {
			return ae.err
		}
		// Complete the row with NULLs: the columns stay aligned.
		for _, b := range c.b {
			if b.Len() == index {
				b.AppendNull()
			}
		}
		c.bad = append(c.bad, badRow{index: index, raw: rawTextJSON(t, rawBytes(raw), maxValue), err: err})
		c.keyEnd = append(c.keyEnd, int32(len(c.keys)))
		return nil
	}
	for _, k := range t.keyIdx {
		c.keys = appendKeyValue(c.keys, c.vals[k])
	}
	c.keyEnd = append(c.keyEnd, int32(len(c.keys)))
	return nil
}

// appendError is an error of appending a decoded value to its builder: a
// value of the wrong type for the column, never the row's fault.
type appendError struct{ err error }

func (e *appendError) Error() string { return e.err.Error() }

// key is row i's keyOf text.
func (c *colChunk) key(i int) []byte {
	from := int32(0)
	if i > 0 {
		from = c.keyEnd[i-1]
	}
	return c.keys[from:c.keyEnd[i]]
}

// finish builds the chunk's arrays (the builders are released) and notes
// the widths of its variable-width columns in hint.
func (c *colChunk) finish(hint *colHint) []arrow.Array {
	cols := make([]arrow.Array, len(c.b))
	for i, b := range c.b {
		cols[i] = b.NewArray()
		b.Release()
	}
	c.b = nil
	if hint != nil && c.rows > 0 {
		hint.perRow = make([]int64, len(cols))
		for i, n := range c.varBytes {
			hint.perRow[i] = n/int64(c.rows) + 1
		}
	}
	return cols
}

// release drops the builders of a chunk abandoned before finish.
func (c *colChunk) release() {
	for _, b := range c.b {
		b.Release()
	}
	c.b = nil
}

// isKey reports whether column i is a key column.
func (t *table) isKey(i int) bool {
	for _, k := range t.keyIdx {
		if k == i {
			return true
		}
	}
	return false
}

// isVarWidth reports whether m's values are strings or bytes (their size
// counts, as bronze's estimate counts a Change's).
func isVarWidth(m *Mapping) bool {
	switch m.ArrowType().ID() {
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		return true
	}
	return false
}

// appendText is DecodeText, then coltype.AppendValue to b (a builder of
// ArrowType), with max_value_bytes checked on the decoded value, and the
// errors, as decodeSnapRowInto has them; integers and utf8mb4 text, the
// common columns, are appended without a boxed value in between. An
// append error is an *appendError.
func (m *Mapping) appendText(b array.Builder, text []byte, maxValue int64) error {
	switch m.k {
	case kInt32:
		if ib, ok := b.(*array.Int32Builder); ok {
			x, err := m.textInt64(text)
			if err != nil {
				return m.columnErr(m.valueErr(err))
			}
			ib.Append(int32(x))
			return nil
		}
	case kUint32, kInt64:
		if ib, ok := b.(*array.Int64Builder); ok {
			x, err := m.textInt64(text)
			if err != nil {
				return m.columnErr(m.valueErr(err))
			}
			ib.Append(x)
			return nil
		}
	case kText:
		// The server sends text in utf8mb4 (SessionVariables): the lake
		// form, byte for byte (overRaw checked its length).
		if sb, ok := b.(*array.StringBuilder); ok {
			if !utf8.Valid(text) {
				return m.columnErr(m.valueErr(errNotUTF8))
			}
			sb.BinaryBuilder.Append(text)
			return nil
		}
	}
	v, err := m.DecodeText(text)
	if err != nil {
		return m.columnErr(err)
	}
	if err := m.overDecoded(v, true, maxValue); err != nil {
		return err
	}
	if err := coltype.AppendValue(b, v); err != nil {
		return &appendError{m.columnErr(err)}
	}
	return nil
}

// columnErr is a decode error of m's column as decodeSnapRowInto words it.
func (m *Mapping) columnErr(err error) error { return fmt.Errorf("column %q: %w", m.name, err) }

// cut returns the rows of cols not in drop (sorted row indexes), and
// releases cols. With nothing to drop, cols are returned as they are.
func cut(cols []arrow.Array, rows int, drop []int) ([]arrow.Array, error) {
	if len(drop) == 0 {
		return cols, nil
	}
	type run struct{ from, to int }
	var runs []run
	from := 0
	for _, d := range drop {
		if d > from {
			runs = append(runs, run{from, d})
		}
		from = d + 1
	}
	if from < rows {
		runs = append(runs, run{from, rows})
	}
	out := make([]arrow.Array, len(cols))
	var err error
	for i, a := range cols {
		if err == nil {
			parts := make([]arrow.Array, len(runs))
			for k, r := range runs {
				parts[k] = array.NewSlice(a, int64(r.from), int64(r.to))
			}
			if len(parts) == 0 {
				out[i] = array.NewSlice(a, 0, 0)
			} else {
				out[i], err = array.Concatenate(parts, memory.DefaultAllocator)
			}
			for _, p := range parts {
				p.Release()
			}
		}
		a.Release()
	}
	if err != nil {
		for _, a := range out {
			if a != nil {
				a.Release()
			}
		}
		return nil, err
	}
	return out, nil
}

// chunkSeq are the cdc_seq values of the rows of a chunk not in drop:
// snapSeqBase plus the row's number in the table's snapshot (base rows
// written before the chunk).
func chunkSeq(base int64, rows int, drop []int) []int64 {
	seq := make([]int64, 0, rows-len(drop))
	d := 0
	for i := 0; i < rows; i++ {
		if d < len(drop) && drop[d] == i {
			d++
			continue
		}
		seq = append(seq, snapSeqBase+base+int64(i)+1)
	}
	return seq
}

// chunkOf is the change.Chunk of a reconciled window's columns.
func chunkOf(w *window, cols []arrow.Array, seq []int64, size int64, at time.Time) *change.Chunk {
	return &change.Chunk{Table: w.table, Schema: w.t.schema, Columns: cols, Rows: len(seq), LSN: w.high, Seq: seq, Size: size, CommitTime: at}
}
