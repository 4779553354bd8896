// Package change is the in-memory model of a captured change, shared by every
// source and every sink. It does no I/O.
//
// A Change's Values are already decoded into the lake representation of their
// column (see internal/source/postgres/typemap): int32, int64, float32,
// float64, bool, string, []byte, decimal128.Num, arrow.Date32, arrow.Time64,
// arrow.Timestamp, []any (lists), or nil for SQL NULL.
package change

import (
	"fmt"
	"time"
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
	Pos        Position
	TxID       int64
	CommitTime time.Time
}
