// Package mysqltest is the MySQL/MariaDB every-type table of the tests:
// golden, a column of every type the mapping names (docs/type-mapping.md),
// rows of edge values, and the lake value each must decode to, as
// testdata/mysql_types.golden of internal/source/mysql records them (TestGolden
// checks the snapshot's and the binlog's decoding against that file). The
// golden test and the process-level conformance suite
// (internal/source/sourcetest, run by internal/source/mysql) use it: the
// suite compares a PyIceberg read of silver with the golden's values (Want,
// Lake).
package mysqltest

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/tidemark/tidemark/internal/testenv"
)

// Table is the every-type table's name; its key is id int.
const Table = "golden"

// DDL creates the every-type table golden: a column of every type the
// mapping names (docs/type-mapping.md).
var DDL = "CREATE TABLE golden (\n" +
	"	id                   int PRIMARY KEY,\n" +
	"	c_tinyint            tinyint,\n" +
	"	c_tinyint_u          tinyint unsigned,\n" +
	"	c_bool               bool,\n" +
	"	c_smallint           smallint,\n" +
	"	c_smallint_uz        smallint(5) unsigned zerofill,\n" +
	"	c_mediumint          mediumint,\n" +
	"	c_mediumint_u        mediumint unsigned,\n" +
	"	c_int                int,\n" +
	"	c_int_u              int unsigned,\n" +
	"	c_bigint             bigint,\n" +
	"	c_bigint_u           bigint unsigned,\n" +
	"	c_decimal            decimal(10,2),\n" +
	"	c_decimal_38         decimal(38,10),\n" +
	"	c_decimal_65         decimal(65,30),\n" +
	"	c_decimal_u          decimal(5,0) unsigned,\n" +
	"	c_decimal_frac       decimal(3,3),\n" +
	"	c_float              float,\n" +
	"	c_float_72           float(7,2),\n" +
	"	c_double             double,\n" +
	"	c_double_u           double unsigned,\n" +
	"	c_bit1               bit(1),\n" +
	"	c_bit5               bit(5),\n" +
	"	c_bit10              bit(10),\n" +
	"	c_bit20              bit(20),\n" +
	"	c_bit40              bit(40),\n" +
	"	c_bit63              bit(63),\n" +
	"	c_bit64              bit(64),\n" +
	"	c_enum               enum('a','b c','it''s','a\\\\b','x,y','🌊'),\n" +
	"	c_set                set('x','y','z','🌊'),\n" +
	"	c_enum300            enum(" + members("e", 300) + "),\n" +
	"	c_set64              set(" + members("s", 64) + "),\n" +
	"	c_json               json,\n" +
	"	c_year               year,\n" +
	"	c_date               date,\n" +
	"	c_datetime           datetime,\n" +
	"	c_datetime2          datetime(2),\n" +
	"	c_datetime3          datetime(3),\n" +
	"	c_datetime6          datetime(6),\n" +
	"	c_timestamp          timestamp NULL,\n" +
	"	c_timestamp1         timestamp(1) NULL,\n" +
	"	c_timestamp4         timestamp(4) NULL,\n" +
	"	c_timestamp6         timestamp(6) NULL,\n" +
	"	c_time               time,\n" +
	"	c_time1              time(1),\n" +
	"	c_time3              time(3),\n" +
	"	c_time6              time(6),\n" +
	"	c_char               char(5),\n" +
	"	c_varchar            varchar(20),\n" +
	"	c_varchar300         varchar(300),\n" +
	"	c_char255            char(255),\n" +
	"	c_tinytext           tinytext,\n" +
	"	c_text               text,\n" +
	"	c_mediumtext         mediumtext,\n" +
	"	c_longtext           longtext,\n" +
	"	c_utf8mb3            varchar(10) CHARACTER SET utf8mb3,\n" +
	"	c_latin1             varchar(40) CHARACTER SET latin1,\n" +
	"	c_char_latin1        char(5) CHARACTER SET latin1,\n" +
	"	c_ascii              varchar(10) CHARACTER SET ascii,\n" +
	"	c_ucs2               varchar(10) CHARACTER SET ucs2,\n" +
	"	c_utf16              varchar(10) CHARACTER SET utf16,\n" +
	"	c_utf16le            varchar(10) CHARACTER SET utf16le,\n" +
	"	c_utf32              text CHARACTER SET utf32,\n" +
	"	c_binary             binary(4),\n" +
	"	c_varbinary          varbinary(10),\n" +
	"	c_char_binary        char(3) CHARACTER SET binary,\n" +
	"	c_tinyblob           tinyblob,\n" +
	"	c_blob               blob,\n" +
	"	c_mediumblob         mediumblob,\n" +
	"	c_longblob           longblob,\n" +
	"	c_virtual            int AS (c_smallint + 1) VIRTUAL,\n" +
	"	c_stored             varchar(30) AS (concat(c_varchar, '!')) STORED,\n" +
	"	c_geometry           geometry,\n" +
	"	c_point              point,\n" +
	"	c_linestring         linestring,\n" +
	"	c_polygon            polygon,\n" +
	"	c_multipoint         multipoint,\n" +
	"	c_multilinestring    multilinestring,\n" +
	"	c_multipolygon       multipolygon,\n" +
	"	c_geometrycollection geometrycollection,\n" +
	"	c_uuid               uuid,\n" +
	"	c_inet4              inet4,\n" +
	"	c_inet6              inet6\n" +
	")"

