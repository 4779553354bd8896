package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// The special-values matrix (RELIABILITY.md rows 22-24): one table with a
// column per kind of value and rows holding the edge cases. Every value is
// compared as a user reads it: the canonical form below, computed at the
// source by SQL that does not go through tidemark's decoder, and from the
// lake by our reader and by PyIceberg.
//
//	float    "bits:<hex>" of the IEEE 754 value (so -0 keeps its sign), or "NaN"
//	ts       "us:<µs since 1970 UTC>", or "infinity" / "-infinity"
//	date     "days:<days since 1970>", or "infinity" / "-infinity"
//	text     the exact text (numeric, json, jsonb, text); SQL NULL is "NULL"
//	decimal  the exact decimal text with its scale
type valueCol struct {
	name, typ, kind string
	// source is the SQL expression of the canonical form at the source.
	source string
}

var valueCols = []valueCol{
	{"n", "numeric", "text", "n::text"},
	{"n60", "numeric(60,10)", "text", "n60::text"},
	{"np", "numeric(12,2)", "decimal", "np::text"},
	{"f4", "real", "float4", "CASE WHEN f4 = 'NaN' THEN 'NaN' ELSE 'bits:' || encode(float4send(f4), 'hex') END"},
	{"f8", "double precision", "float8", "CASE WHEN f8 = 'NaN' THEN 'NaN' ELSE 'bits:' || encode(float8send(f8), 'hex') END"},
	{"ts", "timestamp", "ts", "CASE WHEN isfinite(ts) THEN 'us:' || (extract(epoch FROM ts) * 1000000)::bigint ELSE ts::text END"},
	{"ts0", "timestamp(0)", "ts", "'us:' || (extract(epoch FROM ts0) * 1000000)::bigint"},
	{"tz", "timestamptz", "ts", "CASE WHEN isfinite(tz) THEN 'us:' || (extract(epoch FROM tz) * 1000000)::bigint ELSE tz::text END"},
	{"tz0", "timestamptz(0)", "ts", "'us:' || (extract(epoch FROM tz0) * 1000000)::bigint"},
	{"tz3", "timestamptz(3)", "ts", "'us:' || (extract(epoch FROM tz3) * 1000000)::bigint"},
	{"tz5", "timestamptz(5)", "ts", "'us:' || (extract(epoch FROM tz5) * 1000000)::bigint"},
	{"d", "date", "date", "CASE WHEN isfinite(d) THEN 'days:' || (d - date '1970-01-01') ELSE d::text END"},
	{"js", "json", "text", "js::text"},
	{"jb", "jsonb", "text", "jb::text"},
	{"t", "text", "text", "t"},
}

