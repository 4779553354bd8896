package event

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
)

// JSONValue renders a decoded value for people (the tidemark shape):
// exact decimals as strings, dates and timestamps in ISO 8601, non-finite
// floats as strings.
func JSONValue(v any, t iceberg.Type) any {
	switch x := v.(type) {
	case nil:
		return nil
	case decimal128.Num:
		return x.ToString(decimalScale(t))
	case arrow.Date32:
		if x == math.MaxInt32 {
			return "infinity"
		} else if x == math.MinInt32 {
			return "-infinity"
		}
		return x.ToTime().Format("2006-01-02")
	case arrow.Time64:
		return x.ToTime(arrow.Microsecond).Format("15:04:05.999999")
	case arrow.Timestamp:
		if x == math.MaxInt64 {
			return "infinity"
		} else if x == math.MinInt64 {
			return "-infinity"
		}
		ts := time.UnixMicro(int64(x)).UTC()
		if _, ok := t.(iceberg.TimestampTzType); ok {
			return ts.Format(time.RFC3339Nano)
		}
		return ts.Format("2006-01-02T15:04:05.999999")
	case float64, float32:
		return finite(x)
	case []any:
		et := elemType(t)
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = JSONValue(e, et)
		}
		return out
	}
	return v
}

// connectValue renders a value as Debezium's default converters put it
// through Kafka Connect's JsonConverter (decimal.handling.mode=precise,
// time.precision.mode=adaptive, binary.handling.mode=bytes): a decimal is
// the base64 of its unscaled value's big-endian two's complement (scale
// in the schema); a date is days since the epoch; a time microseconds
// since midnight, a timestamp microseconds since the epoch; a timestamp
// with time zone an ISO 8601 string in UTC; bytes are base64 (encoding/
// json's []byte). With numbers, decimals are JSON numbers of their exact
// digits instead (the beam shape: Beam's Gson prints the BigDecimal).
func connectValue(v any, t iceberg.Type, numbers bool) any {
	switch x := v.(type) {
	case nil:
		return nil
	case decimal128.Num:
		if numbers {
			return json.Number(x.ToString(decimalScale(t)))
		}
		return twosComplement(x.BigInt())
	case arrow.Date32:
		return int32(x)
	case arrow.Time64:
		return int64(x)
	case arrow.Timestamp:
		if _, ok := t.(iceberg.TimestampTzType); ok {
			if x == math.MaxInt64 {
				return "infinity"
			} else if x == math.MinInt64 {
				return "-infinity"
			}
			return time.UnixMicro(int64(x)).UTC().Format(time.RFC3339Nano)
		}
		return int64(x)
	case float64, float32:
		return finite(x)
	case []any:
		et := elemType(t)
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = connectValue(e, et, numbers)
		}
		return out
	}
	return v
}

// unavailable is Debezium's unavailable.value.placeholder, which it puts
// in place of a TOASTed value the source did not send.
const unavailable = "__debezium_unavailable_value"

// connectUnavailable is a column's placeholder as Debezium writes it:
// the text for a string, its bytes for bytes, null for the other types.
func connectUnavailable(f change.Field) any {
	switch f.Type.(type) {
	case iceberg.StringType:
		return unavailable
	case iceberg.BinaryType:
		return []byte(unavailable)
	case *iceberg.ListType:
		if _, ok := elemType(f.Type).(iceberg.StringType); ok {
			return []any{unavailable}
		}
	}
	return nil
}

// twosComplement is x as Java's BigInteger.toByteArray: the shortest
// big-endian two's complement.
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -x-1 has the bit length of x's magnitude in two's complement.
	n := new(big.Int).Sub(new(big.Int).Neg(x), big.NewInt(1)).BitLen()/8 + 1
	m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*n)), x)
	b := m.Bytes()
	for len(b) < n {
		b = append([]byte{0xff}, b...)
	}
	return b
}

// finite is a float, or its name for NaN and the infinities (JSON has
// no number for them).
func finite(v any) any {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return v
}

func decimalScale(t iceberg.Type) int32 {
	if dt, ok := t.(iceberg.DecimalType); ok {
		return int32(dt.Scale())
	}
	return 0
}

func elemType(t iceberg.Type) iceberg.Type {
	if lt, ok := t.(*iceberg.ListType); ok {
		return lt.Element
	}
	return nil
}
