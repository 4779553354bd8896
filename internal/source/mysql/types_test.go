package mysql_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/mysql"
)

// col builds a Column the way LoadColumns does, from COLUMN_TYPE.
func col(t *testing.T, columnType, charset string) mysql.Column {
	t.Helper()
	c := mysql.Column{Schema: "shop", Table: "orders", Name: "c", ColumnType: columnType, Charset: charset}
	if err := c.ParseColumnType(); err != nil {
		t.Fatalf("ParseColumnType(%q): %v", columnType, err)
	}
	return c
}

func mapping(t *testing.T, columnType, charset string) *mysql.Mapping {
	t.Helper()
	m, err := mysql.Map(col(t, columnType, charset))
	if err != nil {
		t.Fatalf("Map(%q): %v", columnType, err)
	}
	return m
}

func TestParseColumnType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want mysql.Column
	}{
		{"int(10) unsigned", mysql.Column{DataType: "int", Unsigned: true}},
		{"int unsigned", mysql.Column{DataType: "int", Unsigned: true}},
		{"smallint(5) unsigned zerofill", mysql.Column{DataType: "smallint", Unsigned: true, Zerofill: true}},
		{"decimal(12,2)", mysql.Column{DataType: "decimal", Precision: 12, Scale: 2}},
		{"bit(10)", mysql.Column{DataType: "bit", Precision: 10}},
		{"datetime(6)", mysql.Column{DataType: "datetime", DatetimePrecision: 6}},
		{"binary(16)", mysql.Column{DataType: "binary", MaxLength: 16}},
		{`enum('a','b c','it''s','a\\b','x,y','(p)','nl\nx','')`,
			mysql.Column{DataType: "enum", Elements: []string{"a", "b c", "it's", `a\b`, "x,y", "(p)", "nl\nx", ""}}},
		{"set('x','y')", mysql.Column{DataType: "set", Elements: []string{"x", "y"}}},
	} {
		c := mysql.Column{ColumnType: tc.in}
		if err := c.ParseColumnType(); err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		tc.want.ColumnType = tc.in
		if !reflect.DeepEqual(c, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, c, tc.want)
		}
	}
	for _, bad := range []string{"enum('a'", "enum(a)", "decimal(x,2)"} {
		c := mysql.Column{ColumnType: bad}
		if err := c.ParseColumnType(); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestMapColumn(t *testing.T) {
	for _, tc := range []struct {
		columnType, charset string
		want                iceberg.Type
	}{
		{"tinyint(4)", "", iceberg.PrimitiveTypes.Int32},
		{"tinyint(1)", "", iceberg.PrimitiveTypes.Int32}, // bool is a tinyint: it holds 2 too
		{"tinyint(3) unsigned", "", iceberg.PrimitiveTypes.Int32},
		{"mediumint(8) unsigned", "", iceberg.PrimitiveTypes.Int32},
		{"int(11)", "", iceberg.PrimitiveTypes.Int32},
		{"int(10) unsigned", "", iceberg.PrimitiveTypes.Int64},
		{"bigint(20)", "", iceberg.PrimitiveTypes.Int64},
		{"bigint(20) unsigned", "", iceberg.DecimalTypeOf(20, 0)},
		{"decimal(38,10)", "", iceberg.DecimalTypeOf(38, 10)},
		{"decimal(39,2)", "", iceberg.PrimitiveTypes.String},
		{"float", "", iceberg.PrimitiveTypes.Float32},
		{"double unsigned", "", iceberg.PrimitiveTypes.Float64},
		{"bit(1)", "", iceberg.PrimitiveTypes.Int64},
		{"bit(64)", "", iceberg.DecimalTypeOf(20, 0)},
		{"enum('a')", "utf8mb4", iceberg.PrimitiveTypes.String},
		{"year(4)", "", iceberg.PrimitiveTypes.Int32},
		{"date", "", iceberg.PrimitiveTypes.Date},
		{"datetime(3)", "", iceberg.PrimitiveTypes.Timestamp},
		{"timestamp(6)", "", iceberg.PrimitiveTypes.TimestampTz},
		{"time(6)", "", iceberg.PrimitiveTypes.Int64},
		{"varchar(10)", "latin1", iceberg.PrimitiveTypes.String},
		{"char(3)", "binary", iceberg.PrimitiveTypes.Binary},
		{"json", "", iceberg.PrimitiveTypes.String},
		{"varbinary(3)", "", iceberg.PrimitiveTypes.Binary},
		{"point", "", iceberg.PrimitiveTypes.Binary},
		{"uuid", "", iceberg.PrimitiveTypes.String},
	} {
		f, err := mysql.MapColumn(col(t, tc.columnType, tc.charset))
		if err != nil {
			t.Errorf("%s: %v", tc.columnType, err)
			continue
		}
		if !f.Type.Equals(tc.want) || f.Name != "c" || f.SourceType != tc.columnType {
			t.Errorf("%s: got %+v, want type %s", tc.columnType, f, tc.want)
		}
	}
	for _, tc := range []struct{ columnType, charset, reason string }{
		{"varchar(10)", "gbk", "character set gbk"},
		{"vector(3)", "", "vector"},
		{"decimal(70,2)", "", "outside MySQL's own limits"},
		{"frobnicate", "", "unknown"},
		{"varchar(10)", "", "character set is not known"},
	} {
		_, err := mysql.MapColumn(col(t, tc.columnType, tc.charset))
		var ue *mysql.UnsupportedTypeError
		if !errors.As(err, &ue) || !errors.Is(err, mysql.ErrUnsupportedType) {
			t.Errorf("%s: got %v, want an *UnsupportedTypeError", tc.columnType, err)
			continue
		}
		for _, want := range []string{"shop.orders.c", tc.columnType, tc.reason, "leave the table out"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", tc.columnType, err, want)
			}
		}
	}
}

