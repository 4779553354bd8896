// Package typemaptest is the PostgreSQL every-type table of the tests:
// a column of every type docs/type-mapping.md maps (whole_types), rows of
// edge values, and the canonical forms its values are compared in — computed
// at the source by SQL that does not go through tidemark's decoder (Expr,
// ReadSource), and from a lake reader's JSON (ReadLake: PyIceberg's and
// Spark's, scripts/pyiceberg_read.py). The whole-schema and interop tests
// (internal/app) and the process-level conformance suite
// (internal/source/sourcetest, run by internal/source/postgres) use it.
package typemaptest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/testenv"
)

// Column is a column of whole_types, how its value is compared and its
// lake type (docs/type-mapping.md). The kind names a canonical form,
// computed at the source by SQL that does not go through tidemark's decoder
// and from PyIceberg's JSON (see Expr and ReadLake); "list:<kind>"
// is an array of values of that kind.
type Column struct{ Name, Type, Kind, Lake string }

// Table is the every-type table's name.
const Table = "whole_types"

// BaseColumns are the columns CreateTable puts before Columns: the key id,
// a version and a payload.
var BaseColumns = []Column{{"id", "bigint", "text", "long"}, {"version", "int", "text", "int"}, {"payload", "text", "text", "string"}}

// CreateTypes creates the enum, domains and composite type Columns use.
const CreateTypes = `CREATE TYPE mood AS ENUM ('happy', 'sad', 'so so');
		CREATE DOMAIN price AS numeric(10,2);
		CREATE DOMAIN pos_price AS price CHECK (VALUE > 0);
		CREATE TYPE pair AS (n int, s text)`

// CreateTable is the CREATE TABLE statement of whole_types: BaseColumns,
// then Columns.
func CreateTable() string {
	cols := []string{"id bigint PRIMARY KEY", "version int NOT NULL", "payload text"}
	for _, c := range Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	return "CREATE TABLE " + Table + " (" + strings.Join(cols, ", ") + ")"
}

