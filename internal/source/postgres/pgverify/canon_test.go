package pgverify

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// canonDDL has a column of every family of the type mapping, and rows of
// ordinary, special and extreme values.
const canonDDL = `
CREATE TYPE mood AS ENUM ('happy', 'so so');
CREATE DOMAIN price AS numeric(10,2);
CREATE TYPE pair AS (n int, s text);
CREATE TABLE canon (
	id int PRIMARY KEY,
	c_smallint smallint, c_bigint bigint, c_oid oid, c_xid8 xid8,
	c_real real, c_double double precision,
	c_numeric numeric, c_numeric_12_2 numeric(12,2), c_numeric_38_10 numeric(38,10), c_numeric_2_5 numeric(2,5), c_numeric_2_m3 numeric(2,-3),
	c_bool boolean, c_text text, c_varchar varchar(10), c_char char(5), c_name name, c_bytea bytea,
	c_date date, c_time time, c_timetz timetz, c_timestamp timestamp, c_timestamptz timestamptz, c_interval interval,
	c_uuid uuid, c_json json, c_jsonb jsonb, c_money money, c_inet inet, c_cidr cidr, c_bit bit(4),
	c_box box, c_int4range int4range, c_mood mood, c_price price, c_pair pair,
	c_int4_arr int4[], c_text_arr text[], c_numeric_arr numeric[], c_numeric_10_2_arr numeric(10,2)[],
	c_timestamptz_arr timestamptz[], c_date_arr date[], c_bytea_arr bytea[], c_float8_arr float8[],
	c_box_arr box[], c_bool_arr bool[], c_time_arr time[], c_pair_arr pair[]
);
INSERT INTO canon VALUES (1, 12, 1234567890123, 4000000000, '12884902642', 1.1, 0.1,
	123.4500, -1234567890.12, '1234567890123456789012345678.0123456789', 0.00012, 12345,
	true, 'hello, world 🌊', 'abc', 'ab', 'pg_class', '\x00ff10',
	'2024-01-02', '03:04:05.123456', '04:05:06.789-03:30', '2024-01-02 03:04:05.1', '2024-01-02 03:04:05.123456+05:30', '1 year 2 months 3 days 04:05:06.5',
	'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"n": 9007199254740993, "f": 1.10}', '{"b": [1, 2.50], "a": "ü"}', 1234.5, '192.168.0.1', '10.0.0.0/8', B'1010',
	'(1,1),(0,0)', '[1,10)', 'happy', 12.5, '(1,"a b")',
	'{1,2,NULL}', '{a,"b,c",NULL,"NULL",""}', '{1.5,NaN,-Infinity}', '{1.5,NULL}',
	'{"2024-01-02 03:04:05+00",infinity}', '{2024-01-02,-infinity}', '{"\\x0102",NULL}', '{1e+300,1234567,-0,NaN}',
	'{(1,1),(0,0);(3,3),(2,2)}', '{t,f}', '{00:00:00.000001,23:59:59.999999}', '{"(1,x)","(2,\"a b\")",NULL}');
INSERT INTO canon (id) VALUES (2);
INSERT INTO canon (id, c_smallint, c_bigint, c_real, c_double, c_numeric, c_numeric_12_2, c_numeric_2_5, c_bool, c_text, c_char, c_bytea,
	c_date, c_time, c_timestamp, c_timestamptz, c_int4_arr, c_text_arr, c_pair, c_pair_arr)
VALUES (3, -32768, -9223372036854775808, 'NaN', '-0', 'NaN', -0.01, -0.00001, false, E'tab\there\nnl "q" \\ ', '', '\x',
	'infinity', '00:00:00', '-infinity', 'infinity', '{}', '{}', '(,)', '{"(,)",NULL}');
INSERT INTO canon (id, c_real, c_double, c_numeric, c_date, c_timestamp, c_timestamptz, c_numeric_12_2)
VALUES (4, '-Infinity', '1.7976931348623157e+308', '-Infinity', '0044-03-15 BC', '0044-03-15 12:00:00 BC', '4714-11-24 00:00:00+00 BC', 0);
INSERT INTO canon (id, c_date, c_timestamp, c_timestamptz, c_double, c_numeric_38_10)
VALUES (5, '5874897-12-31', '10000-01-01 00:00:00', '294247-01-10 04:00:54.775806+00', 5e-324, '-9999999999999999999999999999.9999999999');
INSERT INTO canon (id, c_time, c_timestamp, c_timestamptz, c_timestamptz_arr)
VALUES (6, '23:59:59.999999', '1899-12-31 23:59:59.999999', '2039-07-01 23:59:59.999999+00',
	'{"2041-01-01 00:00:00.000001+00","1898-06-01 00:00:00.999999+00","1970-01-01 00:00:00+00"}');
`

