package mysql

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/tidemark/tidemark/internal/coltype"
)

// BinlogTypeError is a binlog value of a Go type (or an enum index, a set
// bit) the column's definition cannot produce: the column and the row
// event disagree, which means the capture's schema is not the one the
// event was written under. It is never a dead letter: the capture stops.
type BinlogTypeError struct {
	Column string // schema.table.column
	Type   string // COLUMN_TYPE
	Got    string // the Go type, or what was out of place
}

func (e *BinlogTypeError) Error() string {
	return fmt.Sprintf("binlog value for column %s (%s) is %s: the row event does not match the column's definition", e.Column, e.Type, e.Got)
}

// Reasons are categories, never values (values may be sensitive).
var (
	errMalformed   = errors.New("malformed value")
	errRange       = errors.New("out of range for the column's type")
	errZeroDate    = errors.New("zero date (0000-00-00) has no date value")
	errZeroPart    = errors.New("date with a zero month or day has no date value")
	errInvalidDate = errors.New("invalid calendar date (stored under ALLOW_INVALID_DATES)")
)

func (m *Mapping) valueErr(err error) error {
	return &coltype.ValueError{Column: m.name, Type: m.source, Reason: err.Error()}
}

func (m *Mapping) typeErr(v any) error {
	return &BinlogTypeError{Column: m.col, Type: m.source, Got: fmt.Sprintf("a Go %T", v)}
}

// DecodeBinlog turns one value of a go-mysql replication.RowsEvent row
// into the lake value: int32, int64, float32, float64, string, []byte,
// decimal128.Num, arrow.Date32 or arrow.Timestamp, or nil for SQL NULL
// (v == nil). The result never aliases v (go-mysql's strings and byte
// slices may point into the event's buffer).
//
// It reads what go-mysql v1.13.0 yields for each column type under
// BinlogSyncerConfig{ParseTime: false, TimestampStringLocation: time.UTC}
// (SyncerSettings sets them), with UseDecimal either way. ParseTime true is
// refused for datetime (go-mysql's time.Date moves an invalid date to
// another day); TIMESTAMP is read from a time.Time too. A value with no exact
// lake form (a zero date, text invalid in its character set) returns a
// *coltype.ValueError: dead-letter the row. A value the column cannot
// hold at all returns a *BinlogTypeError: the schema is out of step.
func (m *Mapping) DecodeBinlog(v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	out, err := m.decodeBinlog(v)
	if err != nil {
		var te *BinlogTypeError
		if errors.As(err, &te) {
			return nil, err
		}
		return nil, m.valueErr(err)
	}
	return out, nil
}

