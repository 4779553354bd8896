package typemap_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.txt from the server's output")

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// goldenDDL has one column of every type the mapping names, user types of
// every kind, and arrays.
const goldenDDL = `
CREATE TYPE mood AS ENUM ('happy', 'sad', 'so so');
CREATE DOMAIN price AS numeric(10,2);
CREATE TYPE pair AS (n int, s text);
CREATE TABLE golden (
	id                 int PRIMARY KEY,
	c_smallint         smallint,
	c_integer          integer,
	c_bigint           bigint,
	c_oid              oid,
	c_xid8             xid8,
	c_real             real,
	c_double           double precision,
	c_numeric          numeric,
	c_numeric_12_2     numeric(12,2),
	c_numeric_38_10    numeric(38,10),
	c_numeric_40_5     numeric(40,5),
	c_numeric_2_5      numeric(2,5),
	c_numeric_2_m3     numeric(2,-3),
	c_bool             boolean,
	c_text             text,
	c_varchar          varchar(10),
	c_char             char(5),
	c_name             name,
	c_qchar            "char",
	c_bytea            bytea,
	c_date             date,
	c_time             time,
	c_time3            time(3),
	c_timetz           timetz,
	c_timestamp        timestamp,
	c_timestamptz      timestamptz,
	c_timestamptz0     timestamptz(0),
	c_interval         interval,
	c_uuid             uuid,
	c_json             json,
	c_jsonb            jsonb,
	c_xml              xml,
	c_money            money,
	c_inet             inet,
	c_cidr             cidr,
	c_macaddr          macaddr,
	c_macaddr8         macaddr8,
	c_bit              bit(4),
	c_varbit           varbit(8),
	c_tsvector         tsvector,
	c_tsquery          tsquery,
	c_point            point,
	c_line             line,
	c_lseg             lseg,
	c_box              box,
	c_path             path,
	c_polygon          polygon,
	c_circle           circle,
	c_int4range        int4range,
	c_tstzrange        tstzrange,
	c_int4multirange   int4multirange,
	c_pg_lsn           pg_lsn,
	c_mood             mood,
	c_price            price,
	c_pair             pair,
	c_int4_arr         int4[],
	c_text_arr         text[],
	c_numeric_arr      numeric[],
	c_numeric_10_2_arr numeric(10,2)[],
	c_timestamptz_arr  timestamptz[],
	c_timestamp_arr    timestamp[],
	c_time_arr         time[],
	c_date_arr         date[],
	c_bytea_arr        bytea[],
	c_float8_arr       float8[],
	c_box_arr          box[],
	c_mood_arr         mood[],
	c_price_arr        price[],
	c_pair_arr         pair[],
	c_int4range_arr    int4range[]
);
`

