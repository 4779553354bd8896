package verify

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// This file is the one definition of "equal": every value, whether decoded
// from the source's text by typemap or read from a silver data file, is
// turned into a canonical byte string, and two values are equal exactly
// when their canonical strings are. internal/source/postgres/pgverify
// (sqlcanon.go) computes the same strings inside PostgreSQL, so that
// chunk hashes can be computed at the source.
//
// Canonical text of a lake value, by type:
//
//	int, long              decimal digits                       42, -7
//	float, double          IEEE 754 bits, big-endian hex        3ff8000000000000 (NaN: "NaN")
//	boolean                t or f
//	string                 the string itself (PostgreSQL's exact text)
//	binary                 lower-case hex                       00ff10
//	decimal(p,s)           digits with exactly s decimals       -12.50, 0.00012
//	date                   days since 1970-01-01                19724 (±infinity: ±(2^31-1))
//	time                   µs since midnight
//	timestamp[tz]          µs since 1970-01-01 00:00 (UTC)      (±infinity: ±(2^63-1))
//	list                   "[" elements "," -joined "]", each element as a field below
//
// A row (or a key) is its columns in order, each as a field: "N" for NULL,
// else "V" <byte length> ":" <canonical text>. The length prefix makes the
// concatenation unambiguous. A value the source holds but the lake cannot
// (a NaN in a numeric(p,s) column: a dead letter) is "E" plus its raw text,
// so it never equals anything silver can hold.

// AppendField appends v as one field of a row or key.
func AppendField(buf []byte, v any, t arrow.DataType) []byte {
	if v == nil {
		return append(buf, 'N')
	}
	if u, ok := v.(undecodable); ok {
		buf = append(buf, 'E')
		buf = strconv.AppendInt(buf, int64(len(u.raw)), 10)
		buf = append(buf, ':')
		return append(buf, u.raw...)
	}
	start := len(buf)
	buf = AppendCanon(buf, v, t)
	n := len(buf) - start
	// Insert the "V<len>:" prefix in front of the canonical text.
	var pre [24]byte
	p := append(pre[:0], 'V')
	p = strconv.AppendInt(p, int64(n), 10)
	p = append(p, ':')
	buf = append(buf, p...)
	copy(buf[start+len(p):], buf[start:start+n])
	copy(buf[start:], p)
	return buf
}

// undecodable is a source value that typemap refused (it has no exact lake
// form, so silver cannot hold it).
type undecodable struct{ raw string }

// AppendCanon appends the canonical text of the non-nil value v of lake
// type t (the Go types typemap.Decode returns).
func AppendCanon(buf []byte, v any, t arrow.DataType) []byte {
	switch x := v.(type) {
	case int32:
		return strconv.AppendInt(buf, int64(x), 10)
	case int64:
		return strconv.AppendInt(buf, x, 10)
	case float32:
		if x != x {
			return append(buf, "NaN"...)
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], math.Float32bits(x))
		return hex.AppendEncode(buf, b[:])
	case float64:
		if x != x {
			return append(buf, "NaN"...)
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(x))
		return hex.AppendEncode(buf, b[:])
	case bool:
		if x {
			return append(buf, 't')
		}
		return append(buf, 'f')
	case string:
		return append(buf, x...)
	case []byte:
		return hex.AppendEncode(buf, x)
	case decimal128.Num:
		return append(buf, DecimalText(x, DecimalScale(t))...)
	case arrow.Date32:
		return strconv.AppendInt(buf, int64(negInfDate(x)), 10)
	case arrow.Time64:
		return strconv.AppendInt(buf, int64(x), 10)
	case arrow.Timestamp:
		return strconv.AppendInt(buf, int64(negInfTS(x)), 10)
	case []any:
		elem := ListElem(t)
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = AppendField(buf, e, elem)
		}
		return append(buf, ']')
	}
	// Not reachable for values from typemap or from the lake readers below;
	// a distinct text keeps such a value from ever comparing equal silently.
	return fmt.Appendf(buf, "?%T:%v", v, v)
}

