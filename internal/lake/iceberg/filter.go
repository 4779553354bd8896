package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	iceberggo "github.com/apache/iceberg-go"
)

// Filter selects rows of a table by column values, for ScanWhere and
// Merge. Build it with In, Less, Equal, And and Or. Values are the Go
// values of the column's Arrow type, as a record batch holds them:
//
//	int32, int64, float32, float64, bool, string, []byte,
//	arrow.Date32, arrow.Time64 (µs), arrow.Timestamp (µs), decimal128.Num
//
// They are converted to the column's Iceberg type when the filter is used,
// so that a table's partitioning and file statistics can rule files out.
type Filter struct {
	op   filterOp
	col  string
	vals []any
	kids []*Filter
}

type filterOp int

const (
	opIn filterOp = iota
	opLess
	opEqual
	opAnd
	opOr
)

// In matches rows whose column col holds one of vals.
func In(col string, vals []any) *Filter { return &Filter{op: opIn, col: col, vals: vals} }

// Less matches rows whose column col is below v.
func Less(col string, v any) *Filter { return &Filter{op: opLess, col: col, vals: []any{v}} }

// Equal matches rows whose column col equals v.
func Equal(col string, v any) *Filter { return &Filter{op: opEqual, col: col, vals: []any{v}} }

// And matches rows every filter matches.
func And(fs ...*Filter) *Filter { return &Filter{op: opAnd, kids: fs} }

// Or matches rows any filter matches.
func Or(fs ...*Filter) *Filter { return &Filter{op: opOr, kids: fs} }

func (f *Filter) expr(sch *iceberggo.Schema) (iceberggo.BooleanExpression, error) {
	switch f.op {
	case opAnd, opOr:
		if len(f.kids) == 0 {
			if f.op == opAnd {
				return iceberggo.AlwaysTrue{}, nil
			}
			return iceberggo.AlwaysFalse{}, nil
		}
		out, err := f.kids[0].expr(sch)
		if err != nil {
			return nil, err
		}
		for _, k := range f.kids[1:] {
			e, err := k.expr(sch)
			if err != nil {
				return nil, err
			}
			if f.op == opAnd {
				out = iceberggo.NewAnd(out, e)
			} else {
				out = iceberggo.NewOr(out, e)
			}
		}
		return out, nil
	}
	fld, ok := sch.FindFieldByName(f.col)
	if !ok {
		return nil, fmt.Errorf("filter: no column %s", f.col)
	}
	lits := make([]iceberggo.Literal, 0, len(f.vals))
	for _, v := range f.vals {
		l, err := literal(fld.Type, v)
		if err != nil {
			return nil, fmt.Errorf("filter on column %s: %w", f.col, err)
		}
		lits = append(lits, l)
	}
	ref := iceberggo.Reference(f.col)
	switch f.op {
	case opIn:
		if len(lits) == 0 {
			return iceberggo.AlwaysFalse{}, nil
		}
		return iceberggo.SetPredicate(iceberggo.OpIn, ref, lits), nil
	case opLess:
		return iceberggo.LiteralPredicate(iceberggo.OpLT, ref, lits[0]), nil
	case opEqual:
		return iceberggo.LiteralPredicate(iceberggo.OpEQ, ref, lits[0]), nil
	}
	return nil, fmt.Errorf("filter: unknown operation %d", f.op)
}

// literal converts an Arrow-level Go value into a literal of type t.
func literal(t iceberggo.Type, v any) (iceberggo.Literal, error) {
	switch x := v.(type) {
	case int32:
		return iceberggo.NewLiteral(x).To(t)
	case int64:
		return iceberggo.NewLiteral(x).To(t)
	case float32:
		return iceberggo.NewLiteral(x).To(t)
	case float64:
		return iceberggo.NewLiteral(x).To(t)
	case bool:
		return iceberggo.NewLiteral(x), nil
	case string:
		if _, ok := t.(iceberggo.UUIDType); ok {
			return iceberggo.NewLiteral(x).To(t)
		}
		return iceberggo.NewLiteral(x), nil
	case []byte:
		return iceberggo.NewLiteral(x).To(t)
	case arrow.Date32:
		return iceberggo.NewLiteral(iceberggo.Date(x)), nil
	case arrow.Time64:
		return iceberggo.NewLiteral(iceberggo.Time(x)), nil
	case arrow.Timestamp:
		return iceberggo.NewLiteral(iceberggo.Timestamp(x)).To(t)
	case decimal128.Num:
		d, ok := t.(iceberggo.DecimalType)
		if !ok {
			return nil, fmt.Errorf("a decimal value for a column of type %s", t)
		}
		return iceberggo.NewLiteral(iceberggo.Decimal{Val: x, Scale: d.Scale()}), nil
	}
	return nil, fmt.Errorf("no literal for a value of Go type %T (column type %s)", v, t)
}
