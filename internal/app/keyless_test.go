package app_test

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

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestNoTableBlocksTheOthers (issue 12): a FOR ALL TABLES publication over
// keyless tables (with and without REPLICA IDENTITY FULL, with a declared
// merge key) and odd names (dot, slash, newline, unicode, mixed case,
// quotes). The run starts; every table that can be keyed reaches silver
// equal to the source (updates and deletes of the REPLICA IDENTITY FULL
// table, keyed on the whole row, included) and verifies equal; the tables
// with no key are captured into bronze only (every row, no silver table),
// and listed by status and verify with the named error and the fix; the
// names the lake cannot hold are left out, listed the same way; and a
// table fixed while the pipeline runs (ADD PRIMARY KEY) gets its silver
// table, built from its whole bronze table.
func TestNoTableBlocksTheOthers(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "keyless")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE SCHEMA "Mixed Case";
		CREATE SCHEMA "Ünï";
		CREATE TABLE public.accounts (id int PRIMARY KEY, v text);
		-- keyed on the whole row
		CREATE TABLE public.log_full (a int NOT NULL, b text NOT NULL, at date NOT NULL);
		ALTER TABLE public.log_full REPLICA IDENTITY FULL;
		-- declared merge keys: under REPLICA IDENTITY FULL (its key updated
		-- too), and on an insert-only table with no replica identity
		CREATE TABLE public.tagged (tenant int NOT NULL, id int NOT NULL, v text);
		ALTER TABLE public.tagged REPLICA IDENTITY FULL;
		CREATE TABLE public.staging (k int NOT NULL, v text);
		-- no key: bronze only
		CREATE TABLE public.log_plain (ts int, msg text);
		CREATE TABLE public.log_nullable (a int, b text);
		ALTER TABLE public.log_nullable REPLICA IDENTITY FULL;
		-- refused, each on its own
		CREATE TABLE public."t.x" (id int PRIMARY KEY);
		CREATE TABLE public."a/b" (id int PRIMARY KEY);
		CREATE TABLE public."new`+"\n"+`line" (id int PRIMARY KEY);
		-- odd names the lake holds exactly
		CREATE TABLE "Mixed Case"."Quo""ted" ("Id" int PRIMARY KEY, "Vä l" text);
		CREATE TABLE "Ünï"."表" ("ключ" text PRIMARY KEY, n int);
		CREATE PUBLICATION everything FOR ALL TABLES;`)
	write := func(base int) {
		pg.Exec(t, srcURL, strings.ReplaceAll(`
			INSERT INTO public.accounts SELECT g + B, 'a' || g FROM generate_series(1, 20) g;
			INSERT INTO public.log_full SELECT g + B, 'row ' || g, date '2026-01-01' + g FROM generate_series(1, 20) g;
			INSERT INTO public.tagged SELECT g % 3, g + B, 'v' || g FROM generate_series(1, 20) g;
			INSERT INTO public.staging SELECT g + B, 's' || g FROM generate_series(1, 20) g;
			INSERT INTO public.log_plain SELECT g + B, 'm' || g FROM generate_series(1, 20) g;
			INSERT INTO public.log_nullable SELECT g + B, NULL FROM generate_series(1, 20) g;
			INSERT INTO public."t.x" SELECT g + B FROM generate_series(1, 20) g;
			INSERT INTO "Mixed Case"."Quo""ted" SELECT g + B, 'ä ' || g FROM generate_series(1, 20) g;
			INSERT INTO "Ünï"."表" SELECT 'k' || (g + B) || '表', g FROM generate_series(1, 20) g;`, "B", strconv.Itoa(base)))
	}
	write(0) // read by the initial snapshot
	captured := []oddTable{
		{change.TableID{Schema: "public", Name: "accounts"}, []string{"id"}},
		{change.TableID{Schema: "public", Name: "log_full"}, []string{"a", "b", "at"}},
		{change.TableID{Schema: "public", Name: "tagged"}, []string{"tenant", "id"}},
		{change.TableID{Schema: "public", Name: "staging"}, []string{"k"}},
		{change.TableID{Schema: "Mixed Case", Name: `Quo"ted`}, []string{"Id"}},
		{change.TableID{Schema: "Ünï", Name: "表"}, []string{"ключ"}},
	}
	keyless := []oddTable{{id: change.TableID{Schema: "public", Name: "log_plain"}}, {id: change.TableID{Schema: "public", Name: "log_nullable"}}}
	all := append(slices.Clone(captured), keyless...)
	r, wh := newRunner(t, bin, srcURL, "--publication", "everything", "--silver-every", "300ms",
		"--merge-keys", "public.tagged=tenant,id", "--merge-keys", "public.staging=k", "--publication-poll", "200ms")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, all)
	write(100) // streamed
	pg.Exec(t, srcURL, `
		UPDATE public.log_full SET b = b || ' updated' WHERE a <= 5;
		DELETE FROM public.log_full WHERE a BETWEEN 6 AND 8;
		UPDATE public.log_full SET at = at + 1 WHERE a = 105;
		UPDATE public.tagged SET v = 'changed' WHERE id <= 4;
		UPDATE public.tagged SET id = id + 1000 WHERE id = 7; -- its merge key changes
		DELETE FROM public.tagged WHERE id = 9;
		UPDATE "Mixed Case"."Quo""ted" SET "Vä l" = NULL WHERE "Id" = 2;
		DELETE FROM "Ünï"."表" WHERE n = 3;
		UPDATE public.log_nullable SET b = 'x' WHERE a = 1;`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, all)

	// status names each table left out or in bronze only, with its named
	// error and fix.
	out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	t.Logf("tidemark status:\n%s", out)
	for _, want := range [][]string{
		{`bronze only, no silver: bronze.` + source + `.public.log_plain: [no_primary_key]`, "captured into bronze only", "ADD PRIMARY KEY", "REPLICA IDENTITY FULL", "merge_keys"},
		{`bronze only, no silver: bronze.` + source + `.public.log_nullable: [no_primary_key]`, `"a" may be NULL`, "merge_keys: {public.log_nullable: [column, ...]}"},
		{`not captured: ` + source + `: public."t.x": [unsupported_name]`, "'.'", "RENAME"},
		{`not captured: ` + source + `: public."a/b": [unsupported_name]`, "'/'"},
		{`not captured: ` + source + `: "public"."new\nline": [unsupported_name]`, "control character"},
	} {
		line := lineWith(string(out), want[0])
		if line == "" {
			t.Errorf("tidemark status has no line %q", want[0])
			continue
		}
		for _, w := range want[1:] {
			if !strings.Contains(line, w) {
				t.Errorf("tidemark status: the line for %s does not say %q:\n%s", want[0], w, line)
			}
		}
	}
	var rows []app.TableStatus
	out, err = exec.Command(bin, "status", "--warehouse", wh, "--format", "json").Output()
	if err != nil || json.Unmarshal(out, &rows) != nil {
		t.Fatalf("tidemark status --format json: %v\n%s", err, out)
	}
	notCaptured, bronzeOnly := 0, 0
	for _, st := range rows {
		if st.NotCaptured != "" {
			notCaptured++
		}
		if st.BronzeOnly != "" && st.Silver == "none (bronze only)" {
			bronzeOnly++
		}
	}
	if notCaptured != 3 || bronzeOnly != 2 {
		t.Errorf("tidemark status --format json lists %d tables not captured (want 3) and %d in bronze only (want 2):\n%s", notCaptured, bronzeOnly, out)
	}
	// The keyless tables' bronze holds every row, each once (the snapshot
	// read them before the run streamed any), and the change of the one
	// under REPLICA IDENTITY FULL; they have no silver table.
	count := func(id change.TableID, cols ...string) map[string]int {
		n := map[string]int{}
		for _, row := range bronzetest.Read(t, wh, bronze.Ident(source, id)...) {
			var k []string
			for _, c := range append([]string{"cdc_op"}, cols...) {
				k = append(k, fmt.Sprint(row[c]))
			}
			n[strings.Join(k, " ")]++
		}
		return n
	}
	plain := count(keyless[0].id, "ts", "msg")
	nullable := count(keyless[1].id, "a", "b")
	for _, base := range []int{0, 100} {
		for g := 1; g <= 20; g++ {
			op := "c"
			if base == 0 {
				op = "r"
			}
			if k := fmt.Sprintf("%s %d m%d", op, g+base, g); plain[k] != 1 {
				t.Errorf("bronze public.log_plain holds %q %d times, want once: %v", k, plain[k], plain)
			}
			if k := fmt.Sprintf("%s %d <nil>", op, g+base); nullable[k] != 1 {
				t.Errorf("bronze public.log_nullable holds %q %d times, want once: %v", k, nullable[k], nullable)
			}
		}
	}
	if len(plain) != 40 || nullable["u 1 x"] != 1 || len(nullable) != 41 {
		t.Errorf("bronze public.log_plain holds %d distinct rows (want 40), public.log_nullable %d (want 41, its update included):\n%v\n%v", len(plain), len(nullable), plain, nullable)
	}
	for _, tb := range keyless {
		for _, ident := range [][]string{silver.Ident(source, tb.id.Schema, tb.id.Name), silver.BuildingIdent(source, tb.id.Schema, tb.id.Name)} {
			if _, err := lk.cat.LoadTable(context.Background(), ident); err == nil {
				t.Errorf("%s exists for a table with no key", strings.Join(ident, "."))
			}
		}
	}

	// The fix, while running: the table is picked up at its next change
	// and backfilled.
	pg.Exec(t, srcURL, `ALTER TABLE public.log_plain ADD PRIMARY KEY (ts); INSERT INTO public.log_plain VALUES (1000, 'after the fix')`)
	captured = append(captured, oddTable{change.TableID{Schema: "public", Name: "log_plain"}, []string{"ts"}})
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, captured)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()
	out, _ = exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if strings.Contains(string(out), "public.log_plain:") {
		t.Errorf("tidemark status still names public.log_plain after its fix:\n%s", out)
	}

	// Bronze replayed by key and silver equal the source.
	for _, tb := range captured {
		rows := bronzetest.Read(t, wh, bronze.Ident(source, tb.id)...)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s: duplicates %v", tb.id, d)
		}
		compareRows(t, "bronze "+tb.id.String(), readSourceID(t, srcURL, tb.id, tb.key), bronzetest.Replay(t, rows, tb.key))
		arg := pgx.Identifier{tb.id.Schema, tb.id.Name}.Sanitize()
		if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source, arg).CombinedOutput(); err != nil {
			t.Fatalf("tidemark merge %s: %v\n%s", arg, err, out)
		}
		got := map[string]bronzetest.Row{}
		for _, row := range bronzetest.Read(t, wh, silver.Ident(source, tb.id.Schema, tb.id.Name)...) {
			got[bronzetest.KeyOf(row, tb.key)] = row
		}
		compareRows(t, "silver "+tb.id.String(), readSourceID(t, srcURL, tb.id, tb.key), got)
	}
	out = runVerify(t, r, bin, srcURL, wh, source)
	for _, name := range []string{"log_full", "tagged", "staging", "log_plain"} {
		if !strings.Contains(string(out), name) {
			t.Errorf("tidemark verify does not report public.%s:\n%s", name, out)
		}
	}
	// It names the tables it cannot compare, and why.
	for _, want := range []string{`"public"."log_nullable": bronze only, no silver to compare: [no_primary_key]`, `"public"."t.x": not captured, not compared: [unsupported_name]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tidemark verify does not say %q:\n%s", want, out)
		}
	}
}

// lineWith returns the first line of s that contains sub, or "".
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestFailedStartLeavesNothing (issue 12): a start that creates the
// publication and then fails for a transient reason until its retries run
// out (exit 4) drops the publication it created, and leaves no slot; a
// publication of the operator's is kept.
func TestFailedStartLeavesNothing(t *testing.T) {
	t.Parallel() // its own database and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "failed_start")
	pg.Exec(t, srcURL, `CREATE TABLE public.accounts (id int PRIMARY KEY); INSERT INTO public.accounts VALUES (1)`)
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src",
			"--retry-max-elapsed", "1s", "--retry-initial-backoff", "100ms", "--log-level", "debug"}, args...)...)
		cmd.Env = append(cmd.Environ(), "TIDEMARK_FAILPOINTS=capture-after-publication=error")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := run()
	if code != fault.ExitTransient {
		t.Fatalf("exit %d, want %d (retries exhausted):\n%s", code, fault.ExitTransient, out)
	}
	if n := strings.Count(out, "dropped the publication this failed start created"); n < 2 {
		t.Errorf("the publication was dropped after %d failed attempts, want every one (at least 2):\n%s", n, out)
	}
	if pubs, slots := sourceObjects(t, srcURL); len(pubs)+len(slots) > 0 {
		t.Errorf("the failed start left publications %v and slots %v", pubs, slots)
	}
	pg.Exec(t, srcURL, `CREATE PUBLICATION mine FOR ALL TABLES`)
	if code, out := run("--publication", "mine"); code != fault.ExitTransient {
		t.Fatalf("exit %d, want %d:\n%s", code, fault.ExitTransient, out)
	}
	if pubs, slots := sourceObjects(t, srcURL); fmt.Sprint(pubs) != "[mine]" || len(slots) > 0 {
		t.Errorf("publications %v (want the operator's [mine] kept) and slots %v (want none)", pubs, slots)
	}
}

// TestKeylessTableBronzeOnly (issue 12): a table with no primary key and
// REPLICA IDENTITY DEFAULT, with rows before the run and inserts during
// it, beside a keyed table. The run starts and is killed (SIGKILL) while
// the keyless table's snapshot, read in ctid ranges, runs; the next run
// resumes it. The keyless table's bronze (read with PyIceberg) holds every
// source row, the rows from before the run exactly once; it has no silver
// table; status names it as bronze only with the fix; the keyed table
// reaches silver and verifies equal, and verify says the keyless one has
// no silver to compare (exit 0).
func TestKeylessTableBronzeOnly(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bronze_only")
	source := sourceName(t, srcURL)
	const before = 20000
	pg.Exec(t, srcURL, fmt.Sprintf(`
		CREATE TABLE public.events (ts int, payload text);
		INSERT INTO public.events SELECT g, 'event ' || g || ' ' || repeat('x', g %% 40) FROM generate_series(1, %d) g;
		CREATE TABLE public.accounts (id int PRIMARY KEY, v text);
		INSERT INTO public.accounts SELECT g, 'a' || g FROM generate_series(1, 500) g;`, before))
	events := change.TableID{Schema: "public", Name: "events"}
	accounts := change.TableID{Schema: "public", Name: "accounts"}
	both := []oddTable{{id: events}, {id: accounts, key: []string{"id"}}}

	r, wh := newRunner(t, bin, srcURL, "--snapshot-chunk-rows", "500", "--silver-every", "300ms")
	lk := openLake(t, wh, source)
	// 40 chunks of 500 rows, 100 ms apart: the snapshot lasts 4 s, and the
	// kill lands inside it.
	r.Env = []string{fmt.Sprintf("%s=snapshot-between-chunks=sleep(100)", failpoint.EnvVar)}
	first := r.Start()
	r.Env = nil
	deadline := time.Now().Add(time.Minute)
	for lk.snapshotStatusID(events) != "running" {
		if first.Exited() {
			t.Fatalf("tidemark session 1 exited by itself: %v", first.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot of public.events did not start within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Inserts and updates while the snapshot runs, across the kill.
	next := 100000
	writes := func(n int) {
		for i := 0; i < n; i++ {
			pg.Exec(t, srcURL, fmt.Sprintf(`INSERT INTO public.events SELECT g, 'streamed ' || g FROM generate_series(%d, %d) g;
				UPDATE public.accounts SET v = v || '+' WHERE id %% 7 = %d`, next, next+49, i%7))
			next += 50
		}
	}
	writes(5)
	time.Sleep(500 * time.Millisecond)
	if st := lk.snapshotStatusID(events); st != "running" {
		t.Logf("the snapshot of public.events is %q at the kill, not running: the resume is not exercised", st)
	}
	first.Kill(t)
	writes(5)
	s := r.Start()
	writes(5)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, both)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// Bronze holds every row of the keyless table, as PyIceberg reads it.
	want := map[string]bool{}
	c := connect(t, srcURL)
	rows, err := c.Query(context.Background(), `SELECT ts, payload FROM public.events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ts int
		var p string
		if err := rows.Scan(&ts, &p); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("%d %s", ts, p)] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	c.Close(context.Background())
	got := map[string]int{}
	for _, row := range pyRead(t, wh, bronze.Ident(source, events)) {
		got[fmt.Sprintf("%v %v", row["ts"], row["payload"])]++
	}
	if len(got) == 0 {
		got = map[string]int{}
		for _, row := range bronzetest.Read(t, wh, bronze.Ident(source, events)...) {
			got[fmt.Sprintf("%v %v", row["ts"], row["payload"])]++
		}
	}
	dup := 0
	for k := range want {
		switch n := got[k]; {
		case n == 0:
			t.Errorf("bronze public.events lacks the source row %q", k)
		case n > 1 && !strings.Contains(k, "streamed"):
			t.Errorf("bronze public.events holds the row %q from before the run %d times, want once", k, n)
		case n > 1:
			dup++ // inserted while the snapshot ran, into a block it had yet to read
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("bronze public.events holds %q, which the source never had", k)
		}
	}
	t.Logf("bronze public.events: %d source rows, %d of them inserted during the snapshot read twice", len(want), dup)
	if len(want) != before+15*50 {
		t.Errorf("the source has %d rows, want %d", len(want), before+15*50)
	}
	for _, ident := range [][]string{silver.Ident(source, "public", "events"), silver.BuildingIdent(source, "public", "events")} {
		if _, err := lk.cat.LoadTable(context.Background(), ident); err == nil {
			t.Errorf("%s exists for a table with no key", strings.Join(ident, "."))
		}
	}

	out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	line := lineWith(string(out), "bronze only, no silver: bronze."+source+".public.events: [no_primary_key]")
	for _, w := range []string{"captured into bronze only", "ADD PRIMARY KEY", "REPLICA IDENTITY FULL", "merge_keys: {public.events: [column, ...]}"} {
		if !strings.Contains(line, w) {
			t.Errorf("tidemark status does not say %q for public.events:\n%s", w, out)
		}
	}
	if l := lineWith(string(out), "bronze."+source+".public.events "); !strings.Contains(l, "none (bronze only)") {
		t.Errorf("tidemark status: the row of public.events does not say none (bronze only):\n%s", out)
	}

	out = runVerify(t, r, bin, srcURL, wh, source)
	if l := lineWith(string(out), "silver."+source+".public.accounts"); !strings.Contains(l, "equal") {
		t.Errorf("tidemark verify does not find public.accounts equal:\n%s", out)
	}
	if !strings.Contains(string(out), `"public"."events": bronze only, no silver to compare: [no_primary_key]`) {
		t.Errorf("tidemark verify does not say public.events has no silver to compare:\n%s", out)
	}
}

