package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/gold"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestE2EDelta (issue 15): a pipeline with lake.format: delta. The initial
// snapshot and streamed inserts, updates (of a key too), deletes and an
// added column (with a default) land in
// bronze and silver as Delta tables: bronze with the change data feed on,
// silver merged with deletion vectors (merge-on-read) or by rewriting files
// (copy-on-write); silver equals the source row by row, read by tidemark's
// reader and by delta-rs; the pipeline stops cleanly.
func TestE2EDelta(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"merge-on-read", "copy-on-write"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // its own database, warehouse and tidemark process
			testE2EDelta(t, mode)
		})
	}
}

func testE2EDelta(t *testing.T, mode string) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "delta")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE public.orders (id bigint PRIMARY KEY, customer text, amount numeric(12,2),
			placed timestamptz, due date, tags text[], note text, at time);
		CREATE TABLE public.items (sku text PRIMARY KEY, qty int, price double precision);
		INSERT INTO public.orders SELECT g, 'c' || (g % 17), g * 1.25, timestamptz '2026-01-01 00:00:00+00' + g * interval '7 hours',
			date '2026-01-01' + g % 40, ARRAY['t' || g % 3, 'x'], CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || g END, time '08:00' + g * interval '1 minute'
			FROM generate_series(1, 400) g;
		INSERT INTO public.items SELECT 'sku-' || g, g, g / 3.0 FROM generate_series(1, 100) g;
		CREATE PUBLICATION everything FOR ALL TABLES;`)
	keys := map[string][]string{"orders": {"id"}, "items": {"sku"}}

	// A gold table over silver orders, a Delta table too.
	goldCfg := writeGoldConfig(t, t.TempDir(), "gold.yaml", "per_customer", deltaGoldSQL)
	r, wh := newRunner(t, bin, srcURL, "--publication", "everything", "--lake-format", "delta", "--silver-every", "300ms",
		"--silver-delete-mode", mode, "--config", goldCfg)
	s := r.Start()
	// The initial snapshot.
	waitSilverDelta(t, s, wh, source, srcURL, keys, 40*time.Second)
	// Streamed changes: inserts, updates, a key change, deletes, in
	// several transactions.
	pg.Exec(t, srcURL, `
		INSERT INTO public.orders SELECT g, 'new', g, now(), NULL, NULL, 'streamed', NULL FROM generate_series(401, 450) g;
		UPDATE public.orders SET amount = amount + 1, note = 'updated' WHERE id % 7 = 0;
		DELETE FROM public.orders WHERE id % 11 = 0;
		UPDATE public.orders SET id = id + 10000 WHERE id IN (1, 2, 3);
		UPDATE public.items SET qty = qty * 10 WHERE qty % 2 = 0;
		DELETE FROM public.items WHERE qty % 3 = 0;
		INSERT INTO public.items VALUES ('sku-new', 1, 0.5);`)
	// A crash while those are captured and merged: the next session
	// resumes from what the Delta commits recorded.
	time.Sleep(200 * time.Millisecond)
	s.Kill(t)
	pg.Exec(t, srcURL, `UPDATE public.orders SET tags = ARRAY['again'] WHERE id BETWEEN 100 AND 120;
		DELETE FROM public.items WHERE sku = 'sku-new';`)
	// A column added at the source, with a default its older rows take:
	// bronze and silver gain it, and silver gives the older rows the
	// default (the files written before it lack the column).
	pg.Exec(t, srcURL, `ALTER TABLE public.items ADD COLUMN note text DEFAULT 'none';
		INSERT INTO public.items VALUES ('sku-late', 5, 1.5, 'late');
		UPDATE public.items SET note = 'touched' WHERE sku = 'sku-4';`)
	s = r.Start()
	waitSilverDelta(t, s, wh, source, srcURL, keys, 40*time.Second)
	// tidemark verify compares silver with the source at a source
	// position, which the running pipeline carries silver to.
	if out, err := exec.Command(bin, r.As("verify", "--wait", "1m")...).CombinedOutput(); err != nil {
		t.Fatalf("tidemark verify: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "orders") {
		t.Errorf("tidemark verify does not report orders:\n%s", out)
	} else {
		t.Logf("tidemark verify:\n%s", strings.TrimSpace(string(out)))
	}
	// Gold catches up with silver: equal to the same query on PostgreSQL.
	wantGold := deltaGoldOnSource(t, srcURL)
	var gotGold map[string]string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		gotGold = deltaGold(t, wh, source)
		if d := diffGold(wantGold, gotGold); d == "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("gold.%s.per_customer (Delta) does not equal the query on PostgreSQL a minute after verify:\n%s", source, d)
		}
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// Bronze holds every change once, and replays to the source.
	for table, key := range keys {
		rows := readDelta(t, wh, "bronze", source, "public", table)
		cat, err := delta.OpenCatalog(wh)
		if err != nil {
			t.Fatal(err)
		}
		bt, err := cat.Open(context.Background(), []string{"bronze", source, "public", table})
		if err != nil {
			t.Fatal(err)
		}
		// Rows written before a column was added read its recorded default.
		bronzetest.ApplyTableDefaults(t, bt, rows)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s: duplicate changes: %q", table, d)
		}
		want := readSource(t, srcURL, table, key)
		for _, r := range want {
			for col, v := range r {
				r[col] = timeAsMicros(v)
			}
		}
		compareRows(t, "bronze "+table+" replayed", want, bronzetest.Replay(t, rows, key))
	}

	// The tables are Delta tables in the warehouse's directories; there is
	// no Iceberg catalog.
	if _, err := os.Stat(filepath.Join(wh, "catalog.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a Delta lake has a catalog.db (%v)", err)
	}
	bronzeDir := filepath.Join(wh, "bronze", source, "public", "orders")
	b, err := delta.Open(context.Background(), bronzeDir)
	if err != nil {
		t.Fatal(err)
	}
	if p := b.Properties(); p[delta.PropChangeDataFeed] != "true" || p[delta.PropAppendOnly] != "true" {
		t.Errorf("bronze orders' properties %v: want the change data feed on and append-only", p)
	}
	silverDir := filepath.Join(wh, "silver", source, "public", "orders")
	sv, err := delta.Open(context.Background(), silverDir)
	if err != nil {
		t.Fatal(err)
	}
	if dv := sv.Properties()[delta.PropDeletionVectors] == "true"; dv != (mode == "merge-on-read") {
		t.Errorf("silver orders' properties %v: a %s table with deletion vectors %v", sv.Properties(), mode, dv)
	}
	var removes int
	for _, e := range mustHistory(t, sv) {
		m, _ := e.Info["operationMetrics"].(map[string]any)
		if n, ok := m["numRemovedFiles"].(string); ok && n != "0" && e.Operation != "OPTIMIZE" {
			removes++
		}
	}
	if (removes > 0) != (mode == "copy-on-write") {
		t.Errorf("silver orders: %d merges removed files in %s mode", removes, mode)
	}
	// tidemark status and show read the Delta lake.
	out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "bronze."+source+".public.orders") {
		t.Errorf("tidemark status on a Delta lake: %v\n%s", err, out)
	} else {
		t.Logf("tidemark status:\n%s", strings.TrimSpace(string(out)))
		if l := lineWith(string(out), "gold."+source+".per_customer"); !strings.HasPrefix(strings.Fields(l + " x x")[1], "incremental") {
			t.Errorf("tidemark status does not show the Delta gold table refreshed incrementally:\n%s", out)
		}
	}
	out, err = exec.Command(bin, "show", "--warehouse", wh, "--limit", "3", "silver."+source+".public.items").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sku-") {
		t.Errorf("tidemark show on a Delta lake: %v\n%s", err, out)
	}
	// tidemark export reads bronze from the Delta lake: windowed files of
	// its rows, each line a bronze row.
	exDir := t.TempDir()
	out, err = exec.Command(bin, "export", "--warehouse", wh, "--to", exDir, "--window", "1s", "--tables", "public.items").CombinedOutput()
	if err != nil {
		t.Errorf("tidemark export on a Delta lake: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(exDir, "public.items", "*.jsonl"))
	exported := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var row map[string]any
			if err := json.Unmarshal([]byte(line), &row); err != nil || row["cdc_op"] == nil || row["sku"] == nil {
				t.Fatalf("export of a Delta lake, %s: a line that is not a bronze row of items (%v): %s", f, err, line)
			}
			exported++
		}
	}
	if n := len(readDelta(t, wh, "bronze", source, "public", "items")); exported == 0 || exported > n {
		t.Errorf("tidemark export of a Delta lake wrote %d rows of items in %d files, want 1 to %d (bronze's rows)", exported, len(files), n)
	}

	// delta-rs reads silver equal to the source.
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		if os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") != "" {
			t.Fatal("TIDEMARK_PYTHON is not set: delta-rs cannot read the tables")
		}
		t.Log("TIDEMARK_PYTHON not set: delta-rs does not read the tables")
		maintainDelta(t, bin, wh, source, srcURL, keys, "", "")
		return
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// delta-rs reads bronze's change feed: every bronze row once, as an
	// insert.
	var feed struct {
		CDF []map[string]any `json:"cdf"`
	}
	deltaRead(t, py, root, bronzeDir, &feed, "--cdf")
	if n := len(readDelta(t, wh, "bronze", source, "public", "orders")); len(feed.CDF) != n {
		t.Errorf("delta-rs load_cdf of bronze orders: %d rows, bronze holds %d", len(feed.CDF), n)
	}
	for _, r := range feed.CDF {
		if r["_change_type"] != "insert" {
			t.Fatalf("delta-rs load_cdf of bronze orders: a row %v, want inserts only", r)
		}
	}
	// delta-rs reads gold equal to the source's answer.
	var goldRes struct {
		Rows []map[string]any `json:"rows"`
	}
	deltaRead(t, py, root, filepath.Join(wh, "gold", source, "per_customer"), &goldRes, "--query")
	byRS := map[string]string{}
	for _, row := range goldRes.Rows {
		byRS[fmt.Sprint(row["customer"])] = fmt.Sprintf("%v %v", row["orders"], row["total"])
	}
	if d := diffGold(wantGold, byRS); d != "" {
		t.Errorf("delta-rs reads gold.%s.per_customer different from the query on PostgreSQL:\n%s", source, d)
	}
	for table, key := range keys {
		var res struct {
			Rows []map[string]any `json:"rows"`
			CDF  []map[string]any `json:"cdf"`
		}
		deltaRead(t, py, root, filepath.Join(wh, "silver", source, "public", table), &res, "--query", "--cdf")
		// Silver's own change feed, replayed version by version (rows
		// leaving before rows arriving), ends where silver is.
		replayed := replayCDF(t, res.CDF, key)
		if len(replayed) != len(res.Rows) {
			t.Errorf("delta-rs: silver %s's change feed replays to %d rows, the table holds %d", table, len(replayed), len(res.Rows))
		}
		for _, row := range res.Rows {
			k := bronzetest.KeyOf(bronzetest.Row(row), key)
			if got, ok := replayed[k]; !ok || fmt.Sprint(got) != fmt.Sprint(withoutMeta(row)) {
				t.Errorf("delta-rs: silver %s key %s: the change feed replays to %v, the table holds %v", table, k, got, withoutMeta(row))
			}
		}
		src := readSource(t, srcURL, table, key)
		compareJSONRows(t, "delta-rs", table, src, res.Rows, key)
		// DuckDB's delta extension reads silver (deletion vectors
		// included) equal to the source.
		dir := filepath.Join(wh, "silver", source, "public", table)
		cmd := exec.Command(py, filepath.Join(root, "scripts", "delta_read.py"), "--duckdb", dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		data, err := cmd.Output()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			if os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") != "" {
				t.Fatalf("DuckDB cannot read %s: %s (run scripts/setup-test-env.sh)", dir, stderr.String())
			}
			t.Logf("DuckDB does not read the tables: %s", strings.TrimSpace(stderr.String()))
		case err != nil:
			t.Fatalf("DuckDB reading %s: %v\n%s", dir, err, stderr.String())
		default:
			var duck struct {
				Rows []map[string]any `json:"rows"`
			}
			if err := json.Unmarshal(data, &duck); err != nil {
				t.Fatal(err)
			}
			compareJSONRows(t, "DuckDB", table, src, duck.Rows, key)
			t.Logf("DuckDB (delta_scan) read %d rows of silver %s", len(duck.Rows), table)
		}
	}
	maintainDelta(t, bin, wh, source, srcURL, keys, py, root)
}

// waitSilverDelta waits until every silver table of keys equals the source
// (read now), row by row, on the source columns; it fails the test with
// the differences after timeout, or when the session exits.
func waitSilverDelta(t *testing.T, s *session, wh, source, srcURL string, keys map[string][]string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var diffs []string
		for table, key := range keys {
			diffs = append(diffs, diffSilverDelta(t, wh, source, table, readSource(t, srcURL, table, key), key)...)
		}
		if len(diffs) == 0 {
			return
		}
		if s.Exited() {
			t.Fatalf("tidemark exited (%v) before silver equalled the source:\n%s", s.Err, strings.Join(diffs, "\n"))
		}
		if time.Now().After(deadline) {
			if len(diffs) > 20 {
				diffs = append(diffs[:20], fmt.Sprintf("… and %d more", len(diffs)-20))
			}
			t.Fatalf("silver is not equal to the source after %s:\n%s", timeout, strings.Join(diffs, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// diffSilverDelta compares silver.<source>.public.<table> with the source's
// rows (by key); nil when equal.
func diffSilverDelta(t *testing.T, wh, source, table string, src map[string]bronzetest.Row, key []string) []string {
	t.Helper()
	ctx := context.Background()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.Open(ctx, []string{"silver", source, "public", table})
	if errors.Is(err, lake.ErrNoSuchTable) {
		return []string{"no silver table " + table + " yet"}
	}
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bronzetest.Row{}
	var dups []string
	err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			row := bronzetest.Row{}
			for c, col := range rec.Columns() {
				name := rec.ColumnName(c)
				if bronzetest.IsMeta(name) {
					continue
				}
				v, err := bronzetest.Value(col, i)
				if err != nil {
					return fmt.Errorf("column %s: %w", name, err)
				}
				row[name] = normalize(v)
			}
			k := bronzetest.KeyOf(row, key)
			if _, dup := got[k]; dup {
				dups = append(dups, fmt.Sprintf("%s: key %s twice", table, k))
			}
			got[k] = row
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read silver %s: %v", table, err)
	}
	diffs := dups
	for k, want := range src {
		row, ok := got[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: key %s missing (source %s)", table, k, show(want)))
			continue
		}
		for col, v := range want {
			v = timeAsMicros(v)
			if !sameValue(v, row[col]) {
				diffs = append(diffs, fmt.Sprintf("%s: key %s column %s = %s, the source has %s", table, k, col, showValue(row[col]), showValue(v)))
			}
		}
	}
	for k, row := range got {
		if _, ok := src[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: key %s is not in the source (silver %s)", table, k, show(row)))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// sameJSON compares a source value with what delta-rs printed
// (scripts/delta_read.py: numbers, strings, ISO 8601 times, lists).
func sameJSON(src, got any) bool {
	switch x := src.(type) {
	case nil:
		return got == nil
	case int64:
		f, ok := got.(float64)
		return ok && f == float64(x)
	case float64:
		f, ok := got.(float64)
		return ok && f == x
	case time.Time:
		s, ok := got.(string)
		if !ok {
			return false
		}
		for _, layout := range []string{"2006-01-02T15:04:05.999999-07:00", "2006-01-02"} {
			if tm, err := time.Parse(layout, s); err == nil {
				return tm.Equal(x)
			}
		}
		return false
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(x) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], g[i]) {
				return false
			}
		}
		return true
	}
	return fmt.Sprint(src) == fmt.Sprint(got)
}

// timeAsMicros is a source time-of-day value as a Delta lake holds it
// (time_as: micros, the default of lake.format: delta).
func timeAsMicros(v any) any {
	if x, ok := v.(pgtype.Time); ok {
		return x.Microseconds
	}
	return v
}

func mustHistory(t *testing.T, tbl *delta.Table) []delta.CommitEntry {
	t.Helper()
	h, err := tbl.History(-1)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// readDelta returns the live rows of a table of the Delta lake at wh.
func readDelta(t *testing.T, wh string, ident ...string) []bronzetest.Row {
	t.Helper()
	ctx := context.Background()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.Open(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := bronzetest.ReadTable(ctx, tbl)
	if err != nil {
		t.Fatalf("read %s: %v", strings.Join(ident, "."), err)
	}
	return rows
}

// deltaRead reads the Delta table in dir with delta-rs
// (scripts/delta_read.py) into out.
func deltaRead(t *testing.T, py, root, dir string, out any, args ...string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{filepath.Join(root, "scripts", "delta_read.py")}, append(args, dir)...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("delta-rs reading %s: %v\n%s", dir, err, stderr.String())
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("delta-rs reading %s: %v", dir, err)
	}
}

// replayCDF applies a Delta change feed (delta-rs load_cdf rows) in
// version order: in each version, delete and update_preimage rows leave,
// then insert and update_postimage rows arrive. It fails the test on a
// change type it does not know or when no update or delete was fed.
func replayCDF(t *testing.T, feed []map[string]any, key []string) map[string]map[string]any {
	t.Helper()
	slices.SortStableFunc(feed, func(a, b map[string]any) int {
		va, _ := a["_commit_version"].(float64)
		vb, _ := b["_commit_version"].(float64)
		leave := func(r map[string]any) int {
			if r["_change_type"] == "delete" || r["_change_type"] == "update_preimage" {
				return 0
			}
			return 1
		}
		if va != vb {
			return int(va - vb)
		}
		return leave(a) - leave(b)
	})
	out := map[string]map[string]any{}
	types := map[string]int{}
	for _, r := range feed {
		ct, _ := r["_change_type"].(string)
		types[ct]++
		k := bronzetest.KeyOf(bronzetest.Row(r), key)
		switch ct {
		case "delete", "update_preimage":
			delete(out, k)
		case "insert", "update_postimage":
			out[k] = withoutMeta(r)
		default:
			t.Fatalf("change feed row of type %q: %v", ct, r)
		}
	}
	if types["update_postimage"] == 0 || types["update_preimage"] != types["update_postimage"] || types["delete"] == 0 {
		t.Errorf("change feed types %v: want updates (pre and post images) and deletes", types)
	}
	return out
}

// withoutMeta is a row without the change feed's columns.
func withoutMeta(r map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r {
		if !strings.HasPrefix(k, "_") {
			out[k] = v
		}
	}
	return out
}

// maintainDelta runs tidemark maintain on the Delta lake (OPTIMIZE, log
// cleanup, VACUUM): silver stays equal to the source, bronze still replays
// to it, and delta-rs (py, when set) reads silver equal.
func maintainDelta(t *testing.T, bin, wh, source, srcURL string, keys map[string][]string, py, root string) {
	t.Helper()
	bronzeRows := map[string]int{}
	for table := range keys {
		bronzeRows[table] = len(readDelta(t, wh, "bronze", source, "public", table))
	}
	out, err := exec.Command(bin, "maintain", "--warehouse", wh, "--older-than", "1ms", "--retain-last", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark maintain: %v\n%s", err, out)
	}
	t.Logf("tidemark maintain:\n%s", strings.TrimSpace(string(out)))
	if !strings.Contains(string(out), "silver."+source+".public.orders") {
		t.Errorf("tidemark maintain does not report silver orders")
	}
	for table, key := range keys {
		want := readSource(t, srcURL, table, key)
		if d := diffSilverDelta(t, wh, source, table, want, key); len(d) > 0 {
			t.Errorf("silver %s after tidemark maintain:\n%s", table, strings.Join(d, "\n"))
		}
		rows := readDelta(t, wh, "bronze", source, "public", table)
		if d := bronzetest.Duplicates(rows); len(d) > 0 || len(rows) != bronzeRows[table] {
			t.Errorf("bronze %s after tidemark maintain: %d rows (%d before), duplicates %q", table, len(rows), bronzeRows[table], d)
		}
		if py == "" {
			continue
		}
		var res struct {
			Rows []map[string]any `json:"rows"`
		}
		deltaRead(t, py, root, filepath.Join(wh, "silver", source, "public", table), &res, "--query")
		if len(res.Rows) != len(want) {
			t.Errorf("delta-rs reads %d rows of silver %s after tidemark maintain, the source has %d", len(res.Rows), table, len(want))
		}
	}
}

// compareJSONRows compares the rows a reader printed (delta_read.py) with
// the source's.
func compareJSONRows(t *testing.T, who, table string, src map[string]bronzetest.Row, rows []map[string]any, key []string) {
	t.Helper()
	got := map[string]map[string]any{}
	for _, row := range rows {
		got[bronzetest.KeyOf(bronzetest.Row(row), key)] = row
	}
	if len(got) != len(rows) {
		t.Errorf("%s reads %d rows of silver %s but %d keys", who, len(rows), table, len(got))
	}
	for k, want := range src {
		row, ok := got[k]
		if !ok {
			t.Errorf("%s: silver %s lacks key %s: source %s", who, table, k, show(want))
			continue
		}
		for col, v := range want {
			v = timeAsMicros(v)
			if !sameJSON(v, row[col]) {
				t.Errorf("%s: silver %s key %s column %s = %v, the source has %s", who, table, k, col, row[col], showValue(v))
			}
		}
	}
	for k := range got {
		if _, ok := src[k]; !ok {
			t.Errorf("%s: silver %s holds key %s, which the source does not", who, table, k)
		}
	}
}

// deltaGoldSQL is the gold query of TestE2EDelta (it decomposes: refreshed
// incrementally).
const deltaGoldSQL = "SELECT customer, count(*) AS orders, sum(amount) AS total FROM silver.public.orders GROUP BY 1"

// deltaGoldOnSource runs deltaGoldSQL on PostgreSQL: customer -> "orders total".
func deltaGoldOnSource(t *testing.T, srcURL string) map[string]string {
	t.Helper()
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), "SELECT customer, count(*), sum(amount)::text FROM public.orders GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var cust, sum string
		var n int64
		if err := rows.Scan(&cust, &n, &sum); err != nil {
			t.Fatal(err)
		}
		out[cust] = fmt.Sprintf("%d %s", n, sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// deltaGold reads gold.<source>.per_customer of a Delta lake with
// tidemark's reader (nil: no table yet).
func deltaGold(t *testing.T, wh, source string) map[string]string {
	t.Helper()
	cat, err := delta.OpenCatalog(wh)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	tbl, err := cat.Open(context.Background(), gold.Ident(source, "per_customer"))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	err = tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		c := rec.Column(0).(*array.String)
		n := rec.Column(1).(*array.Int64)
		s := rec.Column(2).(*array.Decimal128)
		scale := rec.Schema().Field(2).Type.(*arrow.Decimal128Type).Scale
		for i := 0; i < int(rec.NumRows()); i++ {
			out[c.Value(i)] = fmt.Sprintf("%d %s", n.Value(i), s.Value(i).ToString(scale))
		}
		return nil
	})
	if err != nil {
		t.Logf("read gold: %v", err)
		return nil
	}
	return out
}
