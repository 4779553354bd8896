package typemap

import (
	"errors"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
)

// Dates and timestamps are parsed by hand: time.Parse knows neither years
// beyond 9999 nor BC, and PostgreSQL has both. Under DateStyle=ISO the
// text is
//
//	date         YYYY-MM-DD[ BC]                       or [-]infinity
//	time         HH:MM:SS[.ffffff]
//	timestamp    YYYY-MM-DD HH:MM:SS[.ffffff][ BC]      or [-]infinity
//	timestamptz  YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]][ BC]
//
// with a year of four or more digits and the fraction trimmed of trailing
// zeros. Calendar arithmetic is proleptic Gregorian with year 0 = 1 BC,
// as in PostgreSQL.

const (
	usPerSecond = int64(1_000_000)
	usPerDay    = 86_400 * usPerSecond
)

var errTimeOfDay = errors.New("24:00:00 is outside the Iceberg time range [00:00, 24:00)")

func parseDate(text []byte) (arrow.Date32, error) {
	switch string(text) {
	case "infinity":
		return arrow.Date32(dateInfinity), nil
	case "-infinity":
		return arrow.Date32(dateNegInfinity), nil
	}
	y, m, d, rest, err := parseYMD(text)
	if err != nil {
		return 0, err
	}
	days, err := civilDays(y, m, d, rest)
	if err != nil {
		return 0, err
	}
	// PostgreSQL's dates (4713 BC to 5874897 AD) all fit; the check keeps
	// the infinity sentinels unambiguous whatever the input.
	if days <= dateNegInfinity || days >= dateInfinity {
		return 0, errors.New("date out of range for Iceberg date")
	}
	return arrow.Date32(days), nil
}

func parseTime(text []byte) (arrow.Time64, error) {
	us, n, err := parseClock(text)
	if err != nil {
		return 0, err
	}
	if n != len(text) {
		return 0, errMalformed
	}
	if us >= usPerDay {
		return 0, errTimeOfDay
	}
	return arrow.Time64(us), nil
}

// parseTimeMicros is parseTime for time_as: micros, where 24:00:00 is
// 86400000000.
func parseTimeMicros(text []byte) (int64, error) {
	us, n, err := parseClock(text)
	if err != nil {
		return 0, err
	}
	if n != len(text) {
		return 0, errMalformed
	}
	return us, nil
}

func parseTimestampNaive(text []byte) (arrow.Timestamp, error) { return parseTimestamp(text, false) }

func parseTimestamptz(text []byte) (arrow.Timestamp, error) { return parseTimestamp(text, true) }

var errTimestampRange = errors.New("timestamp out of range for int64 microseconds since 1970")

func parseTimestamp(text []byte, withZone bool) (arrow.Timestamp, error) {
	switch string(text) {
	case "infinity":
		return arrow.Timestamp(tsInfinity), nil
	case "-infinity":
		return arrow.Timestamp(tsNegInfinity), nil
	}
	y, m, d, rest, err := parseYMD(text)
	if err != nil {
		return 0, err
	}
	if len(rest) == 0 || rest[0] != ' ' {
		return 0, errMalformed
	}
	rest = rest[1:]
	tod, n, err := parseClock(rest)
	if err != nil {
		return 0, err
	}
	rest = rest[n:]
	var offset int64 // seconds east of UTC
	if withZone {
		offset, n, err = parseOffset(rest)
		if err != nil {
			return 0, err
		}
		rest = rest[n:]
	}
	days, err := civilDays(y, m, d, rest)
	if err != nil {
		return 0, err
	}
	// days*usPerDay + tod - offset, each step checked: PostgreSQL's range
	// (4713 BC to 294276 AD) reaches past int64 microseconds since 1970 at
	// its top.
	const maxDays = math.MaxInt64 / usPerDay
	if days > maxDays || days < -maxDays {
		return 0, errTimestampRange
	}
	us, ok := addChecked(days*usPerDay, tod)
	if ok {
		us, ok = addChecked(us, -offset*usPerSecond)
	}
	if !ok || us == tsInfinity || us == tsNegInfinity {
		return 0, errTimestampRange
	}
	return arrow.Timestamp(us), nil
}

func addChecked(a, b int64) (int64, bool) {
	c := a + b
	if (b > 0 && c < a) || (b < 0 && c > a) {
		return 0, false
	}
	return c, true
}