// Rows insert golden's rows, each row exercising one family of values, in
// one session (its SETs hold for the statements after them). Every value
// has a lake form; DeadLetterRows hold those that have none.
var Rows = []string{
	// Timestamps are written in a zone that is not UTC: they must come
	// back as the same instants.
	`SET time_zone = '+05:30'`,
	// 1: ordinary values; timestamps written from a +05:30 session.
	`INSERT INTO golden (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_uz, c_mediumint,
		c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_38, c_decimal_65,
		c_decimal_u, c_decimal_frac, c_float, c_float_72, c_double, c_double_u, c_bit1, c_bit10, c_bit63,
		c_bit64, c_enum, c_set, c_json, c_year, c_date, c_datetime, c_datetime3, c_datetime6, c_timestamp,
		c_timestamp6, c_time, c_time1, c_time6, c_char, c_varchar, c_tinytext, c_text, c_mediumtext,
		c_longtext, c_utf8mb3, c_latin1, c_char_latin1, c_ascii, c_ucs2, c_utf16, c_utf16le, c_utf32,
		c_binary, c_varbinary, c_char_binary, c_tinyblob, c_blob, c_mediumblob, c_longblob,
		c_geometry, c_point, c_linestring, c_polygon, c_multipoint, c_multilinestring, c_multipolygon,
		c_geometrycollection, c_uuid, c_inet4, c_inet6)
	VALUES (1, 12, 200, 1, 1234, 7, -1234567, 12345678, 123456, 3000000000, 1234567890123,
		12345678901234567890, 12345678.91, '1234567890123456789012345678.0123456789',
		'12345678901234567890123456789012345.123456789012345678901234567891', 12345, 0.5,
		1.1, 12345.67, 0.1, 2.5, b'1', b'1000000001', b'101', b'1100', 'b c', 'x,z',
		'{"b": [1, 2.50], "a": 12345678901234567890, "s": "\\u00e9\\n"}', 2024, '2024-02-29',
		'2024-01-02 03:04:05', '2024-01-02 03:04:05.123', '2024-01-02 03:04:05.123456',
		'2024-01-02 08:34:05', '2024-01-02 08:34:05.000001', '12:34:56', '-01:02:03.4',
		'100:00:00.000001', 'ab', 'héllo 🌊 "q"', 'tiny', 'text\ttab', 'medium', 'long\nline',
		'mb3 é', 'é€‰ÿ', 'é', 'ascii', 'ŭcs2', 'ü🌊', 'ü🌊', '🌊 utf32', 0x0102, 0x00ff00, 'ab',
		0x01, 0x0203, 0x04, 0x05,
		ST_GeomFromText('POINT(1 2)', 4326), ST_GeomFromText('POINT(1 2)'),
		ST_GeomFromText('LINESTRING(0 0,1 1,2 0)'), ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'),
		ST_GeomFromText('MULTIPOINT(0 0,1 1)'), ST_GeomFromText('MULTILINESTRING((0 0,1 1),(2 2,3 3))'),
		ST_GeomFromText('MULTIPOLYGON(((0 0,1 0,1 1,0 0)))'),
		ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))'),
		'6ccd780c-baba-1026-9564-5b8c656024db', '192.168.1.1', '2001:db8::1')`,
	// 2: NULL everywhere.
	`INSERT INTO golden (id) VALUES (2)`,
	// 3: minimums and special values.
	`INSERT INTO golden (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_uz, c_mediumint,
		c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_38, c_decimal_65,
		c_decimal_u, c_decimal_frac, c_float, c_float_72, c_double, c_double_u, c_bit1, c_bit10, c_bit63,
		c_bit64, c_enum, c_set, c_json, c_year, c_date, c_datetime, c_datetime6, c_timestamp, c_timestamp6,
		c_time, c_time1, c_time6, c_char, c_varchar, c_text, c_latin1, c_char_latin1, c_binary, c_varbinary,
		c_char_binary, c_blob, c_uuid, c_inet4, c_inet6)
	VALUES (3, -128, 0, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0,
		-99999999.99, '-0.0000000001', '-0.000000000000000000000000000001', 0, -0.999,
		-1.17549435e-38, -99999.99, -2.2250738585072014e-308, 0, b'0', b'0', b'0', b'0', 'it''s', '',
		'null', 0, '1000-01-01', '1000-01-01 00:00:00', '1969-12-31 23:59:59.999999',
		'1970-01-01 05:30:01', '1970-01-01 05:30:01.000001', '-838:59:59', '-00:00:00.1',
		'-00:00:00.000001', '', '', '', '', 'a  ', 0x00, '', '', '', 
		'00000000-0000-0000-0000-000000000000', '0.0.0.0', '::')`,
	// 4: maximums.
	`INSERT INTO golden (id, c_tinyint, c_tinyint_u, c_bool, c_smallint, c_smallint_uz, c_mediumint,
		c_mediumint_u, c_int, c_int_u, c_bigint, c_bigint_u, c_decimal, c_decimal_38, c_decimal_65,
		c_decimal_u, c_decimal_frac, c_float, c_float_72, c_double, c_double_u, c_bit1, c_bit10, c_bit63,
		c_bit64, c_enum, c_set, c_json, c_year, c_date, c_datetime, c_datetime6, c_timestamp, c_timestamp6,
		c_time, c_time1, c_time6, c_char, c_latin1, c_binary, c_varbinary, c_uuid, c_inet4, c_inet6)
	VALUES (4, 127, 255, 127, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
		9223372036854775807, 18446744073709551615, 99999999.99, '9999999999999999999999999999.9999999999',
		'99999999999999999999999999999999999.999999999999999999999999999999', 99999, 0.999,
		16777217, 99999.99, 1.7976931348623157e308, 1e300, b'1', b'1111111111',
		b'111111111111111111111111111111111111111111111111111111111111111',
		b'1111111111111111111111111111111111111111111111111111111111111111', '🌊', 'x,y,z,🌊',
		'[1e300, -0.0, 18446744073709551615, -9223372036854775808, true, false, null, {}, []]',
		2155, '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999999',
		'2038-01-19 08:44:07', '2038-01-19 08:44:07.999999', '838:59:59', '838:59:58.9',
		'838:59:58.999999', 'abcde', '€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ ÿ', 0xffffffff, 0xffffffffffffffffffff,
		'ffffffff-ffff-ffff-ffff-ffffffffffff', '255.255.255.255', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff')`,
	// 5: more text forms.
	`INSERT INTO golden (id, c_float, c_double, c_enum, c_set, c_json, c_year, c_varchar, c_binary,
		c_inet6, c_uuid, c_decimal_38)
	VALUES (5, 0.3, 0.30000000000000004, 'a\\b', 'y', '  {"dup": 1, "dup": 2}  ', 1901,
		'tab\there', 0x00000001, '::ffff:1.2.3.4', '12345678-9abc-4def-8123-456789abcdef', 1)`,
	`INSERT INTO golden (id, c_inet6, c_double, c_json) VALUES
		(6, '::1.2.3.4', 1e22, '"\\ud83c\\udf89"'),
		(7, '1:0:0:2:0:0:0:3', 123456789012345680000, '{"nul": "a\\u0000b"}'),
		(8, '1:0:2:3:4:5:6:7', -0.0, '[]'),
		(9, 'fe80::1:0:0:0', 5e-324, '1.5')`,
	// 13: an enum's '' (the error value), which only a lax sql_mode stores.
	`SET SESSION sql_mode = ''`,
	`INSERT INTO golden (id, c_enum) VALUES (13, '')`,
	`SET SESSION sql_mode = DEFAULT`,
	// 14..17: decimals across go-mysql's 9-digit groups.
	`INSERT INTO golden (id, c_decimal, c_decimal_38, c_decimal_65, c_decimal_u, c_decimal_frac) VALUES
		(14, -0.01, '-1000000000.0000000001', '1000000000000000000.000000000100000000000000000000', 10, 0.001),
		(15, 0, '999999999.999999999', '-1', 0, -0.001),
		(16, 1000000, '-123456789012345678.1234567890', '0.000000001000000000000000000001', 9, 0),
		(17, -1000000, '1000000000000000000000000000', '-99999999999999999999999999999999999', 1, 0.1)`,
	// 18..20: go-mysql's other fraction layouts (1-2 and 3-4 digits).
	`INSERT INTO golden (id, c_time3, c_datetime2, c_timestamp1, c_timestamp4) VALUES
		(18, '-00:00:00.001', '1969-12-31 23:59:59.99', '1970-01-01 05:30:00.1', '2038-01-19 08:44:07.9999'),
		(19, '-838:59:58.999', '9999-12-31 23:59:59.01', '2024-02-29 12:00:00.5', '1970-01-01 05:30:00.0001'),
		(20, '12:00:00.5', '1000-01-01 00:00:00.5', NULL, NULL)`,
	// 21..22: wider binlog layouts: bit(n) of 1, 3 and 5 bytes, an enum of
	// more than 255 members, a set of 64, strings with 2-byte lengths.
	`INSERT INTO golden (id, c_bit5, c_bit20, c_bit40, c_enum300, c_set64, c_varchar300, c_char255) VALUES
		(21, b'10101', b'10000000000000000001', b'1000000000000000000000000000000000000001', 'e300',
			's1,s33,s64', REPEAT('ü', 300), CONCAT(REPEAT('🌊', 254), 'x')),
		(22, b'11111', 0, 1, 'e1', 's64', '', ' ')`,
}