// goldenRows each exercise one family of values; row 6 holds only values
// that have no exact lake form (dead letters).
const goldenRows = `
-- 1: ordinary values
INSERT INTO golden (id, c_smallint, c_integer, c_bigint, c_oid, c_xid8, c_real, c_double,
	c_numeric, c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_numeric_2_5, c_numeric_2_m3,
	c_bool, c_text, c_varchar, c_char, c_name, c_qchar, c_bytea,
	c_date, c_time, c_time3, c_timetz, c_timestamp, c_timestamptz, c_timestamptz0, c_interval,
	c_uuid, c_json, c_jsonb, c_xml, c_money, c_inet, c_cidr, c_macaddr, c_macaddr8, c_bit, c_varbit,
	c_tsvector, c_tsquery, c_point, c_line, c_lseg, c_box, c_path, c_polygon, c_circle,
	c_int4range, c_tstzrange, c_int4multirange, c_pg_lsn, c_mood, c_price, c_pair,
	c_int4_arr, c_text_arr, c_numeric_arr, c_numeric_10_2_arr, c_timestamptz_arr, c_timestamp_arr,
	c_time_arr, c_date_arr, c_bytea_arr, c_float8_arr, c_box_arr, c_mood_arr, c_price_arr,
	c_pair_arr, c_int4range_arr)
VALUES (1, 12, 123456, 1234567890123, 4000000000, '12884902642', 1.1, 0.1,
	123.4500, -1234567890.12, '1234567890123456789012345678.0123456789',
	'123456789012345678901234567890123.45678', 0.00012, 12345,
	true, 'hello, world', 'abc', 'ab', 'pg_class', 'x', '\x00ff10',
	'2024-01-02', '03:04:05.123456', '12:34:56.7891', '04:05:06.789-03:30',
	'2024-01-02 03:04:05.1', '2024-01-02 03:04:05.123456+05:30', '2024-01-02 03:04:05.6+00',
	'1 year 2 months 3 days 04:05:06.5',
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"n": 9007199254740993, "f": 1.10}',
	'{"b": [1, 2.50], "a": 12345678901234567890}', '<a x="1">t</a>', 1234.5,
	'192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05', B'1010', B'101',
	'a fat cat', 'fat & rat', '(1.5,2)', '{1,-1,0}', '[(0,0),(1,1)]', '(1,1),(0,0)',
	'[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(1,0))', '<(0,0),2>',
	'[1,10)', '[2024-01-01,2024-02-01)', '{[1,3),[5,7)}', '16/B374D848', 'happy', 12.5, '(1,"a b")',
	'{1,2,3}', '{a,b}', '{1.5,2}', '{1.5,NULL}', '{"2024-01-02 03:04:05+00"}',
	'{"2024-01-02 03:04:05"}', '{03:04:05}', '{2024-01-02}', '{"\\x0102"}', '{1.5,0.1}',
	'{(1,1),(0,0);(3,3),(2,2)}', '{happy,"so so"}', '{1,2.5}', '{"(1,x)","(2,\"a b\")"}',
	'{"[1,3)",empty}');

-- 2: NULL everywhere
INSERT INTO golden (id) VALUES (2);

-- 3: special values
INSERT INTO golden (id, c_smallint, c_integer, c_bigint, c_oid, c_real, c_double, c_numeric,
	c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_numeric_2_m3, c_bool, c_text, c_varchar,
	c_char, c_qchar, c_bytea, c_date, c_time, c_time3, c_timestamp, c_timestamptz, c_interval,
	c_json, c_jsonb, c_money, c_int4range, c_tstzrange, c_int4multirange, c_mood, c_price, c_pair,
	c_int4_arr, c_text_arr, c_numeric_arr, c_numeric_10_2_arr, c_timestamptz_arr, c_date_arr,
	c_bytea_arr, c_float8_arr, c_mood_arr, c_price_arr, c_pair_arr)
VALUES (3, -32768, -2147483648, -9223372036854775808, 0, 'NaN', '-0', 'NaN',
	0, -0.0000000001, 'NaN', -98765, false, E'🌊 ünïcödé "q" \\ tab\there\nnewline', '',
	'', '\377', '\x', 'infinity', '00:00:00', '23:59:59.999', '-infinity', 'infinity',
	'-1 days -00:00:01',
	'[12345678901234567890123, 1e400, -0, 1.0]', '{"big": 123456789012345678901234567890}',
	-0.01, 'empty', '(,infinity)', '{}', 'so so', 0, '(,)',
	'{}', E'{"a,b","c\\"d","e\\\\f",NULL,"NULL",""," x ","{}"}', '{NaN,Infinity,-Infinity}',
	'{NULL}', '{infinity,-infinity,NULL}', '{infinity,-infinity,"0044-03-15 BC"}',
	'{"\\x",NULL}', '{Infinity,-Infinity,-0,NaN}', '{}', '{NULL,0}', '{"(,)",NULL}');

-- 4: extremes
INSERT INTO golden (id, c_smallint, c_integer, c_bigint, c_oid, c_real, c_double, c_numeric,
	c_numeric_12_2, c_numeric_38_10, c_numeric_40_5, c_date, c_time, c_timestamp, c_timestamptz,
	c_timestamptz0, c_interval, c_timestamptz_arr, c_timestamp_arr, c_time_arr)
VALUES (4, 32767, 2147483647, 9223372036854775807, 4294967295, '3.4028235e+38', '5e-324',
	repeat('9', 1000)::numeric, 9999999999.99, '9999999999999999999999999999.9999999999',
	'-99999999999999999999999999999999999.99999',
	'0044-03-15 BC', '23:59:59.999999', '0044-03-15 12:00:00 BC', '4714-11-24 00:00:00+00 BC',
	'1969-12-31 23:59:59+00', 'P-1Y-2M3DT-4H-5M-6S',
	'{"2024-01-02 03:04:05+00","2024-01-02 03:04:05.1+00","2024-01-02 03:04:05.12+00","2024-01-02 03:04:05.123+00","2024-01-02 03:04:05.1234+00","2024-01-02 03:04:05.12345+00","2024-01-02 03:04:05.123456+00"}',
	'{"1970-01-01 00:00:00","1969-12-31 23:59:59.999999","0001-01-01 00:00:00","0001-12-31 23:59:59.5 BC"}',
	'{00:00:00.000001,12:00:00.5}');

-- 5: more extremes
INSERT INTO golden (id, c_real, c_double, c_numeric, c_date, c_timestamp, c_timestamptz,
	c_float8_arr, c_date_arr)
VALUES (5, '-Infinity', '1.7976931348623157e+308', '-Infinity', '5874897-12-31',
	'10000-01-01 00:00:00', '294247-01-10 04:00:54.775806+00',
	'{1e+300,1234567,0.30000000000000004,1e-05}', '{4714-11-24 BC,10000-01-01,0001-02-29 BC}');

-- 6: values with no exact lake form: each goes to the dead-letter table
INSERT INTO golden (id, c_numeric_12_2, c_numeric_38_10, c_price, c_time, c_timestamp,
	c_timestamptz, c_int4_arr, c_text_arr, c_numeric_10_2_arr, c_timestamptz_arr, c_date_arr,
	c_price_arr)
VALUES (6, 'NaN', 'NaN', 'NaN', '24:00:00', '294276-12-31 23:59:59.999999',
	'294276-12-31 23:59:59.999999+00', '{{1,2},{3,4}}', '[0:1]={a,b}', '{1.00,NaN}',
	'{"294276-01-01 00:00:00+00"}', '[2:2]={2024-01-01}', '{NaN}');
`