// Columns has one column per row of docs/type-mapping.md's table (the
// extension types aside: the test server has none installed).
var Columns = []Column{
	{"c_smallint", "smallint", "text", "int"},
	{"c_integer", "integer", "text", "int"},
	{"c_bigint", "bigint", "text", "long"},
	{"c_oid", "oid", "text", "long"},
	{"c_xid", "xid", "text", "long"},
	{"c_cid", "cid", "text", "long"},
	{"c_xid8", "xid8", "text", "long"},
	{"c_real", "real", "float4", "float"},
	{"c_double", "double precision", "float8", "double"},
	{"c_numeric", "numeric", "text", "string"},
	{"c_numeric_12_2", "numeric(12,2)", "text", "decimal(12, 2)"},
	{"c_numeric_38_10", "numeric(38,10)", "text", "decimal(38, 10)"},
	{"c_numeric_40_5", "numeric(40,5)", "text", "string"},
	{"c_numeric_2_5", "numeric(2,5)", "text", "decimal(5, 5)"},
	{"c_numeric_2_m3", "numeric(2,-3)", "text", "decimal(5, 0)"},
	{"c_bool", "boolean", "bool", "boolean"},
	{"c_text", "text", "text", "string"},
	{"c_varchar", "varchar(10)", "text", "string"},
	{"c_char", "char(5)", "text", "string"},
	{"c_name", "name", "text", "string"},
	{"c_qchar", `"char"`, "text", "string"},
	{"c_bytea", "bytea", "bytes", "binary"},
	{"c_date", "date", "date", "date"},
	{"c_time", "time", "time", "time"},
	{"c_time3", "time(3)", "time", "time"},
	{"c_timetz", "timetz", "text", "string"},
	{"c_timestamp", "timestamp", "ts", "timestamp"},
	{"c_timestamp3", "timestamp(3)", "ts", "timestamp"},
	{"c_timestamptz", "timestamptz", "ts", "timestamptz"},
	{"c_timestamptz0", "timestamptz(0)", "ts", "timestamptz"},
	{"c_interval", "interval", "text", "string"},
	{"c_uuid", "uuid", "text", "string"},
	{"c_json", "json", "text", "string"},
	{"c_jsonb", "jsonb", "text", "string"},
	{"c_xml", "xml", "text", "string"},
	{"c_money", "money", "text", "string"},
	{"c_inet", "inet", "text", "string"},
	{"c_cidr", "cidr", "text", "string"},
	{"c_macaddr", "macaddr", "text", "string"},
	{"c_macaddr8", "macaddr8", "text", "string"},
	{"c_bit", "bit(4)", "text", "string"},
	{"c_varbit", "bit varying(8)", "text", "string"},
	{"c_tsvector", "tsvector", "text", "string"},
	{"c_tsquery", "tsquery", "text", "string"},
	{"c_point", "point", "text", "string"},
	{"c_line", "line", "text", "string"},
	{"c_lseg", "lseg", "text", "string"},
	{"c_box", "box", "text", "string"},
	{"c_path", "path", "text", "string"},
	{"c_polygon", "polygon", "text", "string"},
	{"c_circle", "circle", "text", "string"},
	{"c_int4range", "int4range", "text", "string"},
	{"c_tstzrange", "tstzrange", "text", "string"},
	{"c_int4multirange", "int4multirange", "text", "string"},
	{"c_pg_lsn", "pg_lsn", "text", "string"},
	{"c_mood", "mood", "text", "string"},
	{"c_pair", "pair", "text", "string"},
	{"c_price", "price", "text", "decimal(10, 2)"},
	{"c_pos_price", "pos_price", "text", "decimal(10, 2)"}, // a domain over a domain
	{"c_int4_arr", "int4[]", "list:text", "list<int>"},
	{"c_text_arr", "text[]", "list:text", "list<string>"},
	{"c_bool_arr", "bool[]", "list:bool", "list<boolean>"},
	{"c_numeric_arr", "numeric[]", "list:text", "list<string>"},
	{"c_numeric_10_2_arr", "numeric(10,2)[]", "list:text", "list<decimal(10, 2)>"},
	{"c_timestamptz_arr", "timestamptz[]", "list:ts", "list<timestamptz>"},
	{"c_timestamp_arr", "timestamp[]", "list:ts", "list<timestamp>"},
	{"c_time_arr", "time[]", "list:time", "list<time>"},
	{"c_date_arr", "date[]", "list:date", "list<date>"},
	{"c_bytea_arr", "bytea[]", "list:bytes", "list<binary>"},
	{"c_float8_arr", "float8[]", "list:float8", "list<double>"},
	{"c_box_arr", "box[]", "list:text", "list<string>"},
	{"c_mood_arr", "mood[]", "list:text", "list<string>"},
	{"c_price_arr", "price[]", "list:text", "list<decimal(10, 2)>"},
	{"c_pair_arr", "pair[]", "list:text", "list<string>"},
	{"c_int4range_arr", "int4range[]", "list:text", "list<string>"},
}