func (m *Mapping) decodeBinlog(v any) (any, error) {
	switch m.k {
	case kInt32, kUint32, kInt64, kUint64:
		if !m.isUnsigned() {
			// Already the lake's type (INT, MEDIUMINT as int32; BIGINT as
			// int64): the value as go-mysql boxed it, not boxed again.
			switch v.(type) {
			case int32:
				if m.k == kInt32 {
					return v, nil
				}
			case int64:
				if m.k == kInt64 {
					return v, nil
				}
			}
		}
		x, ok := binlogInt(v)
		if !ok {
			return nil, m.typeErr(v)
		}
		if m.isUnsigned() {
			u := uint64(x)
			if m.bits < 64 {
				u &= 1<<m.bits - 1
			}
			return m.fromUint(u)
		}
		return m.fromInt(x)
	case kDecimal, kDecimalText:
		var s string
		switch d := v.(type) {
		case string:
			s = d
		case interface{ StringFixed(int32) string }: // shopspring/decimal, UseDecimal
			s = d.StringFixed(m.scale)
		default:
			return nil, m.typeErr(v)
		}
		return m.decimal(s)
	case kFloat32:
		switch f := v.(type) {
		case float32:
			return f, nil
		case float64:
			if float64(float32(f)) != f && !math.IsNaN(f) {
				return nil, errRange
			}
			return float32(f), nil
		}
	case kFloat64:
		switch f := v.(type) {
		case float64:
			return f, nil
		case float32:
			return float64(f), nil
		}
	case kBit, kBit64:
		switch b := v.(type) {
		case int64:
			return m.bit(uint64(b))
		case []byte:
			return m.bitBytes(b)
		}
	case kEnum:
		i, ok := binlogInt(v)
		if !ok {
			return nil, m.typeErr(v)
		}
		switch {
		case i == 0:
			return "", nil // MySQL's error member, which SELECT shows as ''
		case i < 0 || i > int64(len(m.els)):
			return nil, &BinlogTypeError{Column: m.col, Type: m.source, Got: fmt.Sprintf("enum index %d of %d members", i, len(m.els))}
		}
		return m.els[i-1], nil
	case kSet:
		x, ok := binlogInt(v)
		if !ok {
			return nil, m.typeErr(v)
		}
		u := uint64(x)
		if n := len(m.els); n < 64 && u>>n != 0 {
			return nil, &BinlogTypeError{Column: m.col, Type: m.source, Got: fmt.Sprintf("a set bit beyond its %d members", n)}
		}
		var sb strings.Builder
		for i := 0; u != 0; i, u = i+1, u>>1 {
			if u&1 != 0 {
				if sb.Len() > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(m.els[i])
			}
		}
		return sb.String(), nil
	case kYear:
		y, ok := binlogInt(v)
		if !ok {
			return nil, m.typeErr(v)
		}
		return year(y)
	case kDate:
		if t, ok := v.(string); ok {
			return parseDate(t)
		}
	case kDatetime:
		switch t := v.(type) {
		case string:
			return parseDatetime(t)
		case time.Time:
			// ParseTime true: go-mysql builds it with time.Date, which
			// moves an invalid date (2024-02-30 under ALLOW_INVALID_DATES)
			// to another day. Only the text is exact.
			return nil, &BinlogTypeError{Column: m.col, Type: m.source, Got: "a time.Time (set BinlogSyncerConfig.ParseTime to false)"}
		}
	case kTimestamp:
		switch t := v.(type) {
		case string: // ParseTime false: printed in TimestampStringLocation (UTC)
			if f, ok := strings.CutPrefix(t, "0000-00-00 00:00:00."); ok && strings.Trim(f, "0") != "" {
				// go-mysql prints every TIMESTAMP whose seconds are 0 as the
				// zero value, but only 1970-01-01 00:00:00 UTC has them with
				// a fraction (MariaDB accepts it): the zero TIMESTAMP has none.
				us, _, err := parseClock("00:00:00."+f, 2)
				return arrow.Timestamp(us), err
			}
			return parseDatetime(t)
		case time.Time: // ParseTime: the instant
			return arrow.Timestamp(t.UnixMicro()), nil
		}
	case kTime, kTimeText:
		if s, ok := v.(string); ok {
			if m.oldTime {
				return m.timeValue(parseOldTime(s))
			}
			return m.timeValue(parseTime(s))
		}
	case kText:
		switch s := v.(type) {
		case string:
			return toUTF8(m.cs, []byte(s))
		case []byte:
			return toUTF8(m.cs, s)
		}
	case kJSON:
		switch s := v.(type) {
		case *replication.JsonDiff:
			return nil, &BinlogTypeError{Column: m.col, Type: m.source,
				Got: "a partial JSON update (set binlog_row_value_options='' on the server: tidemark needs whole documents)"}
		case string:
			return jsonText([]byte(s))
		case []byte:
			if len(s) == 0 {
				// An empty document (INSERT IGNORE of NULL into a NOT NULL
				// column): MySQL reads it as the JSON null literal.
				return "null", nil
			}
			return jsonText(s)
		}
	case kBinary, kBinaryFixed, kGeometry, kUUID, kInet4, kInet6:
		var b []byte
		switch s := v.(type) {
		case string:
			b = []byte(s)
		case []byte:
			b = s
		default:
			return nil, m.typeErr(v)
		}
		return m.fromBytes(b, true)
	}
	return nil, m.typeErr(v)
}

