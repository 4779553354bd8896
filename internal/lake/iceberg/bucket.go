package iceberg

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// Bucketer computes the partition of a row of a table partitioned by
// bucket(N, col) alone, as the table's writer computes it (iceberg-go's
// bucket transform of the column's value): a caller that groups rows by
// it writes one data file per group.
type Bucketer struct {
	// Col is the partition's source column; N the number of buckets.
	Col string
	N   int
	// The transform of a long, a string and binary: Iceberg's bucket hashes
	// an int, a date, a time or a timestamp as the long it holds, and a
	// string as its UTF-8 bytes, so the bucket of a value does not depend
	// on which of those types the column has (widened from int to long, say).
	long, str, bin func(any) iceberggo.Optional[int32]
}

// Bucketer returns the table's Bucketer; ok is false when the table is
// not partitioned by one bucket transform of a column whose type Of maps
// (integers, strings, binary, dates, timestamps).
func (t *Table) Bucketer() (lake.Bucketer, bool) {
	b, ok := bucketerOf(t.current())
	if !ok {
		return nil, false
	}
	return b, true
}

// Column returns Col (lake.Bucketer).
func (b *Bucketer) Column() string { return b.Col }

// Buckets returns N (lake.Bucketer).
func (b *Bucketer) Buckets() int { return b.N }

func bucketerOf(tbl *table.Table) (b *Bucketer, ok bool) {
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
	return &Bucketer{Col: src.Name, N: bt.NumBuckets,
		long: bt.Transformer(iceberggo.PrimitiveTypes.Int64),
		str:  bt.Transformer(iceberggo.PrimitiveTypes.String),
		bin:  bt.Transformer(iceberggo.PrimitiveTypes.Binary)}, true
}

// Of returns the bucket of row i of a, a column holding values of the
// partition's source column (Arrow's signed integer types, strings,
// binary, date32, microsecond timestamps); ok is false for a null or a
// column of another type. The result depends only on the value.
func (b *Bucketer) Of(a arrow.Array, i int) (bucket int, ok bool) {
	if a.IsNull(i) {
		return 0, false
	}
	var r iceberggo.Optional[int32]
	switch x := a.(type) {
	case *array.Int8:
		r = b.long(int64(x.Value(i)))
	case *array.Int16:
		r = b.long(int64(x.Value(i)))
	case *array.Int32:
		r = b.long(int64(x.Value(i)))
	case *array.Int64:
		r = b.long(x.Value(i))
	case *array.Date32:
		r = b.long(int64(x.Value(i)))
	case *array.Timestamp:
		if x.DataType().(*arrow.TimestampType).Unit != arrow.Microsecond {
			return 0, false
		}
		r = b.long(int64(x.Value(i)))
	case *array.String:
		r = b.str(x.Value(i))
	case *array.LargeString:
		r = b.str(x.Value(i))
	case *array.Binary:
		r = b.bin(x.Value(i))
	case *array.LargeBinary:
		r = b.bin(x.Value(i))
	default:
		return 0, false
	}
	return int(r.Val), r.Valid
}