// fixedDecimal stands for shopspring/decimal.Decimal, which go-mysql
// yields under UseDecimal.
type fixedDecimal string

func (d fixedDecimal) StringFixed(int32) string { return string(d) }

func dec(t *testing.T, s string, p, sc int32) decimal128.Num {
	t.Helper()
	n, err := decimal128.FromString(s, p, sc)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDecodeBinlog feeds the Go values go-mysql v1.13.0 yields (see
// replication/row_event.go decodeValue) for each column type.
func TestDecodeBinlog(t *testing.T) {
	for _, tc := range []struct {
		columnType, charset string
		in                  any
		want                any
	}{
		{"tinyint(3) unsigned", "", int8(-1), int32(255)},
		{"tinyint(4)", "", int8(-1), int32(-1)},
		{"smallint(5) unsigned", "", int16(-2), int32(65534)},
		{"mediumint(8) unsigned", "", int32(-1), int32(16777215)},
		{"mediumint(9)", "", int32(-8388608), int32(-8388608)},
		{"int(10) unsigned", "", int32(-1), int64(4294967295)},
		{"bigint(20)", "", int64(math.MinInt64), int64(math.MinInt64)},
		{"bigint(20) unsigned", "", int64(-1), decimal128.FromU64(math.MaxUint64)},
		{"decimal(10,2)", "", "-12345678.91", decimal128.FromI64(-1234567891)},
		{"decimal(10,2)", "", fixedDecimal("0.50"), decimal128.FromI64(50)},
		{"decimal(38,10)", "", "1234567890123456789012345678.0123456789", dec(t, "1234567890123456789012345678.0123456789", 38, 10)},
		{"decimal(40,2)", "", "-0.00", "0.00"},
		{"decimal(40,2)", "", "00012.30", "12.30"},
		{"float", "", float32(1.1), float32(1.1)},
		{"double", "", 0.1, 0.1},
		{"bit(10)", "", int64(513), int64(513)},
		{"bit(64)", "", int64(-1), decimal128.FromU64(math.MaxUint64)},
		{"enum('a','b')", "utf8mb4", int64(2), "b"},
		{"enum('a','b')", "utf8mb4", int64(0), ""},
		{"set('x','y','z')", "utf8mb4", int64(5), "x,z"},
		{"set('x','y','z')", "utf8mb4", int64(0), ""},
		{"year(4)", "", 0, int32(0)},
		{"year(4)", "", 2155, int32(2155)},
		{"date", "", "2024-02-29", arrow.Date32(19782)},
		{"date", "", "0000-01-01", arrow.Date32(-719528)},
		{"datetime(6)", "", "1969-12-31 23:59:59.999999", arrow.Timestamp(-1)},
		{"datetime(3)", "", "2024-01-02 03:04:05.100", arrow.Timestamp(1704164645100000)},
		{"timestamp", "", "1970-01-01 00:00:01", arrow.Timestamp(1000000)},
		{"timestamp(1)", "", "0000-00-00 00:00:00.1", arrow.Timestamp(100000)}, // go-mysql's spelling of 1970-01-01 00:00:00.1 UTC
		{"timestamp(6)", "", time.Unix(1, 1000).In(time.FixedZone("x", 5*3600+1800)), arrow.Timestamp(1000001)},
		{"time", "", "-838:59:59", int64(-3020399000000)},
		{"time(2)", "", "-00:00:00.01", int64(-10000)},
		{"time(6)", "", "100:00:00.000001", int64(360000000001)},
		{"varchar(10)", "utf8mb4", "héllo", "héllo"},
		{"varchar(10)", "latin1", "\xe9\x80\x81\xff", "é€\u0081ÿ"},
		{"text", "latin1", []byte("\x9f"), "Ÿ"},
		{"varchar(10)", "ucs2", "\x01\x6d", "ŭ"},
		{"varchar(10)", "utf16", "\xd8\x3c\xdf\x0a", "🌊"},
		{"varchar(10)", "utf16le", "\x3c\xd8\x0a\xdf", "🌊"},
		{"text", "utf32", []byte("\x00\x01\xf3\x0a"), "🌊"},
		{"json", "", []byte(`{"a": 1}`), `{"a": 1}`},
		{"json", "", []byte{}, "null"},
		{"binary(4)", "", "\x01\x02", []byte{1, 2, 0, 0}},
		{"varbinary(4)", "", "\x00", []byte{0}},
		{"blob", "", []byte{}, []byte{}},
		{"uuid", "", "\x6c\xcd\x78\x0c\xba\xba\x10\x26\x95\x64\x5b\x8c\x65\x60\x24", "6ccd780c-baba-1026-9564-5b8c65602400"},
		{"inet4", "", "\xc0\xa8", "192.168.0.0"},
		{"inet6", "", "\x20\x01\x0d\xb8", "2001:db8::"},
		// SRID 0: the WKB; SRID 4326: EWKB in the WKB's byte order.
		{"point", "", []byte("\x00\x00\x00\x00\x01\x01\x00\x00\x00AAAAAAAABBBBBBBB"), []byte("\x01\x01\x00\x00\x00AAAAAAAABBBBBBBB")},
		{"point", "", []byte("\xe6\x10\x00\x00\x01\x01\x00\x00\x00AAAAAAAABBBBBBBB"), []byte("\x01\x01\x00\x00\x20\xe6\x10\x00\x00AAAAAAAABBBBBBBB")},
		{"point", "", []byte("\xe6\x10\x00\x00\x00\x00\x00\x00\x01AAAAAAAABBBBBBBB"), []byte("\x00\x20\x00\x00\x01\x00\x00\x10\xe6AAAAAAAABBBBBBBB")},
		{"int(11)", "", nil, nil},
	} {
		got, err := mapping(t, tc.columnType, tc.charset).DecodeBinlog(tc.in)
		if err != nil {
			t.Errorf("%s %#v: %v", tc.columnType, tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %#v: got %#v (%T), want %#v (%T)", tc.columnType, tc.in, got, got, tc.want, tc.want)
		}
	}
}

// TestDecodeBinlogDeadLetters: values with no lake form are ValueErrors
// (dead letters) that name the column and type, never the value.
func TestDecodeBinlogDeadLetters(t *testing.T) {
	for _, tc := range []struct {
		columnType, charset string
		in                  any
		reason              string
	}{
		{"date", "", "0000-00-00", "zero date"},
		{"date", "", "2024-00-10", "zero month or day"},
		{"date", "", "2024-02-30", "invalid calendar date"},
		{"datetime", "", "0000-00-00 00:00:00", "zero date"},
		{"timestamp", "", "0000-00-00 00:00:00", "zero date"},
		{"timestamp(3)", "", "0000-00-00 00:00:00.000", "zero date"},
		{"datetime(6)", "", "2023-02-29 00:00:00.000001", "invalid calendar date"},
		{"varchar(10)", "utf8mb4", "\xff\xfe", "not valid UTF-8"},
		{"varchar(10)", "ascii", "\x80", "not valid in the column's character set"},
		{"varchar(10)", "ucs2", "\xd8\x3c\xdf\x0a", "not valid in the column's character set"},
		{"decimal(4,2)", "", "123.45", "more than 4 significant digits"},
		{"decimal(4,2)", "", "1.234", "more fractional digits"},
		{"bit(4)", "", int64(16), "out of range"},
		{"year(4)", "", 1900, "out of range"},
		{"json", "", []byte("\xff"), "not valid UTF-8"},
	} {
		_, err := mapping(t, tc.columnType, tc.charset).DecodeBinlog(tc.in)
		var ve *coltype.ValueError
		if !errors.As(err, &ve) {
			t.Errorf("%s %q: got %v, want a *coltype.ValueError", tc.columnType, tc.in, err)
			continue
		}
		if ve.Column != "c" || ve.Type != tc.columnType || !strings.Contains(ve.Reason, tc.reason) {
			t.Errorf("%s %q: got %+v, want reason %q", tc.columnType, tc.in, ve, tc.reason)
		}
		if s, ok := tc.in.(string); ok && len(s) > 3 && !strings.HasPrefix(s, "0000-00-00") && strings.Contains(err.Error(), s) {
			t.Errorf("%s: the error quotes the value: %v", tc.columnType, err)
		}
	}
}

// TestDecodeBinlogSchemaMismatch: a value the column's definition cannot
// produce is a *BinlogTypeError (the capture stops), not a dead letter.
func TestDecodeBinlogSchemaMismatch(t *testing.T) {
	for _, tc := range []struct {
		columnType string
		in         any
	}{
		{"int(11)", "12"},
		{"varchar(10)", int32(1)},
		{"enum('a','b')", int64(3)},
		{"set('x')", int64(2)},
		{"datetime", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)}, // ParseTime true
		{"date", []byte("2024-01-01")},
		{"json", &replication.JsonDiff{Path: "$.a", Value: "1"}}, // binlog_row_value_options=PARTIAL_JSON
	} {
		_, err := mapping(t, tc.columnType, "utf8mb4").DecodeBinlog(tc.in)
		var te *mysql.BinlogTypeError
		var ve *coltype.ValueError
		if !errors.As(err, &te) || errors.As(err, &ve) {
			t.Errorf("%s %#v: got %v, want a *BinlogTypeError", tc.columnType, tc.in, err)
			continue
		}
		if !strings.Contains(err.Error(), "shop.orders.c") {
			t.Errorf("%s: error does not name the column: %v", tc.columnType, err)
		}
	}
}

// TestDecodeText covers text forms the golden test's server does not
// send: zerofill padding, the binary protocol's rendering, and errors.
func TestDecodeText(t *testing.T) {
	for _, tc := range []struct {
		columnType, text string
		want             any
	}{
		{"smallint(5) unsigned zerofill", "00007", int32(7)},
		{"bigint(20) unsigned", "18446744073709551615", decimal128.FromU64(math.MaxUint64)},
		{"float", "1.100000023841858", float32(1.1)},
		{"year(4)", "0000", int32(0)}, // MySQL 8 prints year 0 so
		{"bit(10)", "\x02\x01", int64(513)},
		{"time(6)", "-838:59:59.000000", int64(-3020399000000)},
		{"decimal(40,2)", "-12.30", "-12.30"},
		{"binary(4)", "ab\x00\x00", []byte("ab\x00\x00")},
	} {
		got, err := mapping(t, tc.columnType, "utf8mb4").DecodeText([]byte(tc.text))
		if err != nil {
			t.Errorf("%s %q: %v", tc.columnType, tc.text, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %q: got %#v, want %#v", tc.columnType, tc.text, got, tc.want)
		}
	}
	for _, tc := range []struct{ columnType, text string }{
		{"tinyint(3) unsigned", "256"},
		{"tinyint(4)", "-129"},
		{"int(10) unsigned", "-1"},
		{"float", "1.6777217e7"}, // not a float32: the SELECT did not use SelectExpr
		{"float", "1.1"},         // a float32's shortest text, not its value: ditto
		{"date", "2024-13-01"},
		{"datetime", "2024-01-01T00:00:00"},
		{"time", "12:60:00"},
		{"decimal(5,2)", "1e3"},
	} {
		_, err := mapping(t, tc.columnType, "utf8mb4").DecodeText([]byte(tc.text))
		var ve *coltype.ValueError
		if !errors.As(err, &ve) {
			t.Errorf("%s %q: got %v, want a *coltype.ValueError", tc.columnType, tc.text, err)
		}
	}
	if v, err := mapping(t, "int(11)", "").DecodeText(nil); v != nil || err != nil {
		t.Errorf("NULL: got %v, %v", v, err)
	}
}

func TestSelectExpr(t *testing.T) {
	m, err := mysql.Map(mysql.Column{Name: "we`ird", DataType: "float", ColumnType: "float"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.SelectExpr(); got != "CAST(`we``ird` AS DOUBLE)" {
		t.Errorf("SelectExpr = %s", got)
	}
	if got := mapping(t, "int(11)", "").SelectExpr(); got != "`c`" {
		t.Errorf("SelectExpr = %s", got)
	}
}

// TestMySQLJSON: MySQL's json reaches tidemark as go-mysql's rendering
// (binlog, with SyncerSettings' UseFloatWithTrailingZero) and as MySQL's
// own (SELECT); both reduce to one text.
func TestMySQLJSON(t *testing.T) {
	m := mapping(t, "json", "")
	for _, tc := range []struct{ binlog, text, want string }{
		{`{"bb":[1,2.5,"x\u003cy"],"a":null,"ccc":true}`, `{"a": null, "bb": [1, 2.5, "x<y"], "ccc": true}`,
			`{"a": null, "bb": [1, 2.5, "x<y"], "ccc": true}`},
		{`[3.0,-0.0,1000000000000000000.0,` + "1" + strings.Repeat("0", 300) + `]`, `[3.0, -0.0, 1e18, 1e300]`,
			`[3.0, -0.0, 1e+18, 1e+300]`},
		{`[18446744073709551615,-9223372036854775808,0.1]`, `[18446744073709551615, -9223372036854775808, 0.1]`,
			`[18446744073709551615, -9223372036854775808, 0.1]`},
		{`"tab\tnul\u0000del\u007fé🌊\"\\/"`, `"tab\tnul\u0000del\u007fé🌊\"\\/"`, `"tab\tnul\u0000del\u007fé🌊\"\\/"`},
		{`{}`, `{}`, `{}`},
	} {
		b, err := m.DecodeBinlog(tc.binlog)
		if err != nil {
			t.Errorf("binlog %s: %v", tc.binlog, err)
			continue
		}
		s, err := m.DecodeText([]byte(tc.text))
		if err != nil {
			t.Errorf("text %s: %v", tc.text, err)
			continue
		}
		if b != tc.want || s != tc.want {
			t.Errorf("binlog %s -> %s\ntext %s -> %s\nwant %s", tc.binlog, b, tc.text, s, tc.want)
		}
	}
	for _, bad := range []string{`{"a":`, `1 2`, `[1e999]`} {
		if _, err := m.DecodeText([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestBinlogText(t *testing.T) {
	for _, tc := range []struct {
		columnType, charset string
		in                  any
		want                string
	}{
		{"date", "", "0000-00-00", "0000-00-00"},
		{"datetime(6)", "", "2024-02-30 00:00:00.000001", "2024-02-30 00:00:00.000001"},
		{"int(10) unsigned", "", int32(-1), "4294967295"},
		{"bigint(20) unsigned", "", int64(-1), "18446744073709551615"},
		{"decimal(5,2)", "", "1.50", "1.50"},
		{"enum('a','b')", "utf8mb4", int64(2), "b"},
		{"set('x','y')", "utf8mb4", int64(3), "x,y"},
		{"varchar(5)", "latin1", "\xe9", "é"},
		{"varchar(5)", "utf8mb4", "\xff", "0xff"},
		{"blob", "", []byte{1, 2}, "0x0102"},
		{"int(11)", "", nil, ""},
	} {
		if got := mapping(t, tc.columnType, tc.charset).BinlogText(tc.in); got != tc.want {
			t.Errorf("%s %#v: %q, want %q", tc.columnType, tc.in, got, tc.want)
		}
	}
}
