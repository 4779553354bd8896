package app_test

// The "whole schema" test of issue 12: one database holding what a real
// schema holds at once — a column of every type docs/type-mapping.md maps,
// tables without a primary key, odd names, a partitioned table and a second
// schema — captured by a FOR ALL TABLES publication (the one tidemark
// creates) under concurrent writes.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap/typemaptest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// The every-type table (whole_types) is typemaptest's: its columns, its
// edge rows and the canonical forms values are compared in.
type wholeCol = typemaptest.Column

var (
	wholeCols    = typemaptest.Columns
	wholeRows    = typemaptest.Rows
	wholeSource  = typemaptest.ReadSource
	wholeCanonPy = typemaptest.ReadLake
	canonPy      = typemaptest.CanonPy
	canonLake    = typemaptest.CanonLake
	canonText    = typemaptest.CanonText
	// matrixCols are the columns of the tables matrixTable creates (and of
	// the other tables the matrix workload writes): whole_types' first ones.
	matrixCols = typemaptest.BaseColumns
)

func wholeDDL() string {
	return typemaptest.CreateTypes + ";\n" + typemaptest.CreateTable() + `;
		INSERT INTO whole_types (id, version, payload, c_integer, c_numeric_12_2, c_text, c_timestamptz, c_date, c_int4_arr, c_mood)
			SELECT g, 1, md5(g::text), g, g * 1.25, 'row ' || g, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 minute 0.5 s',
				date '2024-01-01' + g, ARRAY[g, NULL, -g], (ARRAY['happy', 'sad', 'so so'])[1 + g % 3]::mood
			FROM generate_series(1, ` + strconv.Itoa(matrixRows) + `) g;`
}