func DecimalScale(t arrow.DataType) int32 {
	if d, ok := t.(arrow.DecimalType); ok {
		return d.GetScale()
	}
	return 0
}

func ListElem(t arrow.DataType) arrow.DataType {
	if l, ok := t.(arrow.ListLikeType); ok {
		return l.Elem()
	}
	return arrow.Null
}

// DecimalText writes an unscaled decimal at scale s as PostgreSQL's
// numeric_out does for a numeric(p,s) value: exactly s decimals, a leading
// "0" before the point, "-" for negatives.
func DecimalText(n decimal128.Num, s int32) string {
	bi := n.BigInt()
	neg := bi.Sign() < 0
	digits := new(big.Int).Abs(bi).String()
	if s > 0 {
		if len(digits) <= int(s) {
			digits = strings.Repeat("0", int(s)-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-int(s)] + "." + digits[len(digits)-int(s):]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// Digest is the MD5 of a canonical row or key.
type Digest [md5.Size]byte

// BucketOf maps a key digest to one of n chunks, as sqlBucket does.
func BucketOf(d Digest, n int) int {
	return int(binary.BigEndian.Uint32(d[:4])&0x7fffffff) % n
}

// rowHash is the number whose sum over a chunk's rows is the chunk's hash:
// the first 64 bits of the row's digest as a signed integer, as the
// sources' SQL (pgverify, myverify)
// ('x' || substr(md5, 1, 16))::bit(64)::bigint reads them.
func rowHash(d Digest) int64 {
	return int64(binary.BigEndian.Uint64(d[0:8]))
}

// appendArrowField is appendField(valueAt(a, i), a.DataType()) without
// boxing the value: the hot path of hashing silver's rows.
func appendArrowField(buf []byte, a arrow.Array, i int) []byte {
	if a.IsNull(i) {
		return append(buf, 'N')
	}
	var tmp [64]byte
	var c []byte
	switch x := a.(type) {
	case *array.Int32:
		c = strconv.AppendInt(tmp[:0], int64(x.Value(i)), 10)
	case *array.Int64:
		c = strconv.AppendInt(tmp[:0], x.Value(i), 10)
	case *array.Date32:
		c = strconv.AppendInt(tmp[:0], int64(negInfDate(x.Value(i))), 10)
	case *array.Time64:
		c = strconv.AppendInt(tmp[:0], int64(x.Value(i)), 10)
	case *array.Timestamp:
		c = strconv.AppendInt(tmp[:0], int64(negInfTS(x.Value(i))), 10)
	case *array.Boolean:
		if x.Value(i) {
			c = append(tmp[:0], 't')
		} else {
			c = append(tmp[:0], 'f')
		}
	case *array.String:
		v := x.Value(i)
		buf = append(buf, 'V')
		buf = strconv.AppendInt(buf, int64(len(v)), 10)
		buf = append(buf, ':')
		return append(buf, v...)
	case *array.Binary:
		v := x.Value(i)
		buf = append(buf, 'V')
		buf = strconv.AppendInt(buf, int64(2*len(v)), 10)
		buf = append(buf, ':')
		return hex.AppendEncode(buf, v)
	default:
		return AppendField(buf, valueAt(a, i), a.DataType())
	}
	buf = append(buf, 'V')
	buf = strconv.AppendInt(buf, int64(len(c)), 10)
	buf = append(buf, ':')
	return append(buf, c...)
}

// valueAt returns row i of a lake column as the Go value typemap.Decode
// would have produced for it (nil for NULL).
func valueAt(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch c := a.(type) {
	case *array.Int8:
		return int32(c.Value(i))
	case *array.Int16:
		return int32(c.Value(i))
	case *array.Int32:
		return c.Value(i)
	case *array.Int64:
		return c.Value(i)
	case *array.Float32:
		return c.Value(i)
	case *array.Float64:
		return c.Value(i)
	case *array.Boolean:
		return c.Value(i)
	case *array.String:
		return c.Value(i)
	case *array.LargeString:
		return c.Value(i)
	case *array.StringView:
		return c.Value(i)
	case *array.Binary:
		return append([]byte{}, c.Value(i)...)
	case *array.LargeBinary:
		return append([]byte{}, c.Value(i)...)
	case *array.BinaryView:
		return append([]byte{}, c.Value(i)...)
	case *array.FixedSizeBinary:
		return append([]byte{}, c.Value(i)...)
	case *array.Decimal128:
		return c.Value(i)
	case *array.Date32:
		return c.Value(i)
	case *array.Time64:
		return c.Value(i)
	case *array.Timestamp:
		return c.Value(i)
	case array.ListLike:
		from, to := c.ValueOffsets(i)
		vals := c.ListValues()
		out := make([]any, 0, to-from)
		for j := from; j < to; j++ {
			out = append(out, valueAt(vals, int(j)))
		}
		return out
	}
	return fmt.Sprintf("?%s", a.DataType())
}

// display renders a value for a report: readable, never longer than about
// max characters.
func display(v any, t arrow.DataType, max int) string {
	s := displayFull(v, t, max)
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max]) + "…"
	}
	return s
}

