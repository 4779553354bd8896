package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// Filter selects rows of a table by column values, for ScanWhere and
// Merge: lake.Filter, built with In, Less, Equal, And and Or. Its values
// are converted to the column's Iceberg type when the filter is used, so
// that a table's partitioning and file statistics can rule files out.
type Filter = lake.Filter

// In matches rows whose column col holds one of vals.
func In(col string, vals []any) *Filter { return lake.In(col, vals) }

// Less matches rows whose column col is below v.
func Less(col string, v any) *Filter { return lake.Less(col, v) }

// Equal matches rows whose column col equals v.
func Equal(col string, v any) *Filter { return lake.Equal(col, v) }

// And matches rows every filter matches.
func And(fs ...*Filter) *Filter { return lake.And(fs...) }

// Or matches rows any filter matches.
func Or(fs ...*Filter) *Filter { return lake.Or(fs...) }

func filterExpr(f *Filter, sch *iceberggo.Schema) (iceberggo.BooleanExpression, error) {
	e, _, err := filterExprSkipping(f, sch, nil)
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
func filterPlanExpr(f *Filter, tbl *table.Table) (e iceberggo.BooleanExpression, exact bool, err error) {
	e, skipped, err := filterExprSkipping(f, tbl.Schema(), widened(tbl.Metadata()))
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
func filterExprSkipping(f *Filter, sch *iceberggo.Schema, skip map[string]bool) (e iceberggo.BooleanExpression, skipped bool, err error) {
	switch f.Op {
	case lake.OpAnd, lake.OpOr:
		if len(f.Kids) == 0 {
			if f.Op == lake.OpAnd {
				return iceberggo.AlwaysTrue{}, false, nil
			}
			return iceberggo.AlwaysFalse{}, false, nil
		}
		out, skipped, err := filterExprSkipping(f.Kids[0], sch, skip)
		if err != nil {
			return nil, false, err
		}
		for _, k := range f.Kids[1:] {
			e, s, err := filterExprSkipping(k, sch, skip)
			if err != nil {
				return nil, false, err
			}
			skipped = skipped || s
			if f.Op == lake.OpAnd {
				out = iceberggo.NewAnd(out, e)
			} else {
				out = iceberggo.NewOr(out, e)
			}
		}
		return out, skipped, nil
	}
	if skip[f.Col] {
		return iceberggo.AlwaysTrue{}, true, nil
	}
	e, err = filterLeaf(f, sch)
	return e, false, err
}

// leaf is the expression of a test of one column.
func filterLeaf(f *Filter, sch *iceberggo.Schema) (iceberggo.BooleanExpression, error) {
	fld, ok := sch.FindFieldByName(f.Col)
	if !ok {
		return nil, fmt.Errorf("filter: no column %s", f.Col)
	}
	lits := make([]iceberggo.Literal, 0, len(f.Vals))
	for _, v := range f.Vals {
		l, err := literal(fld.Type, v)
		if err != nil {
			return nil, fmt.Errorf("filter on column %s: %w", f.Col, err)
		}
		lits = append(lits, l)
	}
	ref := iceberggo.Reference(f.Col)
	switch f.Op {
	case lake.OpIn:
		if len(lits) == 0 {
			return iceberggo.AlwaysFalse{}, nil
		}
		return iceberggo.SetPredicate(iceberggo.OpIn, ref, lits), nil
	case lake.OpLess:
		return iceberggo.LiteralPredicate(iceberggo.OpLT, ref, lits[0]), nil
	case lake.OpEqual:
		return iceberggo.LiteralPredicate(iceberggo.OpEQ, ref, lits[0]), nil
	case lake.OpAtLeast:
		return iceberggo.LiteralPredicate(iceberggo.OpGTEQ, ref, lits[0]), nil
	}
	return nil, fmt.Errorf("filter: unknown operation %d", f.Op)
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