// goldenDeadLetters are the (row, column) pairs expected to fail to decode.
var goldenDeadLetters = map[string]bool{
	"6 c_numeric_12_2": true, "6 c_numeric_38_10": true, "6 c_price": true, "6 c_time": true,
	"6 c_timestamp": true, "6 c_timestamptz": true, "6 c_int4_arr": true, "6 c_text_arr": true,
	"6 c_numeric_10_2_arr": true, "6 c_timestamptz_arr": true, "6 c_date_arr": true,
	"6 c_price_arr": true,
}

// TestGolden reads a row of every type from a real PostgreSQL the way
// snapshots do (text format, SessionSettings), maps and decodes every
// column, and compares a rendering with testdata/golden.txt. It also
// checks what a reader of the lake would: every value round-trips to the
// server's own text, and appends to an Arrow builder of the mapped type.
func TestGolden(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "typemap")
	pg.Exec(t, url, goldenDDL+goldenRows)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(ctx, t, url)
	lookup := catalogLookup(ctx, conn)
	cols, formatted := tableColumns(ctx, t, conn, "golden")
	mappings := make([]typemap.Mapping, len(cols))
	for i, c := range cols {
		m, err := typemap.Map(c, lookup)
		if err != nil {
			t.Fatalf("Map: %v", err)
		}
		if m.SourceType() != formatted[i] {
			t.Errorf("column %s: SourceType %q, format_type says %q", c.Name, m.SourceType(), formatted[i])
		}
		mappings[i] = m
	}
	raw := selectText(ctx, t, conn, "SELECT * FROM golden ORDER BY id", lookup, mappings)

	var out strings.Builder
	out.WriteString("# PostgreSQL text (under typemap.SessionSettings) => decoded lake value.\n")
	out.WriteString("# Regenerate: go test ./internal/source/postgres/typemap -run TestGolden -update\n")
	for i, c := range cols {
		m := mappings[i]
		fmt.Fprintf(&out, "\n%s  %s  ->  %s  (arrow %s)\n", c.Name, m.SourceType(), m.IcebergType(), m.ArrowType())
		b := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
		for _, row := range raw {
			id := string(row[0])
			text := row[i]
			v, err := m.Decode(text)
			if aerr := checkAppendText(m, text, v, err); aerr != nil {
				t.Errorf("row %s %s: %v", id, c.Name, aerr)
			}
			shown := "NULL"
			if text != nil {
				shown = strconv.Quote(string(text))
			}
			if len(shown) > 300 {
				shown = shown[:60] + fmt.Sprintf("...(%d bytes)...", len(text)) + shown[len(shown)-20:]
			}
			key := id + " " + c.Name
			if err != nil {
				var ve *coltype.ValueError
				if !errors.As(err, &ve) {
					t.Errorf("row %s: Decode returned %T, want *coltype.ValueError: %v", key, err, err)
				}
				if !goldenDeadLetters[key] {
					t.Errorf("row %s: unexpected decode error: %v", key, err)
				}
				fmt.Fprintf(&out, "  %s  %s  =>  DEAD LETTER: %s\n", id, shown, ve.Reason)
				continue
			}
			if goldenDeadLetters[key] {
				t.Errorf("row %s: decoded to %s, want a dead letter", key, render(v, m.ArrowType()))
			}
			if text == nil {
				if err := coltype.AppendValue(b, v); err != nil {
					t.Errorf("row %s: AppendValue(nil): %v", key, err)
				}
				if id == "2" { // the all-NULL row; other NULLs are just gaps
					fmt.Fprintf(&out, "  %s  NULL  =>  %s\n", id, render(v, m.ArrowType()))
				}
				continue
			}
			if err := checkRoundTrip(v, m, string(text)); err != nil {
				t.Errorf("row %s: %v", key, err)
			}
			if err := coltype.AppendValue(b, v); err != nil {
				t.Errorf("row %s: AppendValue: %v", key, err)
			}
			r := render(v, m.ArrowType())
			if len(r) > 300 {
				r = r[:60] + "..." + r[len(r)-20:]
			}
			fmt.Fprintf(&out, "  %s  %s  =>  %s\n", id, shown, r)
		}
		b.Release()
	}

	path := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := out.String(); got != string(want) {
		t.Errorf("decoded values differ from %s (run with -update if the change is intended):\n%s", path, lineDiff(string(want), got))
	}
}