// members lists n enum or set members prefix1..prefixn.
func members(prefix string, n int) string {
	m := make([]string, n)
	for i := range m {
		m[i] = fmt.Sprintf("'%s%d'", prefix, i+1)
	}
	return strings.Join(m, ",")
}

// DeadLetterRows insert rows 10 to 12, in the session of Rows (after
// them): values with no lake form (except year 0: 0000-01-01 is a date),
// dead letters (DeadLetters), written under a lax sql_mode.
var DeadLetterRows = []string{
	`SET SESSION sql_mode = 'ALLOW_INVALID_DATES'`,
	`INSERT INTO golden (id, c_date, c_datetime, c_timestamp, c_datetime6) VALUES
		(10, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000'),
		(11, '2024-00-10', '2024-01-00 01:02:03', NULL, '0000-01-01 00:00:00.5'),
		(12, '2024-02-30', '2023-02-29 00:00:00', NULL, '2024-04-31 12:00:00.000001')`,
	`SET SESSION sql_mode = DEFAULT`,
}

// DeadLetters are the (row, column) pairs of DeadLetterRows expected to be
// dead letters.
var DeadLetters = map[string]bool{
	"10 c_date": true, "10 c_datetime": true, "10 c_timestamp": true, "10 c_datetime6": true,
	"11 c_date": true, "11 c_datetime": true,
	"12 c_date": true, "12 c_datetime": true, "12 c_datetime6": true,
}

