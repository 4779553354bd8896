//go:build interop

package app_test

// The Spark interop test (issue 12): Apache Spark SQL, through Iceberg's
// Spark runtime and JdbcCatalog on tidemark's SQLite catalog, reads every
// silver table of a whole-schema lake equal to the source. Heavy (a JVM,
// ~350 MB of pyspark and jars), so behind the interop build tag: `make
// interop` sets it up (scripts/setup-interop-env.sh) and runs it; `make
// test` does not.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// sparkTable is what scripts/spark_read.py prints for one table.
type sparkTable struct {
	Ident        []string          `json:"ident"`
	Error        string            `json:"error"`
	Types        map[string]string `json:"types"`
	Rows         []map[string]any  `json:"rows"`
	Text         []map[string]any  `json:"text"`
	NativeErrors map[string]string `json:"native_errors"`
}

// sparkRead reads the tables with Spark SQL (scripts/spark_read.py, one
// Spark session for all), in the order given.
func sparkRead(t *testing.T, wh string, idents ...[]string) []sparkTable {
	t.Helper()
	py, jars := os.Getenv("TIDEMARK_PYTHON"), os.Getenv("TIDEMARK_SPARK_JARS")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{filepath.Join(root, "scripts", "spark_read.py"), "--warehouse", wh, "--jars", jars}
	for _, id := range idents {
		b, _ := json.Marshal(id)
		args = append(args, "--ident-json", string(b))
	}
	began := time.Now()
	cmd := exec.Command(py, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Spark reading %q: %v\n%s\n%s", idents, err, out, stderr.String())
	}
	var res []sparkTable
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 256<<20)
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		var st sparkTable
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("Spark output: %v\n%s", err, sc.Bytes())
		}
		res = append(res, st)
	}
	if len(res) != len(idents) {
		t.Fatalf("Spark printed %d tables for %d asked:\n%s\n%s", len(res), len(idents), out, stderr.String())
	}
	t.Logf("Spark read %d tables in %s", len(idents), time.Since(began).Round(time.Millisecond))
	return res
}

// timeAsText is wholeCols as `time_as: text` lands them: time columns as
// strings holding the source's text.
func timeAsText(cols []wholeCol) []wholeCol {
	out := slices.Clone(cols)
	for i, c := range out {
		switch c.Kind {
		case "time":
			out[i].Kind, out[i].Lake = "text", "string"
		case "list:time":
			out[i].Kind, out[i].Lake = "list:text", "list<string>"
		}
	}
	return out
}