// TestWholeSchema (issue 12): a FOR ALL TABLES publication over a schema
// with keyless tables, odd names, a partitioned table, a second schema and
// every type of docs/type-mapping.md, under concurrent inserts, updates and
// deletes. The run starts; every table that can be captured reaches silver,
// `tidemark verify` is equal and PyIceberg reads silver equal to the source;
// the partitioned table is one table named after its root; `status` names
// every table left out with its reason.
func TestWholeSchema(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "whole_schema")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, wholeDDL())
	pg.Exec(t, srcURL, wholeRows(1_000_000)) // read by the initial snapshot
	// Odd names the lake holds exactly.
	for _, name := range []string{`"MixedCase"`, `"café"`, `"with space"`} {
		matrixTable(t, pg, srcURL, name, "", "")
	}
	pg.Exec(t, srcURL, fmt.Sprintf(`
		-- keyed on the whole row: REPLICA IDENTITY FULL, every column NOT NULL
		CREATE TABLE keyed_full (id bigint NOT NULL, version int NOT NULL, payload text NOT NULL);
		ALTER TABLE keyed_full REPLICA IDENTITY FULL;
		INSERT INTO keyed_full SELECT g, 1, md5(g::text) FROM generate_series(1, %[1]d) g;
		-- one table in the lake, named after the root
		CREATE TABLE payments (id bigint PRIMARY KEY, version int NOT NULL, payload text) PARTITION BY HASH (id);
		CREATE TABLE payments_p0 PARTITION OF payments FOR VALUES WITH (MODULUS 3, REMAINDER 0);
		CREATE TABLE payments_p1 PARTITION OF payments FOR VALUES WITH (MODULUS 3, REMAINDER 1);
		CREATE TABLE payments_p2 PARTITION OF payments FOR VALUES WITH (MODULUS 3, REMAINDER 2);
		INSERT INTO payments SELECT g, 1, md5(g::text) FROM generate_series(1, %[1]d) g;
		-- a second schema
		CREATE SCHEMA sales;
		CREATE TABLE sales.orders (id bigint PRIMARY KEY, version int NOT NULL, payload text, placed date);
		INSERT INTO sales.orders SELECT g, 1, md5(g::text), date '2024-01-01' + g FROM generate_series(1, 200) g;
		-- no key: no primary key and the default replica identity (inserts
		-- only: PostgreSQL refuses updates of such a published table), and
		-- REPLICA IDENTITY FULL with a nullable column
		CREATE TABLE log_plain (at timestamptz NOT NULL DEFAULT now(), msg text);
		INSERT INTO log_plain (msg) SELECT 'm' || g FROM generate_series(1, 20) g;
		CREATE TABLE log_nullable (a int NOT NULL, b text);
		ALTER TABLE log_nullable REPLICA IDENTITY FULL;
		INSERT INTO log_nullable SELECT g, NULL FROM generate_series(1, 20) g;
		-- names the lake cannot hold exactly
		CREATE TABLE "a.b" (id int PRIMARY KEY, v text);
		CREATE TABLE "a/b" (id int PRIMARY KEY, v text);
		INSERT INTO "a.b" SELECT g, 'v' FROM generate_series(1, 20) g;
		INSERT INTO "a/b" SELECT g, 'v' FROM generate_series(1, 20) g;`, matrixRows))

	public := func(name string) change.TableID { return change.TableID{Schema: "public", Name: name} }
	captured := []oddTable{
		{public("whole_types"), []string{"id"}},
		{public("keyed_full"), []string{"id", "version", "payload"}},
		{public("MixedCase"), []string{"id"}},
		{public("café"), []string{"id"}},
		{public("with space"), []string{"id"}},
		{public("payments"), []string{"id"}},
		{change.TableID{Schema: "sales", Name: "orders"}, []string{"id"}},
	}
	notCaptured := []struct {
		id     change.TableID
		shown  string // as status prints it
		reason string
	}{
		{public("log_plain"), "public.log_plain", "[no_primary_key]"},
		{public("log_nullable"), "public.log_nullable", "[no_primary_key]"},
		{public("a.b"), `public."a.b"`, "[unsupported_name]"},
		{public("a/b"), `public."a/b"`, "[unsupported_name]"},
	}

	// No --publication: tidemark creates its FOR ALL TABLES publication
	// (publish_via_partition_root) itself, as for a new user.
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms")
	lk := openLake(t, wh, source)
	began := time.Now()
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, captured) // fails if the run exits (a refused start is exit 2)
	t.Logf("snapshots done in %s", time.Since(began).Round(time.Millisecond))

	// Streamed: the edge values again, concurrent writes on the keyed
	// tables, and changes to every other table.
	w := startMatrixWorkload(srcURL, []string{"whole_types", "keyed_full", "MixedCase", "café", "with space", "payments"})
	pg.Exec(t, srcURL, wholeRows(2_000_000))
	pg.Exec(t, srcURL, `
		UPDATE whole_types SET c_text = 'changed', c_int4_arr = '{}', c_jsonb = '{"k": [1, null]}' WHERE id = 1000001;
		UPDATE whole_types SET c_real = 'NaN', c_date = 'infinity', c_numeric = 'Infinity' WHERE id = 2000001;
		DELETE FROM whole_types WHERE id = 1000005;
		INSERT INTO sales.orders SELECT g, 1, 'new', date '2025-01-01' + g FROM generate_series(201, 260) g;
		UPDATE sales.orders SET version = version + 1, placed = NULL WHERE id % 5 = 0;
		DELETE FROM sales.orders WHERE id % 7 = 0;
		INSERT INTO log_plain (msg) SELECT 'streamed ' || g FROM generate_series(1, 20) g;
		INSERT INTO log_nullable SELECT g, 'x' FROM generate_series(21, 40) g;
		UPDATE log_nullable SET b = 'updated' WHERE a <= 5;
		DELETE FROM log_nullable WHERE a = 6;
		UPDATE "a.b" SET v = 'changed' WHERE id <= 5;
		DELETE FROM "a/b" WHERE id <= 5;`)
	time.Sleep(4 * time.Second)
	w.stop(t)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, captured)

	// Every table that can be captured reaches silver.
	lk.waitSilverPublished(s, source, captured)
	t.Logf("silver published for every captured table %s after the start", time.Since(began).Round(time.Millisecond))
	// The lake holds exactly those tables in silver: none for a table left
	// out, one for the partitioned table (no leaf). (Bronze of a keyless
	// table is not asserted on: whether it is captured into bronze only is
	// the documented rule's business, docs/bronze.md.)
	silverTables := map[string][]string{}
	for _, ns := range []string{"public", "sales"} {
		idents, err := lk.cat.ListTables(context.Background(), []string{"silver", source, ns})
		if err != nil {
			t.Fatalf("list silver.%s.%s: %v", source, ns, err)
		}
		for _, id := range idents {
			silverTables[ns] = append(silverTables[ns], id[len(id)-1])
		}
		slices.Sort(silverTables[ns])
	}
	if got, want := silverTables["public"], []string{"MixedCase", "café", "keyed_full", "payments", "whole_types", "with space"}; !slices.Equal(got, want) {
		t.Errorf("silver.%s.public holds %q, want %q", source, got, want)
	}
	if got := silverTables["sales"]; !slices.Equal(got, []string{"orders"}) {
		t.Errorf("silver.%s.sales holds %q, want [orders]", source, got)
	}
	// Each column has the lake type docs/type-mapping.md gives its type.
	if tbl, err := lk.cat.LoadTable(context.Background(), silver.Ident(source, "public", "whole_types")); err != nil {
		t.Errorf("load silver whole_types: %v", err)
	} else {
		for _, c := range append(slices.Clip(matrixCols), wholeCols...) {
			if f, ok := tbl.Schema().FindFieldByName(c.Name); !ok {
				t.Errorf("silver whole_types has no column %s", c.Name)
			} else if got := f.Type.String(); got != c.Lake {
				t.Errorf("silver whole_types column %s (%s) is %s, docs/type-mapping.md says %s", c.Name, c.Type, got, c.Lake)
			}
		}
	}
	for _, nc := range notCaptured[:2] {
		if _, err := lk.cat.LoadTable(context.Background(), silver.Ident(source, nc.id.Schema, nc.id.Name)); err == nil {
			t.Errorf("silver %s exists for a table with no usable key", nc.id)
		}
	}
	bronzePublic, err := lk.cat.ListTables(context.Background(), bronze.Ident(source, public("x"))[:3])
	if err != nil {
		t.Fatalf("list bronze tables: %v", err)
	}
	for _, id := range bronzePublic {
		if strings.HasPrefix(id[len(id)-1], "payments_") {
			t.Errorf("bronze holds a table %q for a leaf partition of payments", strings.Join(id, "."))
		}
	}

	// status names each table left out, with its reason, and shows silver
	// published for each captured one.
	out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	t.Logf("tidemark status:\n%s", out)
	for _, nc := range notCaptured {
		found := false
		for _, l := range strings.Split(string(out), "\n") {
			found = found || strings.Contains(l, nc.shown) && strings.Contains(l, nc.reason)
		}
		if !found {
			t.Errorf("tidemark status has no line naming %s with %s", nc.shown, nc.reason)
		}
	}
	for _, tb := range captured {
		for _, l := range strings.Split(string(out), "\n") {
			if (strings.Contains(l, "[no_primary_key]") || strings.Contains(l, "[unsupported_name]")) && strings.Contains(l, tb.id.Name) {
				t.Errorf("tidemark status says a captured table is left out: %s", l)
			}
		}
	}
	out, err = exec.Command(bin, "status", "--warehouse", wh, "--format", "json").Output()
	var rows []map[string]any
	if err != nil || json.Unmarshal(out, &rows) != nil {
		t.Fatalf("tidemark status --format json: %v\n%s", err, out)
	}
	for _, nc := range notCaptured {
		found := false
		for _, row := range rows {
			if name, _ := row["table"].(string); !strings.Contains(name, nc.shown) {
				continue
			}
			for _, v := range row {
				if s, ok := v.(string); ok && strings.Contains(s, nc.reason) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("tidemark status --format json has no row for %s with %s:\n%s", nc.shown, nc.reason, out)
		}
	}
	for _, tb := range captured {
		name := strings.Join(bronze.Ident(source, tb.id), ".")
		i := slices.IndexFunc(rows, func(r map[string]any) bool { return r["table"] == name })
		if i < 0 {
			t.Errorf("tidemark status --format json has no row %q", name)
		} else if rows[i]["silver_published"] != true {
			t.Errorf("tidemark status --format json: %s has silver_published %v, silver %v", name, rows[i]["silver_published"], rows[i]["silver"])
		}
	}

	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	// verify is equal for every captured table, and PyIceberg reads each
	// silver table equal to the source, value for value.
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	out = runVerify(t, r, bin, srcURL, wh, source)
	for _, tb := range captured {
		line := lineWith(string(out), strings.Join(silver.Ident(source, tb.id.Schema, tb.id.Name), ".")+" ")
		if line == "" {
			t.Errorf("tidemark verify does not report %s:\n%s", tb.id, out)
			continue
		}
		// Its chunk hashes, computed in SQL at the source, agree with
		// silver's for every type (docs/verify.md, Pushdown): a chunk
		// drilled into for equal rows means the SQL form of some value
		// is wrong.
		if f := strings.Fields(line); f[len(f)-4] != "0" {
			t.Errorf("tidemark verify drilled into %s chunks of %s whose rows are equal: %s", f[len(f)-4], tb.id, line)
		}
	}
	for _, tb := range captured {
		cols := matrixCols
		switch tb.id.Name {
		case "whole_types":
			cols = append(slices.Clip(matrixCols), wholeCols...)
		case "orders":
			cols = append(slices.Clip(matrixCols), wholeCol{Name: "placed", Type: "date", Kind: "date", Lake: "date"})
		}
		want := wholeSource(t, srcURL, tb.id, cols)
		got := pyRead(t, wh, silver.Ident(source, tb.id.Schema, tb.id.Name))
		if got == nil {
			t.Log("TIDEMARK_PYTHON is not set: silver not read with PyIceberg")
			break
		}
		compareWhole(t, "PyIceberg read of silver "+tb.id.String(), cols, want, wholeCanonPy(t, got, cols))
	}
	t.Logf("total %s", time.Since(began).Round(time.Millisecond))
}

// compareWhole requires got to hold exactly want's ids with want's values
// in every column (cols: both are read with them).
func compareWhole(t *testing.T, what string, cols []wholeCol, want, got map[string]map[string]string) {
	t.Helper()
	testenv.CompareRows(t, what, want, got)
}