// valueRows are the edge cases, one row each; base offsets the ids so the
// same rows can be written by the snapshot and by the stream. Timestamps
// without an offset are read in the inserting session's TimeZone: the
// database default the test sets.
func valueRows(base int) string {
	big := strings.Repeat("9", 500) + "." + strings.Repeat("1", 500)
	rows := []string{
		// NaN and infinities; JSON with integers above 2^53 and duplicate keys; emoji.
		`(1, 'NaN', '12345678901234567890123456789012345678901234567890.0123456789', 1.50, 'NaN', 'NaN',
			'infinity', '2024-01-01 00:00:00.5', 'infinity', '2024-01-01 00:00:00.5', '2024-01-01 00:00:00.0005', '2024-01-01 00:00:00.000005', 'infinity',
			'{"big": 9007199254740993, "bigger": 123456789012345678901234567890, "dup": 1, "dup": 2, "e": 1E+2}',
			'{"big": 9007199254740993, "bigger": 123456789012345678901234567890, "dup": 1, "dup": 2, "e": 1E+2}',
			'emoji 🎉 👩‍👩‍👧 𝄞')`,
		`(2, 'Infinity', NULL, -0.01, 'Infinity', 'Infinity',
			'-infinity', NULL, '-infinity', NULL, NULL, NULL, '-infinity',
			'null', 'null', '')`,
		`(3, '-Infinity', NULL, NULL, '-Infinity', '-Infinity',
			NULL, NULL, NULL, NULL, NULL, NULL, NULL,
			NULL, NULL, NULL)`,
		// 1000 digits; -0 (float sign bit; numeric has no -0); \u0000 inside json text.
		`(4, '` + big + `', NULL, 0.00, '-0', '-0',
			'2024-03-10 01:59:59.999999', '2024-03-10 01:59:59.5', '2024-03-10 01:59:59.999999', '2024-03-10 01:59:59.5', '2024-03-10 01:59:59.9995', '2024-03-10 01:59:59.999995', '2024-03-10',
			'{"nul": "a\u0000b", "esc": "\ud83c\udf89", "sp" :  [1,2 ]}', '{"esc": "\ud83c\udf89", "sp" :  [1,2 ]}', 'tab	newline
end')`,
		// +0 next to -0; DST edges in the database's zone and explicit offsets.
		`(5, '-0.000', NULL, 0, '0', '0',
			'2024-03-10 03:00:00', '2024-03-10 03:00:00.4', '2024-03-10 03:00:00', '2024-11-03 01:30:00-02:30', '2024-11-03 01:30:00.123-03:30', '2024-11-03 01:30:00.123456', '1999-12-31',
			'"\ud83c\udf89 🎉"', '"\ud83c\udf89 🎉"', '𝄞')`,
		`(6, '1e-20', NULL, 99999999.99, '1.4e-45', '4.9e-324',
			'2024-11-03 01:30:00', '2024-11-03 01:30:00.6', '2024-11-03 01:30:00', '2024-11-03 01:30:00', '2024-11-03 01:59:59.9999', '2024-11-03 02:00:00', '0001-01-01 BC',
			'  {"a":1}  ', '  {"a":1}  ', '  ')`,
		`(7, '0.1', NULL, -99999999.99, '3.4028235e38', '1.7976931348623157e308',
			'1970-01-01 00:00:00', '1969-12-31 23:59:59.5', '1970-01-01 00:00:00+00', '2024-06-30 23:59:59.999999+14', '2000-02-29 12:00:00.00001-12', '2024-03-31 02:30:00', '4713-01-01 BC',
			'[]', '{}', 'NULL')`,
	}
	for i, r := range rows {
		id := strings.Index(r, ",")
		n, _ := strconv.Atoi(strings.TrimPrefix(r[:id], "("))
		rows[i] = fmt.Sprintf("(%d%s", n+base, r[id:])
	}
	names := make([]string, len(valueCols))
	for i, c := range valueCols {
		names[i] = c.name
	}
	return "INSERT INTO special (id, " + strings.Join(names, ", ") + ") VALUES " + strings.Join(rows, ",\n")
}

func valueDDL() string {
	cols := []string{"id int PRIMARY KEY"}
	for _, c := range valueCols {
		cols = append(cols, c.name+" "+c.typ)
	}
	return "CREATE TABLE special (" + strings.Join(cols, ", ") + ");\n" +
		// A numeric(p,s) NaN has no decimal: its row is a dead letter.
		"CREATE TABLE special_dl (id int PRIMARY KEY, np numeric(12,2), note text);\n"
}

// TestBadInputSpecialValues runs the matrix through the real binary twice,
// with the source database's TimeZone at +08:00 and at America/St_Johns
// (tidemark sets its own session zone; the instants must not move).
func TestBadInputSpecialValues(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	for _, zone := range []string{"+08:00", "America/St_Johns"} {
		t.Run(strings.NewReplacer("/", "_", ":", "").Replace(zone), func(t *testing.T) {
			runValueMatrix(t, bin, pg, zone)
		})
	}
}