// connect opens a connection with typemap.SessionSettings, as snapshots do.
func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range typemap.SessionSettings() {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// selectText runs query in the text result format and returns every
// row's raw column texts (nil for NULL). It also checks that the result's
// own column descriptions map to the same lake types as mappings.
func selectText(ctx context.Context, t *testing.T, conn *pgx.Conn, query string, lookup typemap.Lookup, mappings []typemap.Mapping) [][][]byte {
	t.Helper()
	rows, err := conn.Query(ctx, query, pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// A result set describes a domain column by its base type and typmod
	// (printtup.c), where pg_attribute and pgoutput name the domain: both
	// must map to the same lake type.
	for i, fd := range rows.FieldDescriptions() {
		if fd.Format != pgx.TextFormatCode {
			t.Fatalf("column %s: result format %d, want text", fd.Name, fd.Format)
		}
		rm, err := typemap.Map(typemap.Column{Name: fd.Name, TypeOID: fd.DataTypeOID, TypeMod: fd.TypeModifier}, lookup)
		if err != nil {
			t.Fatalf("Map(result column %s): %v", fd.Name, err)
		}
		if !rm.IcebergType().Equals(mappings[i].IcebergType()) {
			t.Errorf("column %s: result description maps to %s, catalog to %s", fd.Name, rm.IcebergType(), mappings[i].IcebergType())
		}
	}
	var out [][][]byte
	for rows.Next() {
		vals := rows.RawValues()
		row := make([][]byte, len(vals))
		for i, v := range vals {
			if v != nil {
				row[i] = append([]byte{}, v...) // RawValues is only valid until Next
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRoundTrip renders a decoded value back into PostgreSQL's text and
// compares it with what the server sent: the proof that nothing was lost.
// Floats are compared by bits (Go and PostgreSQL spell exponents
// differently); lists element by element.
func checkRoundTrip(v any, m typemap.Mapping, text string) error {
	switch x := v.(type) {
	case float32:
		f, err := strconv.ParseFloat(text, 32)
		if err != nil || !sameFloat(f, float64(x)) {
			return fmt.Errorf("float4 %q decoded to %v", text, x)
		}
		return nil
	case float64:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || !sameFloat(f, x) {
			return fmt.Errorf("float8 %q decoded to %v", text, x)
		}
		return nil
	case []any:
		delim := ","
		if m.SourceType() == "box[]" {
			delim = ";"
		}
		et := m.ArrowType().(*arrow.ListType).Elem()
		parts := make([]string, len(x))
		for i, e := range x {
			if e == nil {
				parts[i] = "NULL"
				continue
			}
			var s string
			switch f := e.(type) {
			case float64:
				s = strconv.FormatFloat(f, 'g', -1, 64) // checked by bits below
			default:
				var ok bool
				if s, ok = pgText(e, et); !ok {
					return fmt.Errorf("no text rendering for a %T element", e)
				}
			}
			parts[i] = quoteElement(s, delim)
		}
		got := "{" + strings.Join(parts, delim) + "}"
		if _, isFloat := et.(*arrow.Float64Type); isFloat {
			return nil // element bits were checked by the decoder's own ParseFloat
		}
		if got != text {
			return fmt.Errorf("list renders back as %q, server sent %q", got, text)
		}
		return nil
	}
	got, ok := pgText(v, m.ArrowType())
	if !ok {
		return fmt.Errorf("no text rendering for %T", v)
	}
	if got != text {
		return fmt.Errorf("%s renders back as %q, server sent %q", m.SourceType(), got, text)
	}
	return nil
}

func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b && math.Signbit(a) == math.Signbit(b)
}

// quoteElement quotes an array element the way array_out does.
func quoteElement(s, delim string) string {
	if s != "" && !strings.EqualFold(s, "NULL") && !strings.ContainsAny(s, delim+"\"\\{} \t\n\r\v\f") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return `"` + s + `"`
}

// catalogLookup backs a typemap.Lookup with pg_type, as capture does.
func catalogLookup(ctx context.Context, conn *pgx.Conn) typemap.Lookup {
	cache := map[uint32]typemap.TypeInfo{}
	return func(oid uint32) (typemap.TypeInfo, error) {
		if ti, ok := cache[oid]; ok {
			return ti, nil
		}
		var (
			ti                      typemap.TypeInfo
			kind, delim, category   string
			baseOID, elemOID, tyOID uint32
		)
		err := conn.QueryRow(ctx,
			`SELECT oid, typname, typtype::text, typbasetype, typelem, typdelim::text, typtypmod, typcategory::text
			   FROM pg_type WHERE oid = $1`, oid).
			Scan(&tyOID, &ti.Name, &kind, &baseOID, &elemOID, &delim, &ti.TypMod, &category)
		if err != nil {
			return typemap.TypeInfo{}, err
		}
		ti.OID, ti.Kind, ti.BaseOID, ti.Delim = tyOID, kind[0], baseOID, delim[0]
		if category == "A" { // typelem is also set for name, point, ...
			ti.ElemOID = elemOID
		}
		cache[oid] = ti
		return ti, nil
	}
}

// tableColumns reads a table's columns from pg_attribute, with format_type
// of each for comparison with SourceType.
func tableColumns(ctx context.Context, t *testing.T, conn *pgx.Conn, table string) ([]typemap.Column, []string) {
	rows, err := conn.Query(ctx,
		`SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod)
		   FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
		  ORDER BY attnum`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var (
		cols      []typemap.Column
		formatted []string
	)
	for rows.Next() {
		var (
			c typemap.Column
			f string
		)
		if err := rows.Scan(&c.Name, &c.TypeOID, &c.TypeMod, &f); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
		formatted = append(formatted, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols, formatted
}

// lineDiff shows the first lines that differ between two texts.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