// Quote shows a text as the golden file does: quoted, a long one cut.
func Quote(b []byte) string {
	s := strconv.Quote(string(b))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:60]) + fmt.Sprintf("...(%d bytes)...", len(b)) + string(r[len(r)-20:])
	}
	return s
}

// Render shows a lake value for the golden file: the value as a reader of
// the lake sees it.
func Render(v any, at arrow.DataType) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int32, int64:
		return fmt.Sprintf("%d", x)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return Quote([]byte(x))
	case []byte:
		return "0x" + hex.EncodeToString(x)
	case decimal128.Num:
		return x.ToString(at.(*arrow.Decimal128Type).Scale)
	case arrow.Date32:
		return fmt.Sprintf("%s (day %d)", x.ToTime().Format("2006-01-02"), int32(x))
	case arrow.Timestamp:
		return fmt.Sprintf("%s (µs %d)", time.UnixMicro(int64(x)).UTC().Format("2006-01-02 15:04:05.999999"), int64(x))
	}
	return fmt.Sprintf("%T %v", v, v)
}

// GoldenPath is the golden file, relative to the module root.
const GoldenPath = "internal/source/mysql/testdata/mysql_types.golden"

var (
	goldenHeader = regexp.MustCompile(`^(\S+)  (.+?)  ->  (.+?)  \(arrow (.*)\)$`)
	goldenValue  = regexp.MustCompile(`^  (\d+)  (.+?)  =>  (.+)$`)
)

// Column is a column of the golden file: its name, its source and Iceberg
// types, its Arrow type as printed, and the values listed for it.
type Column struct {
	Name, Source, Iceberg, Arrow string
	Values                       []Value
}

