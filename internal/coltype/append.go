package coltype

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// AppendValue appends a lake value (one of the forms listed in the package
// comment, as a source's decoder returns it; nil for NULL) to a builder of
// its column's Arrow type, recursing into list builders. A value
// of the wrong Go type for the builder, or a decimal with more digits than
// the builder's precision, is an error and appends nothing at that level
// (a list whose element failed is left partly built: discard the builder).
func AppendValue(b array.Builder, v any) error {
	if v == nil {
		b.AppendNull()
		return nil
	}
	ok := true
	switch b := b.(type) {
	case *array.Int32Builder:
		var x int32
		if x, ok = v.(int32); ok {
			b.Append(x)
		}
	case *array.Int64Builder:
		var x int64
		if x, ok = v.(int64); ok {
			b.Append(x)
		}
	case *array.Float32Builder:
		var x float32
		if x, ok = v.(float32); ok {
			b.Append(x)
		}
	case *array.Float64Builder:
		var x float64
		if x, ok = v.(float64); ok {
			b.Append(x)
		}
	case *array.BooleanBuilder:
		var x bool
		if x, ok = v.(bool); ok {
			b.Append(x)
		}
	case *array.StringBuilder:
		var x string
		if x, ok = v.(string); ok {
			reserveLarge(b, len(x))
			b.Append(x)
		}
	case *array.LargeStringBuilder:
		var x string
		if x, ok = v.(string); ok {
			reserveLarge(b, len(x))
			b.Append(x)
		}
	case *array.BinaryBuilder: // binary and large binary
		var x []byte
		if x, ok = v.([]byte); ok {
			reserveLarge(b, len(x))
			b.Append(x)
		}
	case *array.Decimal128Builder:
		var x decimal128.Num
		if x, ok = v.(decimal128.Num); ok {
			p := b.Type().(*arrow.Decimal128Type).Precision
			if !x.FitsInPrecision(p) {
				return fmt.Errorf("coltype: decimal value has more than %d digits", p)
			}
			b.Append(x)
		}
	case *array.Date32Builder:
		var x arrow.Date32
		if x, ok = v.(arrow.Date32); ok {
			b.Append(x)
		}
	case *array.Time64Builder:
		var x arrow.Time64
		if x, ok = v.(arrow.Time64); ok {
			b.Append(x)
		}
	case *array.TimestampBuilder:
		var x arrow.Timestamp
		if x, ok = v.(arrow.Timestamp); ok {
			b.Append(x)
		}
	case array.ListLikeBuilder:
		var xs []any
		if xs, ok = v.([]any); ok {
			b.Append(true)
			vb := b.ValueBuilder()
			for i, x := range xs {
				if err := AppendValue(vb, x); err != nil {
					return fmt.Errorf("list element %d: %w", i+1, err)
				}
			}
		}
	default:
		return fmt.Errorf("coltype: no decoded value appends to a %s builder", b.Type())
	}
	if !ok {
		return fmt.Errorf("coltype: can't append a %T to a %s builder", v, b.Type())
	}
	return nil
}

// largeValue: a string or binary value at least this long is appended
// into exactly the room it needs.
const largeValue = 1 << 20

// reserveLarge makes room for a value of n bytes in b when it is large:
// Append grows a builder's data to the next power of two strictly above
// what it needs, so a 16 MiB value took a 32 MiB buffer, held until its
// commit was written.
func reserveLarge(b interface{ ReserveData(int) }, n int) {
	if n >= largeValue {
		b.ReserveData(n)
	}
}
