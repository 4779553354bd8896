package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
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
	e, _, err := f.exprSkipping(sch, nil)
	return e, err
}

// planExpr is f's expression for choosing the data files of a scan of tbl,
// and whether it is f itself (exact). A test of a column that was widened
// (int to long, float to double) is left out, as true: the data files
// written before the widening record 4-byte bounds, which iceberg-go
// v0.7.0 fails to read as the wider type ("expected 8 bytes for int64
// value"), failing the whole plan (a source's ALTER COLUMN id TYPE bigint
// stopped every silver merge). The plan then keeps every file such a test
// might have ruled out; rows are filtered with f where the scan filters
// rows. f's operations are monotone (no negation), so true only widens.
func (f *Filter) planExpr(tbl *table.Table) (e iceberggo.BooleanExpression, exact bool, err error) {
	e, skipped, err := f.exprSkipping(tbl.Schema(), widened(tbl.Metadata()))
	return e, !skipped, err
}

// widened returns the top-level columns of the current schema that an
// earlier schema of the table held as int or float.
func widened(meta table.Metadata) map[string]bool {
	cur := meta.CurrentSchema()
	var out map[string]bool
	for _, fld := range cur.Fields() {
		var narrow iceberggo.Type
		switch fld.Type.(type) {
		case iceberggo.Int64Type:
			narrow = iceberggo.PrimitiveTypes.Int32
		case iceberggo.Float64Type:
			narrow = iceberggo.PrimitiveTypes.Float32
		default:
			continue
		}
		for _, s := range meta.Schemas() {
			if old, ok := s.FindFieldByID(fld.ID); ok && old.Type.Equals(narrow) {
				if out == nil {
					out = map[string]bool{}
				}
				out[fld.Name] = true
				break
			}
		}
	}
	return out
}

// exprSkipping is expr with the tests of the columns in skip replaced by
// true; skipped reports whether any was.
func (f *Filter) exprSkipping(sch *iceberggo.Schema, skip map[string]bool) (e iceberggo.BooleanExpression, skipped bool, err error) {
	switch f.op {
	case opAnd, opOr:
		if len(f.kids) == 0 {
			if f.op == opAnd {
				return iceberggo.AlwaysTrue{}, false, nil
			}
			return iceberggo.AlwaysFalse{}, false, nil
		}
		out, skipped, err := f.kids[0].exprSkipping(sch, skip)
		if err != nil {
			return nil, false, err
		}
		for _, k := range f.kids[1:] {
			e, s, err := k.exprSkipping(sch, skip)
			if err != nil {
				return nil, false, err
			}
			skipped = skipped || s
			if f.op == opAnd {
				out = iceberggo.NewAnd(out, e)
			} else {
				out = iceberggo.NewOr(out, e)
			}
		}
		return out, skipped, nil
	}
	if skip[f.col] {
		return iceberggo.AlwaysTrue{}, true, nil
	}
	e, err = f.leaf(sch)
	return e, false, err
}

// leaf is the expression of a test of one column.
func (f *Filter) leaf(sch *iceberggo.Schema) (iceberggo.BooleanExpression, error) {
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
