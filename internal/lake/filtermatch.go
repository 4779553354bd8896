package lake

import (
	"bytes"
	"cmp"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// This file evaluates a Filter on the rows of a record batch, for the
// formats' own readers (Iceberg's bigpages.go, Delta's scans), where no
// library filters rows. A null never matches.

// SelectRows returns the rows of rec that f matches, as a new batch the
// caller releases (rec itself, retained, when all match; nil when none do).
func (f *Filter) SelectRows(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	n := int(rec.NumRows())
	for i := 0; i < n; i++ {
		ok, err := f.MatchRow(rec, i)
		if err != nil {
			return nil, err
		}
		if ok {
			ib.Append(int64(i))
		}
	}
	switch ib.Len() {
	case 0:
		return nil, nil
	case n:
		rec.Retain()
		return rec, nil
	}
	idx := ib.NewInt64Array()
	defer idx.Release()
	return Take(ctx, mem, rec, idx)
}

// MatchRow reports whether f matches row i of rec; the error says when a
// column f names is missing or its values cannot be compared.
func (f *Filter) MatchRow(rec arrow.RecordBatch, i int) (bool, error) {
	switch f.Op {
	case OpAnd:
		for _, k := range f.Kids {
			if ok, err := k.MatchRow(rec, i); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	case OpOr:
		for _, k := range f.Kids {
			if ok, err := k.MatchRow(rec, i); err != nil || ok {
				return ok, err
			}
		}
		return false, nil
	}
	idx := rec.Schema().FieldIndices(f.Col)
	if len(idx) != 1 {
		return false, fmt.Errorf("filter: no column %s in the rows read", f.Col)
	}
	col := rec.Column(idx[0])
	if col.IsNull(i) {
		return false, nil
	}
	v := cellValue(col, i)
	if v == nil {
		return false, fmt.Errorf("filter: cannot compare values of column %s (%s)", f.Col, col.DataType())
	}
	for _, want := range f.Vals {
		c, ok := compareValues(v, want)
		if !ok {
			return false, fmt.Errorf("filter on column %s: a %T value for a column of %s", f.Col, want, col.DataType())
		}
		switch f.Op {
		case OpIn, OpEqual:
			if c == 0 {
				return true, nil
			}
		case OpLess:
			return c < 0, nil
		case OpAtLeast:
			return c >= 0, nil
		}
	}
	return false, nil
}

// cellValue is element i of a, as a Filter's values are given (integers
// of every width as int64).
func cellValue(a arrow.Array, i int) any {
	switch x := a.(type) {
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Int64:
		return x.Value(i)
	case *array.Date32:
		return int64(x.Value(i))
	case *array.Time64:
		return int64(x.Value(i))
	case *array.Timestamp:
		return int64(x.Value(i))
	case *array.Float32:
		return float64(x.Value(i))
	case *array.Float64:
		return x.Value(i)
	case *array.Boolean:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	case *array.Binary:
		return x.Value(i)
	case *array.LargeBinary:
		return x.Value(i)
	case *array.FixedSizeBinary:
		return x.Value(i)
	case *array.Decimal128:
		return x.Value(i)
	}
	return nil
}

// compareValues compares a cell (cellValue) with a filter value.
func compareValues(cell, want any) (int, bool) {
	switch w := want.(type) {
	case int32:
		want = int64(w)
	case arrow.Date32:
		want = int64(w)
	case arrow.Time64:
		want = int64(w)
	case arrow.Timestamp:
		want = int64(w)
	case float32:
		want = float64(w)
	}
	switch c := cell.(type) {
	case int64:
		w, ok := want.(int64)
		return cmp.Compare(c, w), ok
	case float64:
		w, ok := want.(float64)
		return cmp.Compare(c, w), ok
	case bool:
		w, ok := want.(bool)
		if !ok {
			return 0, false
		}
		switch {
		case c == w:
			return 0, true
		case !c:
			return -1, true
		}
		return 1, true
	case string:
		w, ok := want.(string)
		return cmp.Compare(c, w), ok
	case []byte:
		w, ok := want.([]byte)
		return bytes.Compare(c, w), ok
	case decimal128.Num:
		w, ok := want.(decimal128.Num)
		return c.Cmp(w), ok
	}
	return 0, false
}