func runValueMatrix(t *testing.T, bin string, pg *testenv.PG, zone string) {
	srcURL := pg.CreateDB(t, "bad_values")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, fmt.Sprintf(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET timezone TO %%L', current_database(), '%s'); END $$`, zone))
	pg.Exec(t, srcURL, valueDDL())
	checkWhatPostgresRefuses(t, srcURL)
	pg.Exec(t, srcURL, valueRows(0))
	// The zone is in effect for a new session, and the zone-less literals
	// were read in it: row 4's timestamptz is not the UTC reading.
	func() {
		c := connect(t, srcURL)
		defer c.Close(context.Background())
		var got string
		var moved bool
		if err := c.QueryRow(context.Background(), `SELECT current_setting('TimeZone'), tz <> '2024-03-10 01:59:59.999999+00' FROM special WHERE id = 4`).Scan(&got, &moved); err != nil {
			t.Fatal(err)
		}
		if got != zone || !moved {
			t.Fatalf("the database TimeZone is %q (moved %v), want %q", got, moved, zone)
		}
	}()
	pg.Exec(t, srcURL, `INSERT INTO special_dl VALUES (1, 'NaN', 'snapshot dead letter'), (2, 1.25, 'fine')`)

	special := change.TableID{Schema: "public", Name: "special"}
	specialDL := change.TableID{Schema: "public", Name: "special_dl"}
	tables := []oddTable{{id: special, key: []string{"id"}}, {id: specialDL, key: []string{"id"}}}
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	pg.Exec(t, srcURL, valueRows(100)) // the same rows, streamed
	pg.Exec(t, srcURL, `INSERT INTO special_dl VALUES (101, 'NaN', 'streamed dead letter'), (102, 2.50, 'fine');
		UPDATE special_dl SET np = 'NaN' WHERE id = 2;
		UPDATE special SET f8 = '-0', n = 'NaN', js = 'null', jb = NULL WHERE id = 107;`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	want := sourceCanon(t, srcURL)
	if len(want) != 14 {
		t.Fatalf("the source has %d rows in special, want 14", len(want))
	}
	// Bronze, replayed, and silver, read by our reader.
	bronzeRows := bronzetest.Replay(t, bronzetest.Read(t, wh, bronze.Ident(source, special)...), []string{"id"})
	compareCanon(t, "bronze", want, lakeCanon(t, bronzeRows))
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	silverRows := map[string]bronzetest.Row{}
	for _, row := range bronzetest.Read(t, wh, silver.Ident(source, "public", "special")...) {
		silverRows[bronzetest.KeyOf(row, []string{"id"})] = row
	}
	compareCanon(t, "silver", want, lakeCanon(t, silverRows))
	// PyIceberg reads the same values.
	if py := pyRead(t, wh, silver.Ident(source, "public", "special")); py != nil {
		compareCanon(t, "silver by PyIceberg", want, pyCanon(t, py))
	}

	// The rows the lake cannot hold are dead letters with table, key,
	// position and reason; the rest of special_dl is in silver.
	checkDeadLetters(t, wh, source)
	dlSilver := map[string]any{}
	for _, row := range bronzetest.Read(t, wh, silver.Ident(source, "public", "special_dl")...) {
		dlSilver[fmt.Sprint(row["id"])] = row["np"]
	}
	if len(dlSilver) != 2 || dlSilver["2"] != "1.25" || dlSilver["102"] != "2.50" {
		t.Errorf("silver special_dl = %v, want 2: 1.25 (its last storable value) and 102: 2.50; 1 and 101 are dead letters", dlSilver)
	}

	// verify: special is equal; special_dl differs exactly where rows were
	// dead-lettered, and says the value cannot be stored.
	s = r.Start()
	out, err := exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "2m", "--tables", "public.special").CombinedOutput()
	if err != nil {
		s.Stop(t, time.Minute)
		t.Fatalf("tidemark verify special: %v\n%s", err, out)
	}
	t.Logf("tidemark verify:\n%s", strings.TrimSpace(string(out)))
	out, err = exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "2m", "--tables", "public.special_dl", "--format", "json").CombinedOutput()
	s.Stop(t, time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitDiffers {
		t.Fatalf("tidemark verify special_dl: %v, want exit %d (the dead-lettered rows differ)\n%s", err, fault.ExitDiffers, out)
	}
	for _, w := range []string{"cannot be stored in the lake", `"id=1"`, `"id=2"`, `"id=101"`} {
		if !strings.Contains(string(out), w) {
			t.Errorf("verify special_dl does not report %s:\n%s", w, out)
		}
	}
}

// checkWhatPostgresRefuses documents, by asking the server, the values
// PostgreSQL itself does not store, so they need no lake mapping.
func checkWhatPostgresRefuses(t *testing.T, srcURL string) {
	t.Helper()
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	for _, q := range []string{
		`SELECT '"\u0000"'::jsonb`,          // jsonb cannot hold U+0000
		`SELECT 'a' || chr(0)`,              // nor can text
		`SELECT E'a\000b'::text`,            // nor an escape string
		`SELECT 'Infinity'::numeric(12,2)`,  // a constrained numeric holds NaN but not infinity
		`SELECT '-0'::numeric::text = '-0'`, // (numeric has no -0: this one is allowed, and false)
	} {
		_, err := c.Exec(context.Background(), q)
		if q == `SELECT '-0'::numeric::text = '-0'` {
			var neg bool
			if err := c.QueryRow(context.Background(), q).Scan(&neg); err != nil || neg {
				t.Errorf("%s: %v %v, want false: numeric -0 reads back as 0", q, neg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("PostgreSQL accepted %s; the matrix assumes it refuses it", q)
		}
	}
	var s string
	if err := c.QueryRow(context.Background(), `SELECT '"a\u0000b"'::json::text`).Scan(&s); err != nil || s != `"a\u0000b"` {
		t.Errorf(`json '"a\u0000b"' = %q, %v; want the text kept`, s, err)
	}
}

// sourceCanon reads special's canonical values at the source.
func sourceCanon(t *testing.T, srcURL string) map[string]map[string]string {
	t.Helper()
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	exprs := []string{"id::text"}
	for _, col := range valueCols {
		exprs = append(exprs, "coalesce("+col.source+", 'NULL')")
	}
	rows, err := c.Query(context.Background(), "SELECT "+strings.Join(exprs, ", ")+" FROM special")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]string{}
	for rows.Next() {
		vals := make([]string, len(exprs))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for i, col := range valueCols {
			m[col.name] = vals[i+1]
		}
		out["id="+vals[0]] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// lakeCanon renders bronzetest rows (keyed like bronzetest.KeyOf) canonically.
func lakeCanon(t *testing.T, rows map[string]bronzetest.Row) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, row := range rows {
		m := map[string]string{}
		for _, col := range valueCols {
			m[col.name] = canonLake(col.kind, row[col.name])
		}
		out[fmt.Sprintf("id=%v", row["id"])] = m
	}
	return out
}

// pyCanon renders PyIceberg's JSON rows (scripts/pyiceberg_read.py)
// canonically.
func pyCanon(t *testing.T, rows []map[string]any) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, row := range rows {
		m := map[string]string{}
		for _, col := range valueCols {
			m[col.name] = canonPy(t, col.kind, row[col.name])
		}
		out[fmt.Sprintf("id=%v", row["id"])] = m
	}
	return out
}

func compareCanon(t *testing.T, what string, want, got map[string]map[string]string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: row %s is missing", what, k)
			continue
		}
		for _, col := range valueCols {
			if g[col.name] != w[col.name] {
				t.Errorf("%s: row %s column %s (%s) = %q, source %q", what, k, col.name, col.typ, g[col.name], w[col.name])
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: row %s is not in the source", what, k)
		}
	}
}

// checkDeadLetters: the NaN rows of special_dl (snapshot, insert, update)
// are in bronze.<source>._dead_letter with the table, the key (in raw),
// the position and a reason naming the column and type but not the value.
func checkDeadLetters(t *testing.T, wh, source string) {
	t.Helper()
	rows := bronzetest.Read(t, wh, append(bronze.SourceNamespace(source), bronze.DeadLetterTable)...)
	seen := map[string]string{}
	for _, row := range rows {
		var raw map[string]any
		if err := json.Unmarshal([]byte(row[bronze.ColRaw].(string)), &raw); err != nil {
			t.Errorf("dead letter raw is not JSON: %v", row[bronze.ColRaw])
			continue
		}
		id := fmt.Sprint(raw["id"])
		seen[id] = row[bronze.ColOp].(string)
		if row[bronze.ColTable] != "public.special_dl" {
			t.Errorf("dead letter of id %s: source_table %v, want public.special_dl", id, row[bronze.ColTable])
		}
		msg, _ := row[bronze.ColError].(string)
		if !strings.Contains(msg, `"np"`) || !strings.Contains(msg, "numeric(12,2)") || !strings.Contains(msg, "NaN is not representable") {
			t.Errorf("dead letter of id %s: error %q does not name the column, its type and the reason", id, msg)
		}
		if raw["np"] != "NaN" {
			t.Errorf("dead letter of id %s: raw np = %v, want the source text NaN", id, raw["np"])
		}
		if lsn, _ := row[bronze.ColLSN].(int64); lsn <= 0 {
			t.Errorf("dead letter of id %s: no position (cdc_source_lsn %v)", id, row[bronze.ColLSN])
		}
	}
	want := map[string]string{"1": "r", "101": "c", "2": "u"}
	for id, op := range want {
		if seen[id] != op {
			t.Errorf("dead letter of id %s: op %q, want %q (dead letters: %v)", id, seen[id], op, seen)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("dead letters for ids %v, want %v", seen, want)
	}
}