// DecodeText turns one value of the text protocol (a snapshot SELECT of
// SelectExpr under SessionVariables, read as sql.RawBytes; nil is SQL
// NULL) into the lake value DecodeBinlog gives for the same stored value.
// go-sql-driver's rendering of the binary protocol (a prepared statement's
// result read as sql.RawBytes) is accepted too. The result never aliases
// text. A value with no exact lake form returns a *coltype.ValueError.
func (m *Mapping) DecodeText(text []byte) (any, error) {
	if text == nil {
		return nil, nil
	}
	v, err := m.decodeText(text)
	if err != nil {
		return nil, m.valueErr(err)
	}
	return v, nil
}

func (m *Mapping) decodeText(text []byte) (any, error) {
	switch m.k {
	case kInt32, kUint32, kInt64, kUint64:
		if m.k != kUint64 {
			x, err := m.textInt64(text)
			if err != nil {
				return nil, err
			}
			if m.k == kInt32 {
				return int32(x), nil
			}
			return x, nil
		}
		if m.isUnsigned() {
			u, err := strconv.ParseUint(string(text), 10, 64)
			if err != nil {
				return nil, numErr(err)
			}
			if m.bits < 64 && u>>m.bits != 0 {
				return nil, errRange
			}
			return m.fromUint(u)
		}
		x, err := strconv.ParseInt(string(text), 10, 64)
		if err != nil {
			return nil, numErr(err)
		}
		if m.bits < 64 && (x < -1<<(m.bits-1) || x >= 1<<(m.bits-1)) {
			return nil, errRange
		}
		return m.fromInt(x)
	case kDecimal, kDecimalText:
		return m.decimal(string(text))
	case kFloat32:
		// SelectExpr reads a float as a double: its text is the float's
		// exact value, which converts back without rounding.
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return nil, numErr(err)
		}
		if float64(float32(f)) != f {
			return nil, errors.New("text is not a float32 value (read float columns with SelectExpr)")
		}
		return float32(f), nil
	case kFloat64:
		f, err := strconv.ParseFloat(string(text), 64)
		if err != nil {
			return nil, numErr(err)
		}
		return f, nil
	case kBit, kBit64:
		return m.bitBytes(text)
	case kEnum, kSet:
		return toUTF8(csUTF8, text)
	case kYear:
		y, err := strconv.ParseInt(string(text), 10, 32)
		if err != nil {
			return nil, numErr(err)
		}
		return year(y)
	case kDate:
		return parseDate(string(text))
	case kDatetime, kTimestamp:
		return parseDatetime(string(text))
	case kTime, kTimeText:
		return m.timeValue(parseTime(string(text)))
	case kText:
		return toUTF8(csUTF8, text) // the server converted it (SessionVariables)
	case kJSON:
		return jsonText(text)
	case kBinary, kBinaryFixed, kGeometry:
		return m.fromBytes(text, false)
	case kUUID, kInet4, kInet6:
		return toUTF8(csUTF8, text)
	}
	return nil, fmt.Errorf("no text decoder for kind %d", m.k)
}

// AppendText appends DecodeText(text) to b, a builder of ArrowType: the
// snapshot's path into a change.Chunk. A value with no exact lake form
// returns DecodeText's *coltype.ValueError and appends nothing; any other
// error is a builder of another type.
func (m *Mapping) AppendText(b array.Builder, text []byte) error {
	if text == nil {
		b.AppendNull()
		return nil
	}
	// The common kinds go straight into their builders, without the boxed
	// value DecodeText returns; the parsers are DecodeText's.
	var err error
	switch bb := b.(type) {
	case *array.Int32Builder:
		if m.k == kInt32 {
			var x int64
			if x, err = m.textInt64(text); err == nil {
				bb.Append(int32(x))
				return nil
			}
			return m.valueErr(err)
		}
	case *array.Int64Builder:
		if m.k == kInt64 || m.k == kUint32 {
			var x int64
			if x, err = m.textInt64(text); err == nil {
				bb.Append(x)
				return nil
			}
			return m.valueErr(err)
		}
	case *array.StringBuilder:
		if m.k == kText || m.k == kEnum || m.k == kSet {
			if !utf8.Valid(text) {
				return m.valueErr(errNotUTF8)
			}
			bb.BinaryBuilder.Append(text)
			return nil
		}
	case *array.BinaryBuilder:
		if m.k == kBinary {
			bb.Append(text)
			return nil
		}
	case *array.TimestampBuilder:
		if m.k == kDatetime || m.k == kTimestamp {
			var ts arrow.Timestamp
			if ts, err = parseDatetime(string(text)); err == nil {
				bb.Append(ts)
				return nil
			}
			return m.valueErr(err)
		}
	}
	v, err := m.DecodeText(text)
	if err != nil {
		return err
	}
	if err := coltype.AppendValue(b, v); err != nil {
		return fmt.Errorf("column %s: %w", m.col, err)
	}
	return nil
}

