package typemap_test

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// render prints a decoded value unambiguously for tests and the golden
// file: the Go type's natural form, plus PostgreSQL's spelling where the
// raw number alone would not be checkable by eye.
func render(v any, t arrow.DataType) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int32, int64, bool:
		return fmt.Sprint(x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return strconv.Quote(x)
	case []byte:
		return "0x" + hex.EncodeToString(x)
	case decimal128.Num:
		if dt, ok := t.(*arrow.Decimal128Type); ok {
			return x.ToString(dt.Scale)
		}
		return fmt.Sprintf("decimal128(%d,%d)?", x.HighBits(), x.LowBits())
	case arrow.Date32:
		s, _ := pgText(x, t)
		return fmt.Sprintf("%d (%s)", int32(x), s)
	case arrow.Time64:
		s, _ := pgText(x, t)
		return fmt.Sprintf("%d (%s)", int64(x), s)
	case arrow.Timestamp:
		s, _ := pgText(x, t)
		return fmt.Sprintf("%d (%s)", int64(x), s)
	case []any:
		var et arrow.DataType
		if lt, ok := t.(*arrow.ListType); ok {
			et = lt.Elem()
		}
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = render(e, et)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("unexpected %T %v", v, v)
}

// pgText renders a decoded scalar back into PostgreSQL's text output under
// typemap.SessionSettings, for the types where that is defined; tests
// compare it with the text that was decoded to prove the round trip.
func pgText(v any, t arrow.DataType) (string, bool) {
	switch x := v.(type) {
	case int32, int64:
		return fmt.Sprint(x), true
	case bool:
		if x {
			return "t", true
		}
		return "f", true
	case string:
		return x, true
	case []byte:
		return `\x` + hex.EncodeToString(x), true
	case decimal128.Num:
		dt, ok := t.(*arrow.Decimal128Type)
		if !ok {
			return "", false
		}
		return x.ToString(dt.Scale), true
	case arrow.Date32:
		switch int32(x) {
		case math.MaxInt32:
			return "infinity", true
		case -math.MaxInt32:
			return "-infinity", true
		}
		y, m, d := time.Unix(int64(x)*86400, 0).UTC().Date()
		return pgDate(y, m, d, ""), true
	case arrow.Time64:
		return clock(int64(x)), true
	case arrow.Timestamp:
		switch int64(x) {
		case math.MaxInt64:
			return "infinity", true
		case -math.MaxInt64:
			return "-infinity", true
		}
		us := int64(x)
		sec := us / 1e6
		if us%1e6 < 0 {
			sec--
		}
		tm := time.Unix(sec, 0).UTC()
		y, m, d := tm.Date()
		c := clock(us - sec*1e6 + int64(tm.Hour()*3600+tm.Minute()*60+tm.Second())*1e6)
		zone := ""
		if tt, ok := t.(*arrow.TimestampType); ok && tt.TimeZone != "" {
			zone = "+00"
		}
		return pgDate(y, m, d, " "+c+zone), true
	}
	return "", false
}

func pgDate(y int, m time.Month, d int, tail string) string {
	if y <= 0 {
		return fmt.Sprintf("%04d-%02d-%02d%s BC", 1-y, m, d, tail)
	}
	return fmt.Sprintf("%04d-%02d-%02d%s", y, m, d, tail)
}

func clock(us int64) string {
	s := fmt.Sprintf("%02d:%02d:%02d", us/3_600_000_000, us/60_000_000%60, us/1_000_000%60)
	if f := us % 1_000_000; f != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%06d", f), "0")
	}
	return s
}
