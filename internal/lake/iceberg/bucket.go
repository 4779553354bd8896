package iceberg

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"
)

// Bucketer computes the partition of a row of a table partitioned by
// bucket(N, col) alone, as the table's writer computes it (iceberg-go's
// bucket transform of the column's value): a caller that groups rows by
// it writes one data file per group.
type Bucketer struct {
	// Col is the partition's source column; N the number of buckets.
	Col string
	N   int
	typ iceberggo.Type
	fn  func(any) iceberggo.Optional[int32]
}

// Bucketer returns the table's Bucketer; ok is false when the table is
// not partitioned by one bucket transform of a column whose type Of maps
// (integers, strings, binary, dates, timestamps).
func (t *Table) Bucketer() (b *Bucketer, ok bool) {
	tbl := t.current()
	spec := tbl.Spec()
	if spec.NumFields() != 1 {
		return nil, false
	}
	pf := spec.Field(0)
	bt, isBucket := pf.Transform.(iceberggo.BucketTransform)
	if !isBucket || bt.NumBuckets <= 0 {
		return nil, false
	}
	src, found := tbl.Schema().FindFieldByID(pf.SourceID())
	if !found {
		return nil, false
	}
	switch src.Type.(type) {
	case iceberggo.Int32Type, iceberggo.Int64Type, iceberggo.StringType, iceberggo.BinaryType,
		iceberggo.DateType, iceberggo.TimestampType, iceberggo.TimestampTzType:
	default:
		return nil, false
	}
	return &Bucketer{Col: src.Name, N: bt.NumBuckets, typ: src.Type, fn: bt.Transformer(src.Type)}, true
}

// Of returns the bucket of row i of a, a column holding values of the
// partition's source column (Arrow's integer types, strings, binary,
// date32, microsecond timestamps); ok is false for a null or a column of
// another type.
func (b *Bucketer) Of(a arrow.Array, i int) (bucket int, ok bool) {
	if a.IsNull(i) {
		return 0, false
	}
	var v any
	switch b.typ.(type) {
	case iceberggo.Int32Type:
		switch x := a.(type) {
		case *array.Int8:
			v = int32(x.Value(i))
		case *array.Int16:
			v = int32(x.Value(i))
		case *array.Int32:
			v = x.Value(i)
		}
	case iceberggo.Int64Type:
		switch x := a.(type) {
		case *array.Int8:
			v = int64(x.Value(i))
		case *array.Int16:
			v = int64(x.Value(i))
		case *array.Int32:
			v = int64(x.Value(i))
		case *array.Int64:
			v = x.Value(i)
		}
	case iceberggo.StringType:
		switch x := a.(type) {
		case *array.String:
			v = x.Value(i)
		case *array.LargeString:
			v = x.Value(i)
		}
	case iceberggo.BinaryType:
		switch x := a.(type) {
		case *array.Binary:
			v = x.Value(i)
		case *array.LargeBinary:
			v = x.Value(i)
		}
	case iceberggo.DateType:
		if x, isDate := a.(*array.Date32); isDate {
			v = iceberggo.Date(x.Value(i))
		}
	case iceberggo.TimestampType, iceberggo.TimestampTzType:
		if x, isTS := a.(*array.Timestamp); isTS && x.DataType().(*arrow.TimestampType).Unit == arrow.Microsecond {
			v = iceberggo.Timestamp(x.Value(i))
		}
	}
	if v == nil {
		return 0, false
	}
	r := b.fn(v)
	return int(r.Val), r.Valid
}