// TestSQLCanonMatchesGo checks the SQL canonical forms (sqlcanon.go)
// against the Go ones (canon.go) of every value decoded by typemap: column
// by column, whole rows (md5) and chunks.
func TestSQLCanonMatchesGo(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "canon")
	pg.Exec(t, url, canonDDL)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := postgres.NewDialer(url, func(s string) string { return "x" })
	if err != nil {
		t.Fatal(err)
	}
	src := New(d)
	defer src.Close()
	s0, err := src.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	snap := s0.(*pgSnap)
	st, err := snap.Describe(ctx, verify.TableName{Schema: "public", Table: "canon"})
	if err != nil || st == nil {
		t.Fatalf("describe: %v, %v", st, err)
	}
	var exprs []string
	for _, c := range st.Cols {
		q := quoteIdent(c.Name)
		cn, ok := sqlCanon(q, c.Arrow, c.TypeOID)
		if !ok {
			t.Fatalf("column %s (%s): no SQL canonical form", c.Name, c.Arrow)
		}
		exprs = append(exprs, sqlFieldOf(q, cn))
	}
	rowSQL, _ := sqlFields(st.Cols)
	keySQL, _ := sqlFields(st.Key)
	const chunks = 7
	sql := fmt.Sprintf("SELECT %s, %s, md5(%s), %s FROM canon ORDER BY id", selectList(st), strings.Join(exprs, ", "), rowSQL, sqlBucket(keySQL, chunks))
	rows, err := textQuery(ctx, snap.tx, sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := len(st.Cols)
	seen := 0
	for rows.Next() {
		raw := rows.RawValues()
		vals := verify.DecodeRow(st.Cols, raw[:n])
		id := string(raw[0])
		for i, c := range st.Cols {
			goField := string(verify.AppendField(nil, vals[i], c.Arrow))
			if sqlField := string(raw[n+i]); goField != sqlField {
				t.Errorf("row %s column %s (%s): SQL canonical %q, Go %q", id, c.Name, c.TypeName, sqlField, goField)
			}
		}
		rowCanon := verify.CanonOf(nil, st.Cols, vals)
		if got, want := string(raw[2*n]), hex.EncodeToString(func() []byte { s := md5.Sum(rowCanon); return s[:] }()); got != want {
			t.Errorf("row %s: SQL md5 %s, Go %s", id, got, want)
		}
		keyCanon := verify.CanonOf(nil, st.Key, st.KeyVals(vals))
		if got, want := string(raw[2*n+1]), fmt.Sprint(verify.BucketOf(md5.Sum(keyCanon), chunks)); got != want {
			t.Errorf("row %s: SQL chunk %s, Go %s", id, got, want)
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != 6 {
		t.Fatalf("read %d rows, want 6", seen)
	}

	// Chunk sums agree too.
	if err := verify.CheckPushdown(ctx, snap, st, chunks); err != nil {
		t.Error(err)
	}

	// Every key value reads back through its literal.
	keys := [][]any{{int32(1)}, {int32(3)}, {int32(99)}}
	got, err := snap.Fetch(ctx, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("fetch found %d rows, want 2", len(got))
	}
}

func TestKeyLiteralRoundTrip(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "keylit")
	ctx := context.Background()
	d, _ := postgres.NewDialer(url, func(s string) string { return "x" })
	conn, err := d.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tz := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	cases := []struct {
		v    any
		t    arrow.DataType
		typ  string
		want string // the server's text of the value read back
	}{
		{arrow.Timestamp(1704164645123456), tz, "timestamptz", "2024-01-02 03:04:05.123456+00"},
		{arrow.Timestamp(1704164645000000), &arrow.TimestampType{Unit: arrow.Microsecond}, "timestamp", "2024-01-02 03:04:05"},
		{arrow.Date32(19724), arrow.FixedWidthTypes.Date32, "date", "2024-01-02"},
		{arrow.Time64(1), arrow.FixedWidthTypes.Time64us, "time", "00:00:00.000001"},
		{float64(0.1), arrow.PrimitiveTypes.Float64, "float8", "0.1"},
		{float32(1.1), arrow.PrimitiveTypes.Float32, "float4", "1.1"},
		{[]byte{0, 255}, arrow.BinaryTypes.Binary, "bytea", `\x00ff`},
		{decimal128.FromI64(-1), &arrow.Decimal128Type{Precision: 12, Scale: 2}, "numeric(12,2)", "-0.01"},
	}
	for _, c := range cases {
		lit, ok := keyLiteral(c.v, c.t)
		if !ok {
			t.Errorf("%v: no literal", c.v)
			continue
		}
		var got string
		if err := conn.QueryRow(ctx, "SELECT ($1::text::"+c.typ+")::text", lit).Scan(&got); err != nil {
			t.Errorf("%s %q: %v", c.typ, lit, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s literal %q reads back as %q, want %q", c.typ, lit, got, c.want)
		}
	}
	_ = pgx.Identifier{}
}

func TestSQLCanonTimeAs(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "canon_timeas")
	pg.Exec(t, url, `CREATE DOMAIN clock AS time(3);
		CREATE TABLE clocks (k time PRIMARY KEY, d clock, ta time[]);
		INSERT INTO clocks VALUES ('24:00:00', '12:00:00.5', '{00:00:00,24:00:00,NULL}'), ('00:00:00', NULL, NULL),
			('23:59:59.999999', '23:59:59.999', '{}'), ('03:04:05.1', '00:00:00.001', '{12:34:56.789}')`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := postgres.NewDialer(url, func(s string) string { return "x" })
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		as   typemap.TimeAs
		keys [][]any
	}{
		{typemap.TimeAsText, [][]any{{"24:00:00"}, {"03:04:05.1"}, {"01:00:00"}}},
		{typemap.TimeAsMicros, [][]any{{int64(86_400_000_000)}, {int64(11_045_100_000)}, {int64(3_600_000_000)}}},
	} {
		t.Run(string(c.as), func(t *testing.T) {
			src := NewWith(d, typemap.Options{TimeAs: c.as})
			defer src.Close()
			s0, err := src.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s0.Close()
			snap := s0.(*pgSnap)
			st, err := snap.Describe(ctx, verify.TableName{Schema: "public", Table: "clocks"})
			if err != nil || st == nil {
				t.Fatalf("describe: %v, %v", st, err)
			}
			var exprs []string
			for _, col := range st.Cols {
				one, ok := sqlFields([]*verify.Column{col})
				if !ok {
					t.Fatalf("column %s: no SQL canonical form", col.Name)
				}
				exprs = append(exprs, one)
			}
			rows, err := textQuery(ctx, snap.tx, fmt.Sprintf("SELECT %s, %s FROM clocks", selectList(st), strings.Join(exprs, ", ")))
			if err != nil {
				t.Fatal(err)
			}
			n, seen := len(st.Cols), 0
			for rows.Next() {
				raw := rows.RawValues()
				vals := verify.DecodeRow(st.Cols, raw[:n])
				for i, col := range st.Cols {
					if raw[i] != nil {
						if _, err := col.Decode(raw[i]); err != nil {
							t.Errorf("row %s column %s: %q does not decode", raw[0], col.Name, raw[i])
						}
					}
					if goField, sqlField := string(verify.AppendField(nil, vals[i], col.Arrow)), string(raw[n+i]); goField != sqlField {
						t.Errorf("row %s column %s (%s): SQL canonical %q, Go %q", raw[0], col.Name, col.TypeName, sqlField, goField)
					}
				}
				seen++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if seen != 4 {
				t.Fatalf("read %d rows, want 4", seen)
			}
			got, err := snap.Fetch(ctx, st, c.keys)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Errorf("fetch of keys %v found %d rows, want 2 (24:00:00 and 03:04:05.1)", c.keys, len(got))
			}
		})
	}
}