// parseYMD reads YYYY-MM-DD with a year of 4 to 7 digits (PostgreSQL
// prints at most 7) and returns the rest of the text.
func parseYMD(text []byte) (y, m, d int64, rest []byte, err error) {
	y, n := digits(text, 4, 7)
	if n == 0 || n >= len(text) || text[n] != '-' {
		return 0, 0, 0, nil, errMalformed
	}
	text = text[n+1:]
	m, n = digits(text, 2, 2)
	if n == 0 || n >= len(text) || text[n] != '-' {
		return 0, 0, 0, nil, errMalformed
	}
	text = text[n+1:]
	d, n = digits(text, 2, 2)
	if n == 0 {
		return 0, 0, 0, nil, errMalformed
	}
	return y, m, d, text[n:], nil
}

// civilDays applies the era suffix (era must be "" or " BC": the whole
// remaining text), validates the date and returns its days since
// 1970-01-01. The BC year Y is the astronomical year 1-Y.
func civilDays(y, m, d int64, era []byte) (int64, error) {
	if y == 0 { // there is no year 0 in either era
		return 0, errMalformed
	}
	switch string(era) {
	case "":
	case " BC":
		y = 1 - y
	default:
		return 0, errMalformed
	}
	if m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, errMalformed
	}
	return daysFromCivil(y, m, d), nil
}

// parseClock reads HH:MM:SS[.f{1,6}] and returns microseconds since
// midnight (up to 24:00:00 inclusive) and the bytes consumed.
func parseClock(text []byte) (us int64, n int, err error) {
	h, k := digits(text, 2, 2)
	if k == 0 || k >= len(text) || text[k] != ':' {
		return 0, 0, errMalformed
	}
	n = k + 1
	m, k := digits(text[n:], 2, 2)
	if k == 0 || n+k >= len(text) || text[n+k] != ':' {
		return 0, 0, errMalformed
	}
	n += k + 1
	s, k := digits(text[n:], 2, 2)
	if k == 0 {
		return 0, 0, errMalformed
	}
	n += k
	var frac int64
	if n < len(text) && text[n] == '.' {
		var f int64
		k := 0
		for n+1+k < len(text) && isDigit(text[n+1+k]) {
			if k == 6 {
				return 0, 0, errors.New("more than 6 fractional digits")
			}
			f = f*10 + int64(text[n+1+k]-'0')
			k++
		}
		if k == 0 {
			return 0, 0, errMalformed
		}
		for i := k; i < 6; i++ {
			f *= 10
		}
		frac = f
		n += 1 + k
	}
	if h > 24 || m > 59 || s > 59 || (h == 24 && (m != 0 || s != 0 || frac != 0)) {
		return 0, 0, errMalformed
	}
	return ((h*60+m)*60+s)*usPerSecond + frac, n, nil
}

// parseOffset reads ±HH[:MM[:SS]] and returns seconds east of UTC.
func parseOffset(text []byte) (sec int64, n int, err error) {
	if len(text) == 0 || (text[0] != '+' && text[0] != '-') {
		return 0, 0, errMalformed
	}
	sign := int64(1)
	if text[0] == '-' {
		sign = -1
	}
	n = 1
	var parts [3]int64
	for i := 0; i < 3; i++ {
		if i > 0 {
			if n >= len(text) || text[n] != ':' {
				break
			}
			n++
		}
		v, k := digits(text[n:], 2, 2)
		if k == 0 {
			return 0, 0, errMalformed
		}
		parts[i] = v
		n += k
	}
	if parts[1] > 59 || parts[2] > 59 {
		return 0, 0, errMalformed
	}
	return sign * (parts[0]*3600 + parts[1]*60 + parts[2]), n, nil
}

// digits reads between lo and hi ASCII digits; n == 0 means fewer than lo.
func digits(text []byte, lo, hi int) (v int64, n int) {
	for n < len(text) && n < hi && isDigit(text[n]) {
		v = v*10 + int64(text[n]-'0')
		n++
	}
	if n < lo || (n == hi && n < len(text) && isDigit(text[n])) {
		return 0, 0
	}
	return v, n
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d in the
// proleptic Gregorian calendar (astronomical years); Howard Hinnant's
// algorithm.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