// Value is a row of a golden column: the row's id, the text a SELECT
// gave, and the lake value (Render's form) or "DEAD LETTER: <reason>". A
// row not listed holds NULL.
type Value struct{ ID, Text, Lake string }

// ParseGolden reads the columns of a golden file's text.
func ParseGolden(text string) []Column {
	var cols []Column
	for _, line := range strings.Split(text, "\n") {
		if m := goldenHeader.FindStringSubmatch(line); m != nil {
			cols = append(cols, Column{Name: m[1], Source: m[2], Iceberg: m[3], Arrow: m[4]})
		} else if m := goldenValue.FindStringSubmatch(line); m != nil && len(cols) > 0 {
			c := &cols[len(cols)-1]
			c.Values = append(c.Values, Value{ID: m[1], Text: m[2], Lake: m[3]})
		}
	}
	return cols
}

// ReadGolden reads and parses the golden file of the module at root.
func ReadGolden(root string) ([]Column, error) {
	b, err := os.ReadFile(filepath.Join(root, GoldenPath))
	if err != nil {
		return nil, err
	}
	cols := ParseGolden(string(b))
	if len(cols) == 0 {
		return nil, fmt.Errorf("%s: no columns", GoldenPath)
	}
	return cols, nil
}

// Want is the lake value of every column of every row Rows inserts, in
// Render's form, by row id (column -> value; "NULL" for a row the golden
// does not list).
func Want(cols []Column) map[string]map[string]string {
	out := map[string]map[string]string{}
	ids := map[string]bool{}
	for _, c := range cols {
		for _, v := range c.Values {
			ids[v.ID] = true
		}
	}
	for id := range ids {
		if dead(id) {
			continue
		}
		row := map[string]string{}
		for _, c := range cols {
			row[c.Name] = "NULL"
			for _, v := range c.Values {
				if v.ID == id {
					row[c.Name] = v.Lake
				}
			}
		}
		out[id] = row
	}
	return out
}

// dead says whether row id is one of DeadLetterRows'.
func dead(id string) bool {
	for k := range DeadLetters {
		if strings.HasPrefix(k, id+" ") {
			return true
		}
	}
	return false
}

// RenderJSON renders a value a lake reader printed as JSON
// (scripts/pyiceberg_read.py: numbers, decimals as fixed-point strings,
// binary as hex, dates and timestamps as ISO 8601 or days:N / us:N) in
// Render's form, for a column of Arrow type at (as the golden prints it).
func RenderJSON(v any, at string) (string, error) {
	if v == nil {
		return "NULL", nil
	}
	s := fmt.Sprint(v) // json.Number or string
	switch {
	case at == "int32" || at == "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		return Render(n, nil), err
	case at == "float32" || at == "float64":
		f, err := testenv.PyIcebergFloat(s)
		if err != nil {
			return "", err
		}
		if at == "float32" {
			return Render(float32(f), nil), nil
		}
		return Render(f, nil), nil
	case at == "utf8":
		return Render(s, nil), nil
	case at == "binary":
		b, err := hex.DecodeString(s)
		return Render(b, nil), err
	case strings.HasPrefix(at, "decimal("):
		var p, sc int32
		if _, err := fmt.Sscanf(at, "decimal(%d, %d)", &p, &sc); err != nil {
			return "", fmt.Errorf("arrow type %q: %w", at, err)
		}
		n, err := decimal128.FromString(s, p, sc)
		return Render(n, &arrow.Decimal128Type{Precision: p, Scale: sc}), err
	case at == "date32":
		if d, ok := strings.CutPrefix(s, "days:"); ok {
			n, err := strconv.ParseInt(d, 10, 32)
			return Render(arrow.Date32(n), nil), err
		}
		tm, err := time.Parse("2006-01-02", s)
		return Render(arrow.Date32FromTime(tm), nil), err
	case strings.HasPrefix(at, "timestamp["):
		if us, ok := strings.CutPrefix(s, "us:"); ok {
			n, err := strconv.ParseInt(us, 10, 64)
			return Render(arrow.Timestamp(n), nil), err
		}
		tm, err := time.Parse("2006-01-02T15:04:05.999999Z07:00", s)
		if err != nil {
			tm, err = time.Parse("2006-01-02T15:04:05.999999", s)
		}
		return Render(arrow.Timestamp(tm.UnixMicro()), nil), err
	}
	return "", fmt.Errorf("no JSON form known for arrow type %q", at)
}