// TestKeylessTableGetsAKeyDuringItsSnapshot (issue 12): a keyless table
// given a primary key while its snapshot, read in row positions, runs is
// read again by its key; its silver table is then built from its whole
// bronze table and verifies equal, and status no longer names it.
func TestKeylessTableGetsAKeyDuringItsSnapshot(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "keyless_keyed")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE public.events (id int NOT NULL, v text);
		INSERT INTO public.events SELECT g, 'e' || g FROM generate_series(1, 10000) g;`)
	events := change.TableID{Schema: "public", Name: "events"}
	r, wh := newRunner(t, bin, srcURL, "--snapshot-chunk-rows", "500", "--silver-every", "300ms")
	r.Env = []string{fmt.Sprintf("%s=snapshot-between-chunks=sleep(150)", failpoint.EnvVar)}
	lk := openLake(t, wh, source)
	s := r.Start()
	deadline := time.Now().Add(time.Minute)
	for lk.snapshotStatusID(events) != "running" {
		if s.Exited() {
			t.Fatalf("tidemark exited by itself: %v", s.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot of public.events did not start within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pg.Exec(t, srcURL, `INSERT INTO public.events VALUES (20001, 'before the key')`)
	pg.Exec(t, srcURL, `ALTER TABLE public.events ADD PRIMARY KEY (id); INSERT INTO public.events VALUES (20002, 'after the key');
		UPDATE public.events SET v = 'updated' WHERE id <= 10`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: events, key: []string{"id"}}})
	if st := lk.snapshotStatusID(events); st != "done" {
		t.Fatalf("snapshot of public.events is %q", st)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	r.Env = nil
	tbl, err := lk.cat.LoadTable(context.Background(), bronze.Ident(source, events))
	if err != nil {
		t.Fatal(err)
	}
	if key := tbl.Properties()[bronze.PropKey]; key != `["id"]` {
		t.Errorf("bronze public.events records %s = %s, want [\"id\"]", bronze.PropKey, key)
	}
	// The chunks read by row position before the key, then the whole
	// table again by its key.
	snap := 0
	for _, row := range bronzetest.Read(t, wh, bronze.Ident(source, events)...) {
		if row["cdc_op"] == "r" {
			snap++
		}
	}
	if snap <= 10002 {
		t.Errorf("bronze public.events holds %d snapshot rows, want the table read again by its key (more than its 10002 rows)", snap)
	}
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source, "public.events").CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge public.events: %v\n%s", err, out)
	}
	got := map[string]bronzetest.Row{}
	for _, row := range bronzetest.Read(t, wh, silver.Ident(source, "public", "events")...) {
		got[bronzetest.KeyOf(row, []string{"id"})] = row
	}
	compareRows(t, "silver public.events", readSourceID(t, srcURL, events, []string{"id"}), got)
	out := runVerify(t, r, bin, srcURL, wh, source)
	if l := lineWith(string(out), "silver."+source+".public.events"); !strings.Contains(l, "equal") {
		t.Errorf("tidemark verify does not find public.events equal:\n%s", out)
	}
	out, err = exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "bronze only") {
		t.Errorf("tidemark status still names public.events as bronze only:\n%s", out)
	}
}
