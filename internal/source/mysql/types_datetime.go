package mysql

import (
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
)

// MySQL's temporal text, from the binlog (go-mysql) and from SELECT alike:
//
//	date       YYYY-MM-DD                    (0000-00-00: the zero date)
//	datetime   YYYY-MM-DD HH:MM:SS[.f{1,6}]  timestamp the same, in UTC
//	time       [-]H{2,3}:MM:SS[.f{1,6}]      -838:59:59.000000 .. 838:59:59.000000
//
// Years are 0000..9999, so Go's time package (proleptic Gregorian, year 0
// = 1 BC) computes them exactly. A date that is not on the calendar
// (2024-02-30 under ALLOW_INVALID_DATES, a zero month or day, the zero
// date) has no lake value: time.Date would move it to another day.

const usPerSecond = int64(time.Second / time.Microsecond)

func parseDate(s string) (arrow.Date32, error) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return 0, errMalformed
	}
	y, ok1 := atoi(s[0:4])
	mo, ok2 := atoi(s[5:7])
	d, ok3 := atoi(s[8:10])
	if !ok1 || !ok2 || !ok3 {
		return 0, errMalformed
	}
	return dateOf(y, mo, d)
}

func dateOf(y, mo, d int) (arrow.Date32, error) {
	if err := checkDate(y, mo, d); err != nil {
		return 0, err
	}
	return arrow.Date32(time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC).Unix() / 86400), nil
}

func checkDate(y, mo, d int) error {
	switch {
	case y == 0 && mo == 0 && d == 0:
		return errZeroDate
	case mo == 0 || d == 0:
		return errZeroPart
	case mo > 12 || d > daysIn(y, mo):
		return errInvalidDate
	}
	return nil
}

func daysIn(y, mo int) int {
	return time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// parseDatetime reads datetime (and timestamp, printed in UTC) text into
// microseconds since 1970-01-01 00:00:00.
func parseDatetime(s string) (arrow.Timestamp, error) {
	if len(s) < 19 || s[10] != ' ' {
		return 0, errMalformed
	}
	days, err := parseDate(s[:10])
	if err != nil {
		return 0, err
	}
	us, neg, err := parseClock(s[11:], 2)
	if err != nil {
		return 0, err
	}
	if neg || us >= 24*3600*usPerSecond {
		return 0, errMalformed
	}
	return arrow.Timestamp(int64(days)*86400*usPerSecond + us), nil
}

// parseTime reads time text into signed microseconds.
func parseTime(s string) (int64, error) {
	us, neg, err := parseClock(s, 3)
	if err != nil {
		return 0, err
	}
	if neg {
		us = -us
	}
	return us, nil
}

// parseClock reads [-]H{2,maxH}:MM:SS[.f{1,6}] and returns its absolute
// value in microseconds and its sign.
func parseClock(s string, maxH int) (us int64, neg bool, err error) {
	if len(s) > 0 && s[0] == '-' {
		neg = true
		s = s[1:]
	}
	colon := 0
	for colon < len(s) && s[colon] != ':' {
		colon++
	}
	if colon < 2 || colon > maxH || len(s) < colon+6 || s[colon+3] != ':' {
		return 0, false, errMalformed
	}
	h, ok1 := atoi(s[:colon])
	mi, ok2 := atoi(s[colon+1 : colon+3])
	sec, ok3 := atoi(s[colon+4 : colon+6])
	if !ok1 || !ok2 || !ok3 || mi > 59 || sec > 59 {
		return 0, false, errMalformed
	}
	us = (int64(h)*3600 + int64(mi)*60 + int64(sec)) * usPerSecond
	rest := s[colon+6:]
	if rest == "" {
		return us, neg, nil
	}
	if rest[0] != '.' || len(rest) < 2 || len(rest) > 7 {
		return 0, false, errMalformed
	}
	f, ok := atoi(rest[1:])
	if !ok {
		return 0, false, errMalformed
	}
	for i := len(rest) - 1; i < 6; i++ {
		f *= 10
	}
	return us + int64(f), neg, nil
}

// atoi reads ASCII digits only (no sign, no spaces).
func atoi(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// parseOldTime reads go-mysql's text of a time in MariaDB 5.3's (and MySQL
// 5.5's) format: a signed 24-bit integer HHMMSS that go-mysql reads as
// unsigned and prints as H:MM:SS of that number, so -838:59:59 arrives as
// "839:12:57". The number is rebuilt from the text and its sign restored.
func parseOldTime(s string) (int64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, errMalformed
	}
	h, ok1 := atoi(parts[0])
	mi, ok2 := atoi(parts[1])
	sec, ok3 := atoi(parts[2])
	if !ok1 || !ok2 || !ok3 || mi > 99 || sec > 99 {
		return 0, errMalformed
	}
	raw := int64(h)*10000 + int64(mi)*100 + int64(sec)
	if raw >= 1<<24 {
		return 0, errMalformed
	}
	if raw >= 1<<23 {
		raw -= 1 << 24
	}
	neg := raw < 0
	if neg {
		raw = -raw
	}
	h, mi, sec = int(raw/10000), int(raw/100%100), int(raw%100)
	if mi > 59 || sec > 59 {
		return 0, errMalformed
	}
	us := (int64(h)*3600 + int64(mi)*60 + int64(sec)) * usPerSecond
	if neg {
		us = -us
	}
	return us, nil
}
