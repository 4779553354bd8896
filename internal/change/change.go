// Package change is the in-memory model of a captured change, shared by every
// source and every sink. It does no I/O.
//
// A Change's Values are already decoded into the lake representation of their
// column (see internal/coltype): int32, int64, float32,
// float64, bool, string, []byte, decimal128.Num, arrow.Date32, arrow.Time64,
// arrow.Timestamp, []any (lists), or nil for SQL NULL. A Chunk carries
// snapshot rows as Arrow arrays of the same lake types instead.
package change

import (
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
)

// Op is the kind of a change, as written to the cdc_op column.
type Op byte

// The operations of ARCHITECTURE §2.
const (
	OpRead     Op = 'r' // snapshot read
	OpInsert   Op = 'c'
	OpUpdate   Op = 'u'
	OpDelete   Op = 'd'
	OpTruncate Op = 't'
	OpMessage  Op = 'm'
)

func (o Op) String() string { return string(rune(o)) }

// TableID names a source table.
type TableID struct {
	Schema string
	Name   string
}

func (t TableID) String() string { return t.Schema + "." + t.Name }

// Position orders changes: the commit position of the change's transaction
// (LSN for PostgreSQL), then the change's sequence number inside it.
type Position struct {
	LSN uint64
	Seq int64
}

// Less reports whether p sorts before q.
func (p Position) Less(q Position) bool {
	if p.LSN != q.LSN {
		return p.LSN < q.LSN
	}
	return p.Seq < q.Seq
}

func (p Position) String() string {
	return fmt.Sprintf("%X/%X:%d", uint32(p.LSN>>32), uint32(p.LSN), p.Seq)
}

// Change is one captured row change (or truncate / message).
type Change struct {
	Table TableID
	Op    Op
	// Values are the row after the change (before, for a delete: with the
	// default replica identity only the key columns are set), aligned with
	// the columns of the table's current Relation.
	Values []any
	// Before is the old row when the source sent one (nil otherwise).
	Before []any
	// Unchanged names the columns the source did not send (unchanged TOAST).
	// Their Values entries are nil and must not be read as NULL.
	Unchanged []string
	// Schema is the layout of Values (and Before).
	Schema     *Schema
	Pos        Position
	TxID       int64
	CommitTime time.Time
}

// Field is one source column as it lands in the lake.
type Field struct {
	Name string
	// Type is the column's lake (Iceberg) type.
	Type iceberg.Type
	// SourceType is the source's own name for the type, for messages.
	SourceType string
	// Missing is the value the source reads for this column in rows
	// written before the column existed (PostgreSQL's attmissingval: the
	// constant DEFAULT of an ADD COLUMN, which writes nothing to the WAL for
	// the existing rows), in the form of Values; nil when there is none.
	// MissingText is its source text, for people.
	Missing     any
	MissingText string
}

// Schema is the column layout a Change's Values follow. Schemas are
// immutable once built and shared by pointer, so sinks may cache per pointer.
type Schema struct {
	Fields []Field
	// Key names the key columns (primary key or replica identity index).
	Key []string
}

// Chunk is a block of snapshot reads (OpRead) of one table in columnar
// form: each column already decoded into an Arrow array of the Arrow form of
// its Field's Iceberg type (a source mapping's ArrowType; coltype.AppendValue
// appends to it). Row i sits at
// position (LSN, Seq[i]), in transaction TxID committed at CommitTime.
// A Chunk holds references to its arrays until Release.
type Chunk struct {
	Table TableID
	// Schema is the layout of Columns.
	Schema *Schema
	// Columns are aligned with Schema.Fields, each Rows long.
	Columns []arrow.Array
	Rows    int
	LSN     uint64
	// Seq are the rows' sequence numbers; nil means 1..Rows.
	Seq        []int64
	TxID       int64
	CommitTime time.Time
	// Size estimates the memory the rows take once buffered, in bytes.
	Size int64
}

// Pos is the position of row i.
func (c *Chunk) Pos(i int) Position {
	if c.Seq != nil {
		return Position{LSN: c.LSN, Seq: c.Seq[i]}
	}
	return Position{LSN: c.LSN, Seq: int64(i + 1)}
}

// Release drops the chunk's references to its arrays.
func (c *Chunk) Release() {
	for _, a := range c.Columns {
		if a != nil {
			a.Release()
		}
	}
	c.Columns = nil
}

// DeadLetter is a row that could not be decoded or represented exactly.
type DeadLetter struct {
	Table      TableID
	Op         Op
	Pos        Position
	TxID       int64
	CommitTime time.Time
	// Raw is the row as the source sent it (JSON object of column -> text).
	Raw   string
	Error string
}

// Message is a logical decoding message (pg_logical_emit_message).
type Message struct {
	Prefix        string
	Content       []byte
	Transactional bool
	Pos           Position
	TxID          int64
	CommitTime    time.Time
}
