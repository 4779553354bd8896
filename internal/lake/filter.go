package lake

// Filter selects rows of a table by column values, for scans and merges.
// Build it with In, Less, AtLeast, Equal, And and Or. Values are the Go values of
// the column's Arrow type, as a record batch holds them:
//
//	int32, int64, float32, float64, bool, string, []byte,
//	arrow.Date32, arrow.Time64 (µs), arrow.Timestamp (µs), decimal128.Num
//
// A format converts a filter to its own expressions when it is used, so
// that partitioning and file statistics can rule files out. Its fields are
// the expression tree a format reads; callers build it with the
// constructors.
type Filter struct {
	Op   FilterOp
	Col  string    // In, Less, Equal: the column
	Vals []any     // In: the values; Less, Equal: one value
	Kids []*Filter // And, Or: the operands
}

// FilterOp is a Filter's operation.
type FilterOp int

// The operations of a Filter.
const (
	OpIn FilterOp = iota
	OpLess
	OpEqual
	OpAnd
	OpOr
	OpAtLeast
)

// In matches rows whose column col holds one of vals.
func In(col string, vals []any) *Filter { return &Filter{Op: OpIn, Col: col, Vals: vals} }

// Less matches rows whose column col is below v.
func Less(col string, v any) *Filter { return &Filter{Op: OpLess, Col: col, Vals: []any{v}} }

// AtLeast matches rows whose column col is v or above.
func AtLeast(col string, v any) *Filter { return &Filter{Op: OpAtLeast, Col: col, Vals: []any{v}} }

// Equal matches rows whose column col equals v.
func Equal(col string, v any) *Filter { return &Filter{Op: OpEqual, Col: col, Vals: []any{v}} }

// And matches rows every filter matches.
func And(fs ...*Filter) *Filter { return &Filter{Op: OpAnd, Kids: fs} }

// Or matches rows any filter matches.
func Or(fs ...*Filter) *Filter { return &Filter{Op: OpOr, Kids: fs} }
