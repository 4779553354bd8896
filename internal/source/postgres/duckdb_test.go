package postgres_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestDuckDBAndPyIcebergReadSpecialValues checks the special values of
// docs/type-mapping.md through two third-party readers of the bronze table
// tidemark wrote: DuckDB (iceberg extension) reads ±infinity dates and
// timestamps as its own ±infinity and can fetch every such row; PyIceberg
// reads the same rows with the documented sentinels.
func TestDuckDBAndPyIcebergReadSpecialValues(t *testing.T) {
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		if os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") == "1" {
			t.Fatal("TIDEMARK_PYTHON is not set but TIDEMARK_REQUIRE_PYICEBERG=1: run scripts/setup-test-env.sh")
		}
		t.Skip("TIDEMARK_PYTHON not set: set it to a python with pyiceberg and duckdb (scripts/setup-test-env.sh)")
	}
	if err := exec.Command(py, "-c", "import duckdb, duckdb_ext").Run(); err != nil {
		if os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") == "1" {
			t.Fatalf("%s cannot import duckdb and duckdb_ext (%v): run scripts/setup-test-env.sh", py, err)
		}
		t.Skipf("%s has no duckdb / duckdb-ext-iceberg: run scripts/setup-test-env.sh", py)
	}
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `
		CREATE TABLE specials (id int PRIMARY KEY, d date, ts timestamp, tstz timestamptz, n numeric, f float8, tm time);
		INSERT INTO specials VALUES
			(1, '-infinity', '-infinity', '-infinity', 'NaN', 'NaN', '00:00'),
			(2, 'infinity', 'infinity', 'infinity', 'Infinity', 'Infinity', '23:59:59.999999'),
			(3, '2024-02-29', '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.123456+00', '-Infinity', '-Infinity', '12:00:00.5'),
			(4, NULL, NULL, NULL, '12345678901234567890.123456789', '-0', NULL);`)
	r := h.start(h.opts())
	// The same values streamed, not only snapshot.
	h.exec(`INSERT INTO specials SELECT id + 10, d, ts, tstz, n, f, tm FROM specials;`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(script string) []byte {
		t.Helper()
		cmd := exec.Command(py, filepath.Join(root, "scripts", script), "--warehouse", h.wh, "bronze.src.public.specials")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, stderr.String())
		}
		return out
	}

	var duck struct {
		Rows         []map[string]*string `json:"rows"`
		NativeErrors map[string]string    `json:"native_errors"`
	}
	if err := json.Unmarshal(read("duckdb_read.py"), &duck); err != nil {
		t.Fatal(err)
	}
	// DuckDB's own text of each value.
	want := map[string]map[string]string{
		"1": {"d": "-infinity", "ts": "-infinity", "tstz": "-infinity", "n": "NaN", "f": "nan", "tm": "00:00:00"},
		"2": {"d": "infinity", "ts": "infinity", "tstz": "infinity", "n": "Infinity", "f": "inf", "tm": "23:59:59.999999"},
		"3": {"d": "2024-02-29", "ts": "2024-02-29 12:34:56.123456", "tstz": "2024-02-29 12:34:56.123456+00", "n": "-Infinity", "f": "-inf", "tm": "12:00:00.5"},
		"4": {"n": "12345678901234567890.123456789", "f": "-0.0"},
	}
	checkRows(t, "DuckDB", duck.Rows, want)
	if len(duck.NativeErrors) > 0 {
		t.Errorf("DuckDB cannot fetch some columns as Python values: %v", duck.NativeErrors)
	}

	var pyi struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(read("pyiceberg_read.py"), &pyi); err != nil {
		t.Fatal(err)
	}
	rows := make([]map[string]*string, len(pyi.Rows))
	for i, r := range pyi.Rows {
		rows[i] = map[string]*string{}
		for k, v := range r {
			if v != nil {
				s, _ := json.Marshal(v)
				var str string
				if json.Unmarshal(s, &str) != nil {
					str = string(s)
				}
				rows[i][k] = &str
			}
		}
	}
	checkRows(t, "PyIceberg", rows, map[string]map[string]string{
		"1": {"d": "-infinity", "ts": "-infinity", "tstz": "-infinity", "n": "NaN", "f": "NaN", "tm": "00:00:00.000000"},
		"2": {"d": "infinity", "ts": "infinity", "tstz": "infinity", "n": "Infinity", "f": "Infinity", "tm": "23:59:59.999999"},
		"3": {"d": "2024-02-29", "ts": "2024-02-29T12:34:56.123456", "tstz": "2024-02-29T12:34:56.123456+00:00", "n": "-Infinity", "f": "-Infinity", "tm": "12:00:00.500000"},
		"4": {"n": "12345678901234567890.123456789", "f": "-0"},
	})
}

// checkRows compares the rows read (snapshot rows id, streamed rows id+10)
// with want by id; columns want does not name must be NULL.
func checkRows(t *testing.T, reader string, rows []map[string]*string, want map[string]map[string]string) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rows {
		if r["id"] == nil {
			t.Fatalf("%s: a row without id: %v", reader, r)
		}
		id := *r["id"]
		base := id
		if len(id) == 2 && id[0] == '1' {
			base = id[1:]
		}
		w, ok := want[base]
		if !ok {
			t.Errorf("%s: unexpected row id %s", reader, id)
			continue
		}
		seen[base]++
		for _, c := range []string{"d", "ts", "tstz", "n", "f", "tm"} {
			got := "NULL"
			if r[c] != nil {
				got = *r[c]
			}
			exp, ok := w[c]
			if !ok {
				exp = "NULL"
			}
			if got != exp {
				t.Errorf("%s: row %s column %s = %q, want %q", reader, id, c, got, exp)
			}
		}
	}
	for id := range want {
		if seen[id] != 2 {
			t.Errorf("%s: %d rows for id %s (snapshot and streamed), want 2", reader, seen[id], id)
		}
	}
}
