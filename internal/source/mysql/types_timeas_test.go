package mysql_test

import (
	"reflect"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/source/mysql"
)

// TestTimeAsText: under time_as text a TIME lands as a string holding
// MySQL's text of the value, negative and beyond 24 hours included, with
// the column's fractional digits, the same from the binlog (go-mysql's
// text, MariaDB 5.3's old format) and from a snapshot's SELECT.
func TestTimeAsText(t *testing.T) {
	for _, tc := range []struct {
		columnType, in, want string
	}{
		{"time", "-838:59:59", "-838:59:59"},
		{"time", "838:59:59", "838:59:59"},
		{"time", "25:00:00", "25:00:00"},
		{"time", "00:00:00", "00:00:00"},
		{"time(2)", "-00:00:00.01", "-00:00:00.01"},
		{"time(3)", "12:00:00.500000", "12:00:00.500"}, // go-mysql may print 6 digits
		{"time(6)", "100:00:00.000001", "100:00:00.000001"},
		{"time(6)", "-01:02:03.4", "-01:02:03.400000"},
	} {
		c := col(t, tc.columnType, "")
		c.TimeAs = mysql.TimeAsText
		m, err := mysql.Map(c)
		if err != nil {
			t.Fatal(err)
		}
		if f := m.Field(); !reflect.DeepEqual(f.Type, iceberg.Type(iceberg.PrimitiveTypes.String)) {
			t.Errorf("%s: lands as %v, want string", tc.columnType, f.Type)
		}
		if got, err := m.DecodeBinlog(tc.in); err != nil || got != tc.want {
			t.Errorf("%s binlog %q: got %#v, %v; want %q", tc.columnType, tc.in, got, err, tc.want)
		}
		if got, err := m.DecodeText([]byte(tc.in)); err != nil || got != tc.want {
			t.Errorf("%s text %q: got %#v, %v; want %q", tc.columnType, tc.in, got, err, tc.want)
		}
	}
	// micros (and the empty default) keep the long.
	for _, as := range []string{"", mysql.TimeAsMicros} {
		c := col(t, "time(6)", "")
		c.TimeAs = as
		m, err := mysql.Map(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := m.DecodeBinlog("-838:59:59.000000"); err != nil || got != int64(-3020399000000) {
			t.Errorf("time_as %q: got %#v, %v; want long microseconds", as, got, err)
		}
	}
	// A malformed value is still a dead letter, not a string.
	c := col(t, "time", "")
	c.TimeAs = mysql.TimeAsText
	m, _ := mysql.Map(c)
	if _, err := m.DecodeText([]byte("12:60:00")); err == nil {
		t.Error("12:60:00: no error under time_as text")
	}
}