// DecodeBinlog is Map(c) then DecodeBinlog(v), for one-off use; a capture
// keeps the Mappings of a table and calls their methods.
func DecodeBinlog(c Column, v any) (any, error) {
	m, err := Map(c)
	if err != nil {
		return nil, err
	}
	return m.DecodeBinlog(v)
}

// DecodeText is Map(c) then DecodeText(text), for one-off use.
func DecodeText(c Column, text []byte) (any, error) {
	m, err := Map(c)
	if err != nil {
		return nil, err
	}
	return m.DecodeText(text)
}

// textInt64 reads the text of an integer column whose values fit int64
// (all but bigint unsigned), checked against the column's own range.
func (m *Mapping) textInt64(text []byte) (int64, error) {
	if m.unsigned {
		u, err := strconv.ParseUint(string(text), 10, 64)
		if err != nil {
			return 0, numErr(err)
		}
		if u>>min(m.bits, 63) != 0 {
			return 0, errRange
		}
		return int64(u), nil
	}
	x, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return 0, numErr(err)
	}
	if m.bits < 64 && (x < -1<<(m.bits-1) || x >= 1<<(m.bits-1)) {
		return 0, errRange
	}
	return x, nil
}

func (m *Mapping) isUnsigned() bool { return m.unsigned }

func numErr(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return errRange
	}
	return errMalformed
}

// binlogInt reads the integer types go-mysql yields (int8, int16, int32
// for int and mediumint, int64, int for year).
func binlogInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	}
	return 0, false
}

func (m *Mapping) fromInt(x int64) (any, error) {
	switch m.k {
	case kInt32:
		if x < math.MinInt32 || x > math.MaxInt32 {
			return nil, errRange
		}
		return int32(x), nil
	case kInt64, kUint32:
		return x, nil
	case kUint64:
		if x < 0 {
			return nil, errRange
		}
		return decimal128.FromI64(x), nil
	}
	return nil, errRange
}

func (m *Mapping) fromUint(u uint64) (any, error) {
	switch m.k {
	case kInt32:
		if u > math.MaxInt32 {
			return nil, errRange
		}
		return int32(u), nil
	case kInt64, kUint32:
		if u > math.MaxInt64 {
			return nil, errRange
		}
		return int64(u), nil
	case kUint64:
		return decimal128.FromU64(u), nil
	}
	return nil, errRange
}

func (m *Mapping) bit(u uint64) (any, error) {
	if m.bits < 64 && u>>m.bits != 0 {
		return nil, errRange
	}
	if m.k == kBit64 {
		return decimal128.FromU64(u), nil
	}
	return int64(u), nil
}

// bitBytes reads bit(n) as the text protocol sends it: ceil(n/8) bytes,
// big-endian.
func (m *Mapping) bitBytes(b []byte) (any, error) {
	if len(b) > 8 {
		return nil, errRange
	}
	var u uint64
	for _, c := range b {
		u = u<<8 | uint64(c)
	}
	return m.bit(u)
}