// Rows inserts the edge values, ids base+1 to base+5: ordinary
// values, NULL everywhere, special values, extremes (the rows of the typemap
// golden test, with xid, cid, timestamp(3), a domain over a domain and
// bool[] added). Values with no exact lake form (dead letters) are left out:
// verify reports their rows as differing (TestBadInputSpecialValues).
func Rows(base int) string {
	return strings.ReplaceAll(`
INSERT INTO whole_types (id, version, c_smallint, c_integer, c_bigint, c_oid, c_xid, c_cid, c_xid8, c_real, c_double,
	c_numeric, c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_numeric_2_5, c_numeric_2_m3,
	c_bool, c_text, c_varchar, c_char, c_name, c_qchar, c_bytea,
	c_date, c_time, c_time3, c_timetz, c_timestamp, c_timestamp3, c_timestamptz, c_timestamptz0, c_interval,
	c_uuid, c_json, c_jsonb, c_xml, c_money, c_inet, c_cidr, c_macaddr, c_macaddr8, c_bit, c_varbit,
	c_tsvector, c_tsquery, c_point, c_line, c_lseg, c_box, c_path, c_polygon, c_circle,
	c_int4range, c_tstzrange, c_int4multirange, c_pg_lsn, c_mood, c_pair, c_price, c_pos_price,
	c_int4_arr, c_text_arr, c_bool_arr, c_numeric_arr, c_numeric_10_2_arr, c_timestamptz_arr, c_timestamp_arr,
	c_time_arr, c_date_arr, c_bytea_arr, c_float8_arr, c_box_arr, c_mood_arr, c_price_arr,
	c_pair_arr, c_int4range_arr)
VALUES (BASE + 1, 1, 12, 123456, 1234567890123, 4000000000, '12345', '7', '12884902642', 1.1, 0.1,
	123.4500, -1234567890.12, '1234567890123456789012345678.0123456789',
	'123456789012345678901234567890123.45678', 0.00012, 12345,
	true, 'hello, world', 'abc', 'ab', 'pg_class', 'x', '\x00ff10',
	'2024-01-02', '03:04:05.123456', '12:34:56.7891', '04:05:06.789-03:30',
	'2024-01-02 03:04:05.1', '2024-01-02 03:04:05.1234', '2024-01-02 03:04:05.123456+05:30', '2024-01-02 03:04:05.6+00',
	'1 year 2 months 3 days 04:05:06.5',
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"n": 9007199254740993, "f": 1.10}',
	'{"b": [1, 2.50], "a": 12345678901234567890}', '<a x="1">t</a>', 1234.5,
	'192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', B'1010', B'101',
	'a fat cat', 'fat & rat', '(1.5,2)', '{1,-1,0}', '[(0,0),(1,1)]', '(1,1),(0,0)',
	'[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(1,0))', '<(0,0),2>',
	'[1,10)', '[2024-01-01,2024-02-01)', '{[1,3),[5,7)}', '16/B374D848', 'happy', '(1,"a b")', 12.5, 3.25,
	'{1,2,3}', '{a,b}', '{true,NULL,false}', '{1.5,2}', '{1.5,NULL}', '{"2024-01-02 03:04:05+00"}',
	'{"2024-01-02 03:04:05"}', '{03:04:05}', '{2024-01-02}', '{"\\x0102"}', '{1.5,0.1}',
	'{(1,1),(0,0);(3,3),(2,2)}', '{happy,"so so"}', '{1,2.5}', '{"(1,x)","(2,\"a b\")"}',
	'{"[1,3)",empty}');
INSERT INTO whole_types (id, version) VALUES (BASE + 2, 1);
INSERT INTO whole_types (id, version, c_smallint, c_integer, c_bigint, c_oid, c_real, c_double, c_numeric,
	c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_numeric_2_m3, c_bool, c_text, c_varchar,
	c_char, c_qchar, c_bytea, c_date, c_time, c_time3, c_timestamp, c_timestamptz, c_timestamptz0, c_interval,
	c_json, c_jsonb, c_money, c_int4range, c_tstzrange, c_int4multirange, c_mood, c_price, c_pair,
	c_int4_arr, c_text_arr, c_bool_arr, c_numeric_arr, c_numeric_10_2_arr, c_timestamptz_arr, c_date_arr,
	c_bytea_arr, c_float8_arr, c_mood_arr, c_price_arr, c_pair_arr)
VALUES (BASE + 3, 1, -32768, -2147483648, -9223372036854775808, 0, 'NaN', '-0', 'NaN',
	0, -0.0000000001, 'NaN', -98765, false, E'🌊 ünïcödé "q" \\ tab\there\nnewline', '',
	'', '\377', '\x', 'infinity', '00:00:00', '23:59:59.999', '-infinity', 'infinity', 'infinity',
	'-1 days -00:00:01',
	'[12345678901234567890123, 1e400, -0, 1.0]', '{"big": 123456789012345678901234567890}',
	-0.01, 'empty', '(,infinity)', '{}', 'so so', 0, '(,)',
	'{}', E'{"a,b","c\\"d","e\\\\f",NULL,"NULL",""," x ","{}"}', '{}', '{NaN,Infinity,-Infinity}',
	'{NULL}', '{infinity,-infinity,NULL}', '{infinity,-infinity,"0044-03-15 BC"}',
	'{"\\x",NULL}', '{Infinity,-Infinity,-0,NaN}', '{}', '{NULL,0}', '{"(,)",NULL}');
INSERT INTO whole_types (id, version, c_smallint, c_integer, c_bigint, c_oid, c_xid8, c_real, c_double, c_numeric,
	c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_date, c_time, c_timestamp, c_timestamp3, c_timestamptz,
	c_timestamptz0, c_interval, c_json, c_jsonb, c_timestamptz_arr, c_timestamp_arr, c_time_arr)
VALUES (BASE + 4, 1, 32767, 2147483647, 9223372036854775807, 4294967295, '9223372036854775807', '3.4028235e+38', '5e-324',
	repeat('9', 1000)::numeric, 9999999999.99, '9999999999999999999999999999.9999999999',
	'-99999999999999999999999999999999999.99999',
	'0044-03-15 BC', '23:59:59.999999', '0044-03-15 12:00:00 BC', '-infinity', '4714-11-24 00:00:00+00 BC',
	'1969-12-31 23:59:59+00', 'P-1Y-2M3DT-4H-5M-6S', 'null', 'null',
	'{"2024-01-02 03:04:05+00","2024-01-02 03:04:05.1+00","2024-01-02 03:04:05.123456+00"}',
	'{"1970-01-01 00:00:00","1969-12-31 23:59:59.999999","0001-01-01 00:00:00","0001-12-31 23:59:59.5 BC"}',
	'{00:00:00.000001,12:00:00.5}');
INSERT INTO whole_types (id, version, c_real, c_double, c_numeric, c_date, c_timestamp, c_timestamptz,
	c_float8_arr, c_date_arr)
VALUES (BASE + 5, 1, '-Infinity', '1.7976931348623157e+308', '-Infinity', '5874897-12-31',
	'10000-01-01 00:00:00', '294247-01-10 04:00:54.775806+00',
	'{1e+300,1234567,0.30000000000000004,1e-05}', '{4714-11-24 BC,10000-01-01,0001-02-29 BC,NULL}');
UPDATE whole_types SET c_date = '-infinity', c_timestamptz0 = '-infinity' WHERE id = BASE + 2;`, "BASE", strconv.Itoa(base))
}