// TestInteropSpark (issue 12, `make interop`): Spark 3.5 with Iceberg's
// Spark runtime reads what tidemark writes.
//
//  1. A whole schema (a column of every type of docs/type-mapping.md, the
//     edge rows of TestWholeSchema: ±infinity dates and timestamps, BC and
//     beyond-9999 values, NaN, -0, …, from the snapshot and the stream),
//     an odd table name and a second schema, run with --time-as text: Spark
//     reads every silver table, each row equal to the source through the
//     canonical form the PyIceberg comparison uses, and Spark's own text of
//     the special values is the one docs/type-mapping.md documents.
//  2. A table with a time column under the default time_as: time: Spark
//     refuses the whole table, as docs/type-mapping.md says, and reads the
//     lake's other tables.
//  3. Under time_as: micros the time columns read in Spark as bigint
//     microseconds since midnight (24:00:00 as 86400000000).
func TestInteropSpark(t *testing.T) {
	if os.Getenv("TIDEMARK_PYTHON") == "" || os.Getenv("TIDEMARK_SPARK_JARS") == "" {
		t.Fatal("TIDEMARK_PYTHON (a venv with pyspark) and TIDEMARK_SPARK_JARS (the Iceberg Spark runtime and sqlite-jdbc) are not set: run `make interop`")
	}
	began := time.Now()
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)

	t.Run("time_as_text", func(t *testing.T) {
		srcURL := pg.CreateDB(t, "interop_spark")
		source := sourceName(t, srcURL)
		pg.Exec(t, srcURL, wholeDDL())
		pg.Exec(t, srcURL, wholeRows(1_000_000)) // read by the initial snapshot
		matrixTable(t, pg, srcURL, `"with space"`, "", "")
		pg.Exec(t, srcURL, `CREATE SCHEMA sales;
			CREATE TABLE sales.orders (id bigint PRIMARY KEY, version int NOT NULL, payload text, placed date);
			INSERT INTO sales.orders SELECT g, 1, md5(g::text), date '2024-01-01' + g FROM generate_series(1, 200) g;`)
		public := func(name string) change.TableID { return change.TableID{Schema: "public", Name: name} }
		captured := []oddTable{
			{public("whole_types"), []string{"id"}},
			{public("with space"), []string{"id"}},
			{change.TableID{Schema: "sales", Name: "orders"}, []string{"id"}},
		}
		r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms", "--time-as", "text")
		lk := openLake(t, wh, source)
		s := r.Start()
		lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 3*time.Minute, captured)
		// Streamed: the edge values again, and changes.
		pg.Exec(t, srcURL, wholeRows(2_000_000))
		pg.Exec(t, srcURL, `
			UPDATE whole_types SET c_text = 'changed', c_int4_arr = '{}', c_jsonb = '{"k": [1, null]}' WHERE id = 1000001;
			UPDATE whole_types SET c_real = 'NaN', c_date = 'infinity', c_numeric = 'Infinity' WHERE id = 2000001;
			UPDATE whole_types SET version = 2, c_time = '24:00:00', c_time_arr = '{24:00:00,NULL}' WHERE id <= 10;
			DELETE FROM whole_types WHERE id = 1000005;
			UPDATE "with space" SET version = 2, payload = NULL WHERE id % 3 = 0;
			DELETE FROM "with space" WHERE id % 7 = 0;
			INSERT INTO sales.orders SELECT g, 1, 'new', date '2025-01-01' + g FROM generate_series(201, 260) g;
			UPDATE sales.orders SET version = version + 1, placed = NULL WHERE id % 5 = 0;`)
		lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 3*time.Minute, captured)
		lk.waitSilverPublished(s, source, captured)
		if code := s.Stop(t, time.Minute); code != 0 {
			t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
		}
		lk.close()
		if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
			t.Fatalf("tidemark merge: %v\n%s", err, out)
		}
		t.Logf("lake written in %s", time.Since(began).Round(time.Millisecond))

		var idents [][]string
		colsOf := map[string][]wholeCol{}
		for _, tb := range captured {
			ident := silver.Ident(source, tb.id.Schema, tb.id.Name)
			idents = append(idents, ident)
			cols := matrixCols
			switch tb.id.Name {
			case "whole_types":
				cols = append(slices.Clip(matrixCols), timeAsText(wholeCols)...)
			case "orders":
				cols = append(slices.Clip(matrixCols), wholeCol{Name: "placed", Type: "date", Kind: "date", Lake: "date"})
			}
			colsOf[strings.Join(ident, ".")] = cols
		}
		// Spark must apply silver's merge-on-read position deletes
		// (docs/silver.md): the streamed updates and deletes leave some.
		deletes := 0
		lk = openLake(t, wh, source)
		for _, ident := range idents {
			tbl, err := lk.cat.LoadTable(context.Background(), ident)
			if err != nil {
				t.Fatalf("load %q: %v", ident, err)
			}
			if snap, ok := tbl.CurrentSnapshot(); ok {
				n, _ := strconv.Atoi(snap.Props["total-position-deletes"])
				t.Logf("silver %s: %d position deletes, %s data files", ident[len(ident)-1], n, snap.Props["total-data-files"])
				deletes += n
			}
		}
		lk.close()
		if deletes == 0 {
			t.Errorf("no silver table holds a position delete when Spark reads: the test does not check that Spark applies them")
		}

		read := sparkRead(t, wh, idents...)
		for i, tb := range captured {
			st, ident := read[i], strings.Join(idents[i], ".")
			if st.Error != "" {
				t.Errorf("Spark cannot read silver %s: %s", tb.id, st.Error)
				continue
			}
			cols := colsOf[ident]
			want := wholeSource(t, srcURL, tb.id, cols)
			// PyIceberg first: a mismatch both readers share is tidemark's,
			// one only Spark has is Spark's.
			if py := pyRead(t, wh, idents[i]); py != nil {
				compareWhole(t, "PyIceberg read of silver "+tb.id.String(), cols, want, wholeCanonPy(t, py, cols))
			}
			compareWhole(t, "Spark read of silver "+tb.id.String(), cols, want, wholeCanonPy(t, st.Rows, cols))
			if len(st.NativeErrors) > 0 {
				t.Logf("Spark: silver %s columns PySpark cannot collect as Python objects: %v", tb.id, st.NativeErrors)
			}
		}

		// Spark's types and its own text of the special values, as
		// docs/type-mapping.md ("How other readers see them") gives them.
		wt := read[0]
		wantTypes := map[string]string{
			"c_time": "string", "c_time3": "string", "c_time_arr": "array<string>",
			"c_date": "date", "c_timestamp": "timestamp_ntz", "c_timestamptz": "timestamp",
			"c_numeric_38_10": "decimal(38,10)", "c_bytea": "binary", "c_real": "float",
			"c_date_arr": "array<date>", "c_timestamptz_arr": "array<timestamp>",
		}
		for c, w := range wantTypes {
			if wt.Types[c] != w {
				t.Errorf("Spark reads silver whole_types column %s as %q, want %q", c, wt.Types[c], w)
			}
		}
		text := map[string]map[string]any{}
		for _, row := range wt.Text {
			text[canonText(row["id"]).(string)] = row
		}
		for _, base := range []string{"1000", "2000"} {
			for _, c := range []struct{ id, col, want string }{
				{base + "002", "c_date", sparkNegInfDate},       // -infinity
				{base + "002", "c_timestamptz0", sparkNegInfTS}, // -infinity
				{base + "003", "c_date", sparkInfDate},          // infinity
				{base + "003", "c_timestamp", sparkNegInfTS},    // -infinity
				{base + "003", "c_timestamptz", sparkInfTS},     // infinity
				{base + "004", "c_timestamp3", sparkNegInfTS},   // -infinity
			} {
				got, _ := text[c.id][c.col].(string)
				t.Logf("Spark: CAST(%s AS STRING) of id %s is %q", c.col, c.id, got)
				if got != c.want {
					t.Errorf("Spark's text of %s id %s is %q, docs/type-mapping.md says %q", c.col, c.id, got, c.want)
				}
			}
		}
		// Spark SQL reads them; PySpark's collect(), which turns each into
		// a Python date / datetime, cannot (nor can it a year outside 1 to
		// 9999: BC and beyond-9999 values fail the same way), as
		// docs/type-mapping.md says.
		for _, c := range []string{"c_date", "c_timestamp", "c_timestamp3", "c_timestamptz", "c_timestamptz0", "c_date_arr", "c_timestamp_arr", "c_timestamptz_arr"} {
			if e := wt.NativeErrors[c]; !strings.Contains(e, "Error") {
				t.Errorf("PySpark collect() of whole_types column %s: error %q, docs/type-mapping.md says it fails (a value outside Python's datetime)", c, e)
			}
		}
	})

	t.Run("time_as_time", func(t *testing.T) {
		srcURL := pg.CreateDB(t, "interop_spark_time")
		source := sourceName(t, srcURL)
		pg.Exec(t, srcURL, `CREATE TABLE clock (id bigint PRIMARY KEY, version int NOT NULL, payload text, t time);
			INSERT INTO clock SELECT g, 1, md5(g::text), time '03:04:05.5' + g * interval '1 s' FROM generate_series(1, 50) g;
			CREATE TABLE plain (id bigint PRIMARY KEY, version int NOT NULL, payload text);
			INSERT INTO plain SELECT g, 1, md5(g::text) FROM generate_series(1, 50) g;`)
		captured := []oddTable{
			{change.TableID{Schema: "public", Name: "clock"}, []string{"id"}},
			{change.TableID{Schema: "public", Name: "plain"}, []string{"id"}},
		}
		r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms") // time_as: time, the default
		lk := openLake(t, wh, source)
		s := r.Start()
		lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, captured)
		lk.waitSilverPublished(s, source, captured)
		if code := s.Stop(t, time.Minute); code != 0 {
			t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
		}
		lk.close()
		if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
			t.Fatalf("tidemark merge: %v\n%s", err, out)
		}
		clock, plain := silver.Ident(source, "public", "clock"), silver.Ident(source, "public", "plain")
		read := sparkRead(t, wh, clock, plain)
		t.Logf("Spark reading silver clock (a time column, time_as: time): %q", read[0].Error)
		if !strings.Contains(read[0].Error, sparkTimeError) {
			t.Errorf("Spark read silver clock, which has an Iceberg time column: error %q, docs/type-mapping.md says Spark refuses the table with %q (rows: %d)",
				read[0].Error, sparkTimeError, len(read[0].Rows))
		}
		if read[1].Error != "" {
			t.Errorf("Spark cannot read silver plain of the same lake: %s", read[1].Error)
		} else {
			want := wholeSource(t, srcURL, captured[1].id, matrixCols)
			compareWhole(t, "Spark read of silver plain", matrixCols, want, wholeCanonPy(t, read[1].Rows, matrixCols))
		}
	})
	t.Run("time_as_micros", func(t *testing.T) {
		srcURL := pg.CreateDB(t, "interop_spark_micros")
		source := sourceName(t, srcURL)
		pg.Exec(t, srcURL, `CREATE TABLE clock (id bigint PRIMARY KEY, t time, t3 time(3), ta time[]);
			INSERT INTO clock VALUES (1, '24:00:00', '12:00:00.5', '{00:00:00,24:00:00,NULL}'), (2, '23:59:59.999999', NULL, '{}'),
				(3, NULL, '00:00:00.001', NULL), (4, '03:04:05.5', '23:59:59.999', '{12:34:56.789}');`)
		captured := []oddTable{{change.TableID{Schema: "public", Name: "clock"}, []string{"id"}}}
		r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms", "--time-as", "micros")
		lk := openLake(t, wh, source)
		s := r.Start()
		lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, captured)
		lk.waitSilverPublished(s, source, captured)
		if code := s.Stop(t, time.Minute); code != 0 {
			t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
		}
		lk.close()
		read := sparkRead(t, wh, silver.Ident(source, "public", "clock"))[0]
		if read.Error != "" {
			t.Fatalf("Spark cannot read silver clock under time_as: micros: %s", read.Error)
		}
		for c, w := range map[string]string{"t": "bigint", "t3": "bigint", "ta": "array<bigint>"} {
			if read.Types[c] != w {
				t.Errorf("Spark reads silver clock column %s under time_as: micros as %q, want %q", c, read.Types[c], w)
			}
		}
		got := map[string]string{}
		for _, row := range read.Rows {
			js, _ := json.Marshal([]any{row["t"], row["t3"], row["ta"]})
			got[canonText(row["id"]).(string)] = string(js)
		}
		want := map[string]string{
			"1": `[86400000000,43200500000,[0,86400000000,null]]`,
			"2": `[86399999999,null,[]]`,
			"3": `[null,1000,null]`,
			"4": `[11045500000,86399999000,[45296789000]]`,
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Spark reads silver clock (id: [t, t3, ta]) under time_as: micros\n%v\nwant (µs since midnight)\n%v", got, want)
		}
	})
	t.Logf("total %s", time.Since(began).Round(time.Millisecond))
}

// What Spark 3.5.7 with Iceberg 1.10.0 says, as docs/type-mapping.md
// documents it: the infinity sentinels (±(2^31-1) days, ±(2^63-1) µs) are
// ordinary values to Spark, far outside years 1 to 9999, which it prints
// in the proleptic Gregorian calendar with a sign.
const (
	sparkTimeError  = "Spark does not support time fields"
	sparkInfDate    = "+5881580-07-11"
	sparkNegInfDate = "-5877641-06-24"
	sparkInfTS      = "+294247-01-10 04:00:54.775807"
	sparkNegInfTS   = "-290308-12-21 19:59:05.224193"
)