func displayFull(v any, t arrow.DataType, max int) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case undecodable:
		return "(cannot be stored in the lake) " + quoteText(x.raw, max)
	case string:
		return quoteText(x, max)
	case []byte:
		if len(x) > max {
			x = x[:max]
		}
		return `\x` + hex.EncodeToString(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	case decimal128.Num:
		return DecimalText(x, DecimalScale(t))
	case arrow.Date32:
		switch x {
		case math.MaxInt32:
			return "infinity"
		case -math.MaxInt32, math.MinInt32:
			return "-infinity"
		}
		return time.Unix(int64(x)*86400, 0).UTC().Format("2006-01-02")
	case arrow.Time64:
		return time.UnixMicro(int64(x)).UTC().Format("15:04:05.999999")
	case arrow.Timestamp:
		switch x {
		case math.MaxInt64:
			return "infinity"
		case -math.MaxInt64, math.MinInt64:
			return "-infinity"
		}
		s := time.UnixMicro(int64(x)).UTC().Format("2006-01-02 15:04:05.999999")
		if ts, ok := t.(*arrow.TimestampType); ok && ts.TimeZone != "" {
			s += "+00"
		}
		return s
	case []any:
		elem := ListElem(t)
		var b strings.Builder
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(displayFull(e, elem, max))
			if b.Len() > 4*max {
				b.WriteString(", …")
				break
			}
		}
		b.WriteByte(']')
		return b.String()
	}
	return fmt.Sprint(v)
}

// quoteText quotes a string for display, escaping control characters and
// cutting it after max runes.
func quoteText(s string, max int) string {
	cut := false
	if utf8.RuneCountInString(s) > max {
		s = string([]rune(s)[:max])
		cut = true
	}
	q := strconv.Quote(s)
	// strconv.Quote escapes non-ASCII printable runes only when they are
	// not printable, so emoji and accents stay readable.
	if cut {
		q = q[:len(q)-1] + `…"`
	}
	return q
}

// negInfDate and negInfTS read the -infinity a lake written before
// tidemark stored DuckDB's sentinels (MinInt32 days, MinInt64 µs: no real
// value) as today's (-MaxInt32, -MaxInt64), so it still compares equal.
func negInfDate(d arrow.Date32) arrow.Date32 {
	if d == math.MinInt32 {
		return -math.MaxInt32
	}
	return d
}

func negInfTS(t arrow.Timestamp) arrow.Timestamp {
	if t == math.MinInt64 {
		return -math.MaxInt64
	}
	return t
}