// Expr is SQL giving x's canonical form (text, NULL for NULL) for a
// column of the kind.
func Expr(kind, x string) string {
	var e string
	switch kind {
	case "float4", "float8":
		e = fmt.Sprintf(`CASE WHEN %[1]s = 'NaN' THEN 'NaN' ELSE 'bits:' || encode(%[2]ssend(%[1]s), 'hex') END`, x, kind)
	case "ts":
		e = fmt.Sprintf(`CASE WHEN isfinite(%[1]s) THEN 'us:' || (extract(epoch FROM %[1]s) * 1000000)::bigint ELSE %[1]s::text END`, x)
	case "date":
		e = fmt.Sprintf(`CASE WHEN isfinite(%[1]s) THEN 'days:' || (%[1]s - date '1970-01-01') ELSE %[1]s::text END`, x)
	case "time":
		e = fmt.Sprintf(`'us:' || (extract(epoch FROM %s) * 1000000)::bigint`, x)
	case "bytes":
		e = fmt.Sprintf(`encode(%s, 'hex')`, x)
	case "bool":
		e = x + "::text"
	default:
		// The type's own text output, as tidemark's session settings give
		// it (a cast to text would drop char(n)'s padding).
		e = fmt.Sprintf(`format('%%s', %s)`, x)
	}
	// num_nulls, not IS NULL: a composite whose fields are all NULL, (,),
	// IS NULL but is a value.
	return fmt.Sprintf("to_jsonb(CASE WHEN num_nulls(%s) = 1 THEN NULL ELSE %s END)", x, e)
}