// year reads YEAR: 0 (the year '0000') or 1901..2155.
func year(y int64) (any, error) {
	if y != 0 && (y < 1901 || y > 2155) {
		return nil, errRange
	}
	return int32(y), nil
}

// fromBytes copies a binary value; binary(n) comes out of the binlog
// without its trailing zero bytes (the row image strips the pad
// character) and is padded back to n, as SELECT shows it; so are
// MariaDB's uuid, inet4 and inet6, which become their text. Spatial values
// become WKB.
func (m *Mapping) fromBytes(b []byte, binlog bool) (any, error) {
	switch m.k {
	case kBinaryFixed:
		if len(b) > m.length && m.length > 0 {
			return nil, errRange
		}
		n := max(m.length, len(b))
		out := make([]byte, n)
		copy(out, b)
		return out, nil
	case kGeometry:
		return wkb(b)
	}
	if binlog {
		// MariaDB's uuid, inet4 and inet6 are fixed binary strings in the
		// row image, stripped of trailing zero bytes like binary(n).
		if n := map[kind]int{kUUID: 16, kInet4: 4, kInet6: 16}[m.k]; n > 0 && len(b) < n {
			b = append(append(make([]byte, 0, n), b...), make([]byte, n-len(b))...)
		}
	}
	switch m.k {
	case kUUID:
		return uuidText(b)
	case kInet4:
		if len(b) != 4 {
			return nil, errMalformed
		}
		return fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3]), nil
	case kInet6:
		return inet6Text(b)
	}
	return append([]byte{}, b...), nil
}

// decimal reads MySQL's decimal text ([-]digits[.digits], at most the
// column's digits, at most its scale after the point) exactly.
func (m *Mapping) decimal(s string) (any, error) {
	var buf [40]byte
	neg, digits, err := coltype.ScanDecimal(buf[:0], s, m.prec, m.scale)
	if err == coltype.ErrDecimalSyntax {
		return nil, errMalformed
	}
	if err != nil {
		return nil, err
	}
	if m.k == kDecimalText {
		return decimalText(neg, digits, int(m.scale)), nil
	}
	return coltype.DecimalOf(neg, digits)
}

// decimalText prints unscaled digits at scale s as MySQL does: a leading
// 0 before the point, exactly s digits after it.
func decimalText(neg bool, digits []byte, s int) string {
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if len(digits) <= s {
		b.WriteByte('0')
		if s > 0 {
			b.WriteByte('.')
			b.WriteString(strings.Repeat("0", s-len(digits)))
			b.Write(digits)
		}
		return b.String()
	}
	b.Write(digits[:len(digits)-s])
	if s > 0 {
		b.WriteByte('.')
		b.Write(digits[len(digits)-s:])
	}
	return b.String()
}

// BinlogText renders a binlog value as text for the raw column of a
// dead-letter row (change.DeadLetter.Raw), as close to what SELECT would
// show as the value allows: integers with their sign fixed, an enum or set
// by its members, text converted from its character set when it can be,
// and bytes (or text that cannot be converted) as 0x-prefixed hex. nil
// (SQL NULL) is "". It never fails.
func (m *Mapping) BinlogText(v any) string {
	if v == nil {
		return ""
	}
	switch m.k {
	case kInt32, kUint32, kInt64, kUint64, kBit, kBit64, kEnum, kSet, kYear, kDecimal, kDecimalText:
		if out, err := m.decodeBinlog(v); err == nil {
			switch x := out.(type) {
			case decimal128.Num:
				return x.ToString(m.scale)
			case string:
				return x
			}
			return fmt.Sprint(out)
		}
	}
	var b []byte
	switch x := v.(type) {
	case string:
		b = []byte(x)
	case []byte:
		b = x
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05.999999")
	default:
		return fmt.Sprint(v)
	}
	switch m.k {
	case kText, kJSON:
		if s, err := toUTF8(m.cs, b); err == nil {
			return s
		}
	case kDate, kDatetime, kTimestamp, kTime, kTimeText:
		if utf8.Valid(b) {
			return string(b)
		}
	}
	return "0x" + hex.EncodeToString(b)
}
