package mysql

import (
	"strconv"
	"strings"
)

// TimeAs values a MySQL source accepts (Options.TimeAs, config time_as).
// A MySQL TIME is a signed duration (-838:59:59 to 838:59:59), which an
// Iceberg time (00:00:00 to 23:59:59.999999) cannot hold, so there is no
// "time" form: the default is micros.
const (
	// TimeAsMicros lands TIME as a long: signed microseconds.
	TimeAsMicros = "micros"
	// TimeAsText lands TIME as a string: MySQL's own text of the value,
	// [-]HH:MM:SS (hours up to 838) with the column's fractional digits.
	TimeAsText = "text"
)

// timeValue is a decoded TIME in the mapping's form: us itself for a long,
// its text for time_as text.
func (m *Mapping) timeValue(us int64, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if m.k == kTimeText {
		return formatTime(us, m.frac), nil
	}
	return us, nil
}

// formatTime is MySQL's text of a TIME with frac fractional digits:
// -838:59:59, 25:00:00.500, 00:00:00.000001.
func formatTime(us int64, frac int) string {
	var b strings.Builder
	if us < 0 {
		b.WriteByte('-')
		us = -us
	}
	sec := us / usPerSecond
	two := func(n int64) {
		if n < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	two(sec / 3600)
	b.WriteByte(':')
	two(sec / 60 % 60)
	b.WriteByte(':')
	two(sec % 60)
	if frac > 0 {
		f := strconv.FormatInt(us%usPerSecond+usPerSecond, 10)[1:] // 6 digits
		b.WriteByte('.')
		b.WriteString(f[:min(frac, 6)])
	}
	return b.String()
}