// ReadSource reads a source table's columns in their canonical forms (a
// JSON text: a string, null, or a list of them), by id.
func ReadSource(t *testing.T, srcURL string, id change.TableID, cols []Column) map[string]map[string]string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, srcURL)
	if err != nil {
		t.Fatalf("connect to the source: %v", err)
	}
	defer c.Close(ctx)
	for k, v := range typemap.SessionSettings() {
		if _, err := c.Exec(ctx, "SELECT set_config($1, $2, false)", k, v); err != nil {
			t.Fatal(err)
		}
	}
	var sel []string
	for _, col := range cols {
		q := pgx.Identifier{col.Name}.Sanitize()
		if elem, ok := strings.CutPrefix(col.Kind, "list:"); ok {
			// By subscript: unnest would expand composite elements.
			sel = append(sel, fmt.Sprintf(`(CASE WHEN %[1]s IS NULL THEN 'null'::jsonb
				ELSE coalesce((SELECT jsonb_agg(coalesce(%[2]s, 'null'::jsonb) ORDER BY i) FROM generate_subscripts(%[1]s, 1) AS g(i)), '[]'::jsonb) END)::text`,
				q, Expr(elem, q+"[i]")))
		} else {
			sel = append(sel, fmt.Sprintf("coalesce(%s, 'null'::jsonb)::text", Expr(col.Kind, q)))
		}
	}
	rs, err := c.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+pgx.Identifier{id.Schema, id.Name}.Sanitize())
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	defer rs.Close()
	out := map[string]map[string]string{}
	for rs.Next() {
		vals := make([]string, len(cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, col := range cols {
			var v any
			if err := json.Unmarshal([]byte(vals[i]), &v); err != nil {
				t.Fatalf("%s.%s: %v", id, col.Name, err)
			}
			b, _ := json.Marshal(v)
			row[col.Name] = string(b)
		}
		var key string
		_ = json.Unmarshal([]byte(row["id"]), &key)
		out[key] = row
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ReadLake renders PyIceberg's rows (scripts/pyiceberg_read.py) in the
// canonical forms of ReadSource, by id.
func ReadLake(t *testing.T, rows []map[string]any, cols []Column) map[string]map[string]string {
	t.Helper()
	var canon func(kind string, v any) any
	canon = func(kind string, v any) any {
		if v == nil {
			return nil
		}
		if elem, ok := strings.CutPrefix(kind, "list:"); ok {
			l, ok := v.([]any)
			if !ok {
				return fmt.Sprintf("not a list: %v", v)
			}
			out := make([]any, len(l))
			for i, e := range l {
				out[i] = canon(elem, e)
			}
			return out
		}
		switch kind {
		case "float4", "float8", "ts", "date":
			return CanonPy(t, kind, v)
		case "time":
			tm, err := time.Parse("15:04:05.999999", fmt.Sprint(v))
			if err != nil {
				return fmt.Sprintf("not a time: %v", v)
			}
			return fmt.Sprintf("us:%d", tm.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds())
		}
		return CanonText(v) // strings as they are, numbers' digits, booleans
	}
	out := map[string]map[string]string{}
	for _, r := range rows {
		row := map[string]string{}
		for _, col := range cols {
			v, ok := r[col.Name]
			if !ok {
				row[col.Name] = "(no such column)"
				continue
			}
			b, _ := json.Marshal(canon(col.Kind, v))
			row[col.Name] = string(b)
		}
		id := fmt.Sprint(r["id"])
		if _, dup := out[id]; dup {
			t.Errorf("PyIceberg reads id %s twice", id) // each table's ids are unique at the source
		}
		out[id] = row
	}
	return out
}

func CanonLake(kind string, v any) string {
	if v == nil {
		return "NULL"
	}
	switch kind {
	case "float4":
		f := float32(v.(float64))
		if f != f {
			return "NaN"
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], math.Float32bits(f))
		return fmt.Sprintf("bits:%x", b)
	case "float8":
		f := v.(float64)
		if f != f {
			return "NaN"
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], math.Float64bits(f))
		return fmt.Sprintf("bits:%x", b)
	case "ts":
		us := v.(time.Time).UnixMicro()
		switch us {
		case math.MaxInt64:
			return "infinity"
		case -math.MaxInt64: // DuckDB's -infinity (docs/type-mapping.md)
			return "-infinity"
		}
		return fmt.Sprintf("us:%d", us)
	case "date":
		days := v.(time.Time).Unix() / 86400
		switch {
		case days == math.MaxInt32:
			return "infinity"
		case days == -math.MaxInt32: // DuckDB's -infinity (docs/type-mapping.md)
			return "-infinity"
		}
		return fmt.Sprintf("days:%d", days)
	}
	return fmt.Sprint(v)
}

func CanonPy(t *testing.T, kind string, v any) string {
	if v == nil {
		return "NULL"
	}
	s := fmt.Sprint(v) // json.Number or string
	switch kind {
	case "float4", "float8":
		f, err := testenv.PyIcebergFloat(s)
		if err != nil {
			t.Errorf("PyIceberg float %q: %v", s, err)
		}
		return CanonLake(kind, f)
	case "ts":
		if s == "infinity" || s == "-infinity" || strings.HasPrefix(s, "us:") {
			return s
		}
		tm, err := time.Parse("2006-01-02T15:04:05.999999Z07:00", s)
		if err != nil {
			tm, err = time.Parse("2006-01-02T15:04:05.999999", s)
		}
		if err != nil {
			t.Errorf("PyIceberg timestamp %q: %v", s, err)
		}
		return CanonLake(kind, tm)
	case "date":
		if s == "infinity" || s == "-infinity" || strings.HasPrefix(s, "days:") {
			return s
		}
		tm, err := time.Parse("2006-01-02", s)
		if err != nil {
			t.Errorf("PyIceberg date %q: %v", s, err)
		}
		return CanonLake(kind, tm)
	}
	return s
}

// CanonText is the comparable text of a value read from the source or
// decoded from JSON: numbers in Go's shortest form.
func CanonText(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 64)
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			f, err := x.Float64()
			if err == nil {
				return strconv.FormatFloat(f, 'g', -1, 64)
			}
		}
		return string(x)
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}
