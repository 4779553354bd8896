package app_test

// Bad input at the pipeline level (RELIABILITY.md rows 22-24): odd
// identifiers and special values go through the real binary, from a real
// PostgreSQL table to bronze and silver, and come back exactly, read by our
// reader and by PyIceberg, with `tidemark verify` equal; what the lake cannot
// hold is refused at start with a named error or dead-lettered with a reason.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// oddTable is a source table with an odd name, its key, and the rows the
// test expects in silver (column -> value as bronzetest reads it).
type oddTable struct {
	id  change.TableID
	key []string
}

// TestBadInputIdentifiers: schemas, tables and columns named with quotes,
// spaces, unicode, reserved words and mixed case round-trip exactly through
// bronze and silver, are addressable by every command that takes a table
// name, and verify equal.
func TestBadInputIdentifiers(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bad_ident")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE SCHEMA "Mixed Case";
		CREATE SCHEMA "Ünïcødé 表";
		CREATE SCHEMA "sch""q";
		CREATE TABLE "Mixed Case"."select" (
			"Id" int PRIMARY KEY, "order" text, "Order" text, "user" int, "from" bool,
			"col.with.dots" text, "spaced col" text, "quo""te" text, "Ünïcødé 表" text, "🎉" text,
			"a/b" text, "tab	col" text, "cdcop" text);
		CREATE TABLE "Ünïcødé 表"."user" ("ключ" text PRIMARY KEY, "表" int);
		CREATE TABLE "sch""q"."ta""ble" ("k ey" int, "Order" int, v text, PRIMARY KEY ("k ey", "Order"));
		CREATE TABLE public."CamelCase" (id bigint PRIMARY KEY, "ÄÖÜ" text);
		CREATE TABLE public."order" (id int PRIMARY KEY, v text);`)
	insert := func(tag string, base int) {
		pg.Exec(t, srcURL, fmt.Sprintf(`
			INSERT INTO "Mixed Case"."select" SELECT g + %[2]d, 'lower %[1]s ' || g, 'Upper %[1]s ' || g, g, g %% 2 = 0,
				'dots', 'spaces', 'quote"d', 'ü表', '🎉🎉', 'slash', 'tab', 'x' FROM generate_series(1, 5) g;
			INSERT INTO "Ünïcødé 表"."user" SELECT 'ключ-%[1]s-' || g || '-表', g FROM generate_series(1, 5) g;
			INSERT INTO "sch""q"."ta""ble" SELECT g + %[2]d, -g, 'v "%[1]s"' FROM generate_series(1, 5) g;
			INSERT INTO public."CamelCase" SELECT g + %[2]d, 'äöü %[1]s' FROM generate_series(1, 5) g;
			INSERT INTO public."order" SELECT g + %[2]d, '%[1]s' FROM generate_series(1, 5) g;`, tag, base))
	}
	insert("snap", 0) // read by the initial snapshot
	tables := []oddTable{
		{change.TableID{Schema: "Mixed Case", Name: "select"}, []string{"Id"}},
		{change.TableID{Schema: "Ünïcødé 表", Name: "user"}, []string{"ключ"}},
		{change.TableID{Schema: `sch"q`, Name: `ta"ble`}, []string{"k ey", "Order"}},
		{change.TableID{Schema: "public", Name: "CamelCase"}, []string{"id"}},
		{change.TableID{Schema: "public", Name: "order"}, []string{"id"}},
	}

	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	insert("stream", 100) // streamed
	pg.Exec(t, srcURL, `
		UPDATE "Mixed Case"."select" SET "Order" = 'updated', "quo""te" = NULL WHERE "Id" = 2;
		DELETE FROM "Mixed Case"."select" WHERE "Id" = 3;
		UPDATE "Ünïcødé 表"."user" SET "ключ" = "ключ" || '🎉' WHERE "表" = 1;
		UPDATE "sch""q"."ta""ble" SET v = 'changed' WHERE "k ey" = 101;
		DELETE FROM public."order" WHERE id = 1;`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	// Bronze, replayed by key, equals the source: every name and value kept.
	for _, tb := range tables {
		rows := bronzetest.Read(t, wh, bronze.Ident(source, tb.id)...)
		if d := bronzetest.Duplicates(rows); len(d) > 0 {
			t.Errorf("bronze %s: duplicates %v", tb.id, d)
		}
		compareRows(t, "bronze "+tb.id.String(), readSourceID(t, srcURL, tb.id, tb.key), bronzetest.Replay(t, rows, tb.key))
	}

	// merge addresses each table by its quoted name (and all tables at once).
	for _, tb := range tables {
		arg := pgx.Identifier{tb.id.Schema, tb.id.Name}.Sanitize()
		if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source, arg).CombinedOutput(); err != nil {
			t.Fatalf("tidemark merge %s: %v\n%s", arg, err, out)
		}
	}
	// Silver equals the source, by our reader, by verify and by PyIceberg.
	for _, tb := range tables {
		rows := bronzetest.Read(t, wh, silver.Ident(source, tb.id.Schema, tb.id.Name)...)
		got := map[string]bronzetest.Row{}
		for _, row := range rows {
			got[bronzetest.KeyOf(row, tb.key)] = row
		}
		compareRows(t, "silver "+tb.id.String(), readSourceID(t, srcURL, tb.id, tb.key), got)
	}
	runVerify(t, r, bin, srcURL, wh, source)
	for _, tb := range tables {
		checkPyIceberg(t, wh, silver.Ident(source, tb.id.Schema, tb.id.Name), readSourceID(t, srcURL, tb.id, tb.key), tb.key)
	}

	// show and status address and list them.
	for _, tb := range tables {
		for _, name := range []string{
			strings.Join(silver.Ident(source, tb.id.Schema, tb.id.Name), "."),
			"silver." + source + "." + pgx.Identifier{tb.id.Schema, tb.id.Name}.Sanitize(),
		} {
			out, err := exec.Command(bin, "show", "--warehouse", wh, "--format", "json", name).CombinedOutput()
			if err != nil {
				t.Errorf("tidemark show %s: %v\n%s", name, err, out)
				continue
			}
			if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; n != len(readSourceID(t, srcURL, tb.id, tb.key)) {
				t.Errorf("tidemark show %s printed %d rows, the source has %d:\n%s", name, n, len(readSourceID(t, srcURL, tb.id, tb.key)), out)
			}
		}
	}
	out, err := exec.Command(bin, "status", "--warehouse", wh, "--format", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	for _, tb := range tables {
		if !bytes.Contains(out, []byte(jsonString(tb.id.Name))) || !bytes.Contains(out, []byte(jsonString(tb.id.Schema))) {
			t.Errorf("tidemark status does not list %s:\n%s", tb.id, out)
		}
	}
}

// TestBadInputRefusedIdentifiers: a table with a column name the lake
// cannot hold exactly is left out on its own: the run starts, the other
// tables are captured, and status names each refused table with the named
// error and what to rename. Listed by name (--tables), it refuses the run.
func TestBadInputRefusedIdentifiers(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	cases := []struct {
		table, ddl string
		want       []string // in status, after the table
	}{
		{"bad_op", `CREATE TABLE public.bad_op (id int PRIMARY KEY, cdc_op text)`, []string{`"cdc_op"`, "rename", `"public"."bad_op"`, "not captured"}},
		{"bad_prefix", `CREATE TABLE public.bad_prefix (id int PRIMARY KEY, cdc_flag bool)`, []string{`"cdc_flag"`, "rename"}},
		{"bad_case", `CREATE TABLE public.bad_case (id int PRIMARY KEY, "CDC_TS" text)`, []string{`"CDC_TS"`, "rename"}},
		{"bad_element", `CREATE TABLE public.bad_element (id int PRIMARY KEY, tags text[], "tags.element" text)`, []string{`"tags.element"`, `"tags"`, "rename"}},
	}
	srcURL := pg.CreateDB(t, "bad_refuse")
	for _, tc := range cases {
		pg.Exec(t, srcURL, tc.ddl+`; INSERT INTO public.`+tc.table+` (id) VALUES (1)`)
	}
	pg.Exec(t, srcURL, `CREATE TABLE public.good (id int PRIMARY KEY, v text); INSERT INTO public.good VALUES (1, 'ok')`)

	// Listed by name: the run is refused (exit 2) with how to leave it out.
	out, err := exec.Command(bin, "run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src",
		"--tables", "public.good,public.bad_op").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitConfig {
		t.Fatalf("tidemark run --tables public.good,public.bad_op: %v, want exit %d; output:\n%s", err, fault.ExitConfig, out)
	}
	for _, w := range []string{"[column_collision]", `"cdc_op"`, "rename", "leave it out of tables"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the error does not say %q:\n%s", w, out)
		}
	}

	// Not listed: each refused table is left out, the others run.
	r, wh := newRunner(t, bin, srcURL, "--name", "src", "--publication-poll", "200ms")
	lk := openLake(t, wh, "src")
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "good"}}})
	if rows := tryRead(wh, "bronze", "src", "public", "good"); len(rows) != 1 {
		t.Errorf("bronze.src.public.good holds %d rows, want 1", len(rows))
	}
	out, err = exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	for _, tc := range cases {
		if rows := tryRead(wh, "bronze", "src", "public", tc.table); len(rows) > 0 {
			t.Errorf("bronze.src.public.%s was written although the table is refused: %d rows", tc.table, len(rows))
		}
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "not captured: src: public."+tc.table+": [column_collision]") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("tidemark status does not name public.%s with [column_collision]:\n%s", tc.table, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("status on public.%s does not say %q: %s", tc.table, w, line)
			}
		}
	}
	// Renamed at the source, the table is picked up at its next change,
	// with a backfill.
	pg.Exec(t, srcURL, `ALTER TABLE public.bad_op RENAME COLUMN cdc_op TO op; INSERT INTO public.bad_op VALUES (2, 'two')`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "bad_op"}}})
	// (its two rows by the backfill, the insert also by the stream)
	if rows := tryRead(wh, "bronze", "src", "public", "bad_op"); len(rows) < 2 {
		t.Errorf("bronze.src.public.bad_op holds %d rows after the rename, want its 2 rows and the insert", len(rows))
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return strings.Trim(string(b), `"`)
}

// waitSilverPublished waits (up to 2 minutes each) until the silver table
// of every one of tables is published.
func (l *lakeView) waitSilverPublished(s *session, source string, tables []oddTable) {
	l.t.Helper()
	for _, tb := range tables {
		waitFor(l.t, s, 2*time.Minute, "silver "+tb.id.String()+" to be published", func() bool {
			_, err := l.cat.LoadTable(context.Background(), silver.Ident(source, tb.id.Schema, tb.id.Name))
			return err == nil
		})
	}
}

// waitCaughtUpIDs is waitCaughtUp for tables in any schema.
func (l *lakeView) waitCaughtUpIDs(s *session, target uint64, timeout time.Duration, tables []oddTable) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s.Exited() {
			l.t.Fatalf("tidemark session %d exited by itself while catching up: %v", s.N, s.Err)
		}
		cp, ok := l.checkpoint()
		done := ok && postgres.AckedLSN(cp) >= target
		var states []string
		for _, tb := range tables {
			st := l.snapshotStatusID(tb.id)
			done = done && st == "done"
			states = append(states, tb.id.String()+"="+st)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("tidemark did not catch up within %s: checkpoint %+v, snapshots %v", timeout, cp, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (l *lakeView) snapshotStatusID(id change.TableID) string {
	tbl, err := l.cat.LoadTable(context.Background(), bronze.Ident(l.source, id))
	if err != nil {
		return ""
	}
	var st struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal([]byte(tbl.Summary()["tidemark.snapshot"]), &st)
	return st.Status
}

// readSourceID reads a source table in any schema the way readSource does.
func readSourceID(t *testing.T, srcURL string, id change.TableID, key []string) map[string]bronzetest.Row {
	t.Helper()
	ctx := context.Background()
	c := connect(t, srcURL)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT * FROM "+pgx.Identifier{id.Schema, id.Name}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	return sourceRows(t, rows, key)
}

// compareRows requires got (lake rows by key) to hold exactly want's keys
// with want's values in every source column.
func compareRows(t *testing.T, what string, want, got map[string]bronzetest.Row) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: key %s is missing", what, k)
			continue
		}
		for col, wv := range w {
			gv, ok := g[col]
			if !ok {
				t.Errorf("%s: key %s: column %q is missing (columns: %v)", what, k, col, sortedKeys(g))
				continue
			}
			if !sameValue(wv, gv) {
				t.Errorf("%s: key %s: column %q = %s, source %s", what, k, col, showValue(gv), showValue(wv))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: key %s is not in the source", what, k)
		}
	}
}

// runVerify runs `tidemark verify` while a session carries silver to the
// source position it compares at, and requires every table equal.
func runVerify(t *testing.T, r *runner, bin, srcURL, wh, source string) []byte {
	t.Helper()
	s := r.Start()
	out, err := exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "2m").CombinedOutput()
	code := s.Stop(t, time.Minute)
	if err != nil {
		t.Fatalf("tidemark verify: %v\n%s", err, out)
	}
	if code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("tidemark verify:\n%s", bytes.TrimSpace(out))
	return out
}

// pyRead reads a lake table with PyIceberg (testenv.PyIcebergRead); nil
// when TIDEMARK_PYTHON is not set.
func pyRead(t *testing.T, wh string, ident []string) []map[string]any {
	t.Helper()
	rows, _ := testenv.PyIcebergRead(t, wh, ident)
	return rows
}

// checkPyIceberg requires PyIceberg to read the source's keys and column
// names from a silver table (values are compared per type elsewhere).
func checkPyIceberg(t *testing.T, wh string, ident []string, want map[string]bronzetest.Row, key []string) {
	t.Helper()
	rows := pyRead(t, wh, ident)
	if rows == nil && os.Getenv("TIDEMARK_PYTHON") == "" {
		return
	}
	if len(rows) != len(want) {
		t.Errorf("PyIceberg reads %d rows in %q, the source has %d", len(rows), ident, len(want))
	}
	var cols []string
	for _, w := range want {
		cols = sortedKeys(w)
		break
	}
	for _, row := range rows {
		for _, c := range cols {
			if _, ok := row[c]; !ok {
				have := make([]string, 0, len(row))
				for k := range row {
					have = append(have, k)
				}
				sort.Strings(have)
				t.Errorf("PyIceberg row of %q lacks column %q: has %q", ident, c, have)
				return
			}
		}
	}
}

// TestBadInputRefusedAfterStart: a refused column name that appears while
// the pipeline runs stops it with the same named error, before any of its
// rows is written. (A table created under FOR ALL TABLES with a name the
// lake cannot hold is left out on its own: TestNoTableBlocksTheOthers.)
func TestBadInputRefusedAfterStart(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	for _, tc := range []struct {
		name, ddl, code, want string
	}{
		{"column added", `ALTER TABLE public.good ADD COLUMN "Cdc_Extra" int; INSERT INTO public.good VALUES (2, 'two', 2)`, "column_collision", `"Cdc_Extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcURL := pg.CreateDB(t, "bad_late")
			pg.Exec(t, srcURL, `CREATE TABLE public.good (id int PRIMARY KEY, v text); INSERT INTO public.good VALUES (1, 'ok')`)
			r, wh := newRunner(t, bin, srcURL, "--name", "src", "--publication-poll", "200ms")
			lk := openLake(t, wh, "src")
			s := r.Start()
			lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "good"}}})
			pg.Exec(t, srcURL, tc.ddl)
			select {
			case <-s.Done:
			case <-time.After(2 * time.Minute):
				t.Fatal("tidemark did not stop after the refused name appeared")
			}
			if code := s.Cmd.ProcessState.ExitCode(); code != fault.ExitConfig {
				t.Errorf("exit code %d, want %d", code, fault.ExitConfig)
			}
			log, _ := os.ReadFile(r.LogPath)
			if !strings.Contains(string(log), "["+tc.code+"]") || !strings.Contains(string(log), tc.want) {
				t.Errorf("the log does not name [%s] and %s:\n%s", tc.code, tc.want, log)
			}
			lk.close()
			// Only the one row from before is in bronze.
			if rows := bronzetest.Read(t, wh, "bronze", "src", "public", "good"); len(rows) != 1 {
				t.Errorf("bronze.src.public.good has %d rows, want 1", len(rows))
			}
		})
	}
}

// ---------------------------------------------------------------------------
// A newcomer's mistakes at start (issue 11): each is a named error with the
// right exit code and the fix in its message, and a start that fails leaves
// nothing behind that it created.

// runBin runs the tidemark binary to its end (as the OS user of cred when
// set) and returns its exit code and combined output.
func runBin(t *testing.T, bin string, cred *syscall.Credential, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("tidemark %s: %v\n%s", strings.Join(args, " "), err, out)
	return -1, ""
}

// wantRefusal requires exit code want, the named error [code] and every
// string of fix in out.
func wantRefusal(t *testing.T, what string, gotCode int, out string, want int, code string, fix ...string) {
	t.Helper()
	if gotCode != want {
		t.Errorf("%s: exit code %d, want %d; output:\n%s", what, gotCode, want, out)
	}
	for _, w := range append([]string{"[" + code + "]"}, fix...) {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the message does not say %q:\n%s", what, w, out)
		}
	}
	if strings.Contains(out, "retry budget") {
		t.Errorf("%s: reported as transient:\n%s", what, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "tidemark: [") {
			t.Logf("%s (exit %d): %s", what, gotCode, line)
		}
	}
}

// nobody returns the credential of the OS user "nobody", to run tidemark as
// a user without rights on a root-owned warehouse (root ignores file modes).
func nobody(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run tidemark as user nobody")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("look up user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// sharedDir returns a new directory that every user may enter and read but
// only the test's user may write (0o755 up to the root), removed at the end.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tidemark-badinput-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// binForOthers copies the tidemark binary where user nobody may run it.
func binForOthers(t *testing.T, bin string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(sharedDir(t), "tidemark")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// sourceObjects lists the source database's publications and slots.
func sourceObjects(t *testing.T, srcURL string) (pubs, slots []string) {
	t.Helper()
	ctx := context.Background()
	c := connect(t, srcURL)
	defer c.Close(ctx)
	for q, out := range map[string]*[]string{
		`SELECT pubname::text FROM pg_publication ORDER BY 1`:                                             &pubs,
		`SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database() ORDER BY 1`: &slots,
	} {
		rows, err := c.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			*out = append(*out, s)
		}
		rows.Close()
	}
	return pubs, slots
}

// TestBadInputLocalMistakes: a missing --config file and a warehouse that
// cannot be created or written are configuration errors (exit 2, not 4
// after the retry budget) that name the path and the fix.
func TestBadInputLocalMistakes(t *testing.T) {
	bin := binForOthers(t, testenv.Tidemark(t))
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bad_local")
	missing := filepath.Join(t.TempDir(), "tidemark.yaml")
	code, out := runBin(t, bin, nil, "run", "--config", missing)
	wantRefusal(t, "missing --config", code, out, fault.ExitConfig, "bad_config", missing, "--config")

	// Not creatable: the parent belongs to root (0o755) and tidemark runs as nobody.
	cred := nobody(t)
	parent := sharedDir(t)
	wh := filepath.Join(parent, "lake")
	code, out = runBin(t, bin, cred, "run", "--source", srcURL, "--warehouse", wh, "--name", "src")
	wantRefusal(t, "warehouse not creatable", code, out, fault.ExitConfig, "warehouse_access", wh, "mkdir -p "+wh, "--warehouse")

	// Exists, not writable.
	if err := os.Mkdir(wh, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out = runBin(t, bin, cred, "run", "--source", srcURL, "--warehouse", wh, "--name", "src")
	wantRefusal(t, "warehouse not writable", code, out, fault.ExitConfig, "warehouse_access", wh, "chown -R", "--warehouse")

	// A writable directory holding a catalog.db the user may not write.
	cat, err := app.OpenCatalog(context.Background(), wh, config.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	cat.Close()
	if err := os.Chmod(wh, 0o777); err != nil {
		t.Fatal(err)
	}
	code, out = runBin(t, bin, cred, "run", "--source", srcURL, "--warehouse", wh, "--name", "src")
	wantRefusal(t, "catalog.db not writable", code, out, fault.ExitConfig, "warehouse_access", wh, "chown -R")
	if pubs, slots := sourceObjects(t, srcURL); len(pubs)+len(slots) > 0 {
		t.Errorf("refused starts left publications %v and slots %v", pubs, slots)
	}
}

// TestBadInputReadOnlyStatus: `tidemark status` and `show` work for a user
// who may only read the warehouse, while the pipeline runs and after it
// stopped (the catalog is opened read-only; it used to fail with "attempt to
// write a readonly database").
func TestBadInputReadOnlyStatus(t *testing.T) {
	tm := testenv.Tidemark(t)
	bin := binForOthers(t, tm)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bad_ro")
	pg.Exec(t, srcURL, `CREATE TABLE public.items (id int PRIMARY KEY, v text); INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 5) g`)
	cred := nobody(t)
	wh := filepath.Join(sharedDir(t), "lake")
	r, _ := newRunner(t, tm, srcURL, "--name", "src", "--warehouse", wh)
	lk := openLake(t, wh, "src")
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "items"}}})
	lk.close()
	check := func(when string) {
		code, out := runBin(t, bin, cred, "status", "--warehouse", wh)
		if code != 0 || !strings.Contains(out, "items") {
			t.Errorf("status as a read-only user %s: exit %d:\n%s", when, code, out)
		}
		code, out = runBin(t, bin, cred, "show", "--warehouse", wh, "--format", "json", "bronze.src.public.items")
		if code != 0 || strings.Count(out, `"id"`) != 5 {
			t.Errorf("show as a read-only user %s: exit %d:\n%s", when, code, out)
		}
	}
	check("while the pipeline runs")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	check("after the pipeline stopped")
	// Nothing the read-only user did changed the lake: run resumes and
	// captures a new row (which also proves it runs before it is stopped).
	pg.Exec(t, srcURL, `INSERT INTO public.items VALUES (6, 'after')`)
	s = r.Start()
	lk = openLake(t, wh, "src")
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "items"}}})
	lk.close()
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	if rows := bronzetest.Read(t, wh, "bronze", "src", "public", "items"); len(rows) != 6 {
		t.Errorf("bronze.src.public.items has %d rows after the restart, want 6", len(rows))
	}
}

// TestBadInputServerSettings: wal_level, max_replication_slots and
// max_wal_senders are checked at start: server_config (exit 2) with the
// setting to change, before a publication or slot is created.
func TestBadInputServerSettings(t *testing.T) {
	bin := testenv.Tidemark(t)
	t.Run("wal_level", func(t *testing.T) {
		t.Parallel()
		pg := startPG(t, map[string]string{"wal_level": "replica"})
		srcURL := pg.CreateDB(t, "bad_wal")
		pg.Exec(t, srcURL, `CREATE TABLE public.a (id int PRIMARY KEY)`)
		code, out := runBin(t, bin, nil, "run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src")
		wantRefusal(t, "wal_level=replica", code, out, fault.ExitConfig, "server_config", "wal_level = replica", "ALTER SYSTEM SET wal_level = logical", "restart")
		if pubs, slots := sourceObjects(t, srcURL); len(pubs)+len(slots) > 0 {
			t.Errorf("the refused start left publications %v and slots %v", pubs, slots)
		}
	})
	t.Run("slots and senders", func(t *testing.T) {
		t.Parallel()
		pg := startPG(t, map[string]string{"max_replication_slots": "1", "max_wal_senders": "1"})
		srcURL := pg.CreateDB(t, "bad_slots")
		pg.Exec(t, srcURL, `CREATE TABLE public.a (id int PRIMARY KEY)`)
		pg.Exec(t, srcURL, `SELECT pg_create_logical_replication_slot('someone_else', 'pgoutput')`)
		code, out := runBin(t, bin, nil, "run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src")
		wantRefusal(t, "no free slot", code, out, fault.ExitConfig, "server_config", "max_replication_slots = 1", "someone_else", "pg_drop_replication_slot", "ALTER SYSTEM SET max_replication_slots = 2")
		pubs, _ := sourceObjects(t, srcURL)
		if len(pubs) > 0 {
			t.Errorf("the refused start left publications %v", pubs)
		}
		pg.Exec(t, srcURL, `SELECT pg_drop_replication_slot('someone_else')`)

		// The one walsender is taken by another replication client.
		cfg, err := pgconn.ParseConfig(srcURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["replication"] = "database"
		other, err := pgconn.ConnectConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(context.Background())
		code, out = runBin(t, bin, nil, "run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src")
		wantRefusal(t, "no free walsender", code, out, fault.ExitConfig, "server_config", "max_wal_senders = 1", "ALTER SYSTEM SET max_wal_senders = 2")
		if pubs, slots := sourceObjects(t, srcURL); len(pubs)+len(slots) > 0 {
			t.Errorf("the refused start left publications %v and slots %v", pubs, slots)
		}
	})
}

// startPG starts a server of its own with settings, stopped at the end.
func startPG(t *testing.T, settings map[string]string) *testenv.PG {
	t.Helper()
	pg, err := testenv.Start(testenv.Options{Settings: settings})
	if err != nil {
		t.Fatalf("start PostgreSQL with %v: %v", settings, err)
	}
	t.Cleanup(func() { pg.Stop() })
	return pg
}

// roleURL creates a LOGIN role with the given attributes and returns a
// source URL that connects as it; the role is dropped at the end.
func roleURL(t *testing.T, pg *testenv.PG, srcURL, attrs string) (string, string) {
	t.Helper()
	role := fmt.Sprintf("tm_bad_%d", time.Now().UnixNano()%1e9)
	const password = "bad-input-pw"
	pg.Exec(t, pg.URL("postgres"), fmt.Sprintf(`CREATE ROLE %s LOGIN %s PASSWORD '%s'`, role, attrs, password))
	t.Cleanup(func() {
		ctx := context.Background()
		if c, err := pgx.Connect(ctx, srcURL); err == nil {
			c.Exec(ctx, "DROP OWNED BY "+role)
			c.Close(ctx)
		}
		if c, err := pgx.Connect(ctx, pg.URL("postgres")); err == nil {
			c.Exec(ctx, "DROP OWNED BY "+role)
			if _, err := c.Exec(ctx, "DROP ROLE "+role); err != nil {
				t.Logf("drop role %s: %v", role, err)
			}
			c.Close(ctx)
		}
	})
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return role, u.String()
}

// TestBadInputRolePrivileges: a role without REPLICATION, without CONNECT,
// or without the right to create the publication it needs is refused at
// start with permission_denied (exit 3) and the GRANT/ALTER to run, before
// anything is created.
func TestBadInputRolePrivileges(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bad_role")
	pg.Exec(t, srcURL, `CREATE TABLE public.a (id int PRIMARY KEY); INSERT INTO public.a VALUES (1)`)
	dbName := strings.TrimPrefix(mustParse(t, srcURL).Path, "/")

	role, noRepl := roleURL(t, pg, srcURL, "NOREPLICATION")
	code, out := runBin(t, bin, nil, "run", "--source", noRepl, "--warehouse", t.TempDir(), "--name", "src")
	wantRefusal(t, "no REPLICATION", code, out, fault.ExitFatal, "permission_denied", "REPLICATION", `ALTER ROLE "`+role+`" REPLICATION`)

	role, repl := roleURL(t, pg, srcURL, "REPLICATION")
	pg.Exec(t, srcURL, fmt.Sprintf(`GRANT SELECT ON public.a TO %s`, role))
	// FOR ALL TABLES (no --tables) needs a superuser.
	code, out = runBin(t, bin, nil, "run", "--source", repl, "--warehouse", t.TempDir(), "--name", "src")
	wantRefusal(t, "may not create FOR ALL TABLES", code, out, fault.ExitFatal, "permission_denied", "superuser", "CREATE PUBLICATION")
	// FOR TABLE needs CREATE on the database and ownership of the table.
	code, out = runBin(t, bin, nil, "run", "--source", repl, "--warehouse", t.TempDir(), "--name", "src", "--tables", "public.a")
	wantRefusal(t, "may not create FOR TABLE", code, out, fault.ExitFatal, "permission_denied", "CREATE on the database", `"public"."a"`)
	if pubs, slots := sourceObjects(t, srcURL); len(pubs)+len(slots) > 0 {
		t.Errorf("refused starts left publications %v and slots %v", pubs, slots)
	}

	// No CONNECT on the database.
	pg.Exec(t, srcURL, fmt.Sprintf(`REVOKE CONNECT ON DATABASE %s FROM PUBLIC`, pgx.Identifier{dbName}.Sanitize()))
	code, out = runBin(t, bin, nil, "run", "--source", repl, "--warehouse", t.TempDir(), "--name", "src")
	wantRefusal(t, "no CONNECT", code, out, fault.ExitFatal, "permission_denied", "GRANT CONNECT ON DATABASE")
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestBadInputPublicationMistakes: --tables with a FOR ALL TABLES
// publication is refused (it would capture every table); --tables naming a
// table that does not exist, or one its merge key cannot key, is refused,
// which then drops the publication it created, never one that existed
// before; a keyless table is captured
// into bronze only, never a refusal of the run (TestKeylessTableBronzeOnly,
// TestNamedErrors/no_primary_key for one listed in --tables).
func TestBadInputPublicationMistakes(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "bad_pub")
	pg.Exec(t, srcURL, `CREATE TABLE public.accounts (id int PRIMARY KEY, v text); INSERT INTO public.accounts SELECT g, 'a' FROM generate_series(1, 10) g;
		CREATE TABLE public.history (id int, v text); INSERT INTO public.history VALUES (1, 'h')`)
	run := func(args ...string) (int, string) {
		return runBin(t, bin, nil, append([]string{"run", "--source", srcURL, "--warehouse", t.TempDir(), "--name", "src"}, args...)...)
	}

	// A keyless table under the FOR ALL TABLES publication tidemark
	// creates is captured into bronze only; the others run.
	r, wh := newRunner(t, bin, srcURL, "--name", "src")
	lk := openLake(t, wh, "src")
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, []oddTable{{id: change.TableID{Schema: "public", Name: "accounts"}}, {id: change.TableID{Schema: "public", Name: "history"}}})
	lk.close()
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	if rows := tryRead(wh, "bronze", "src", "public", "history"); len(rows) != 1 {
		t.Errorf("bronze.src.public.history holds %d rows, want its one row", len(rows))
	}
	if code, out := runBin(t, bin, nil, "status", "--warehouse", wh); code != 0 || !strings.Contains(out, "bronze only, no silver: bronze.src.public.history: [no_primary_key]") {
		t.Errorf("tidemark status (exit %d) does not name public.history as bronze only:\n%s", code, out)
	}

	// A FOR ALL TABLES publication of the operator's, with --tables.
	pg.Exec(t, srcURL, `CREATE PUBLICATION everything FOR ALL TABLES`)
	code, out := run("--name", "other", "--publication", "everything", "--tables", "public.accounts")
	wantRefusal(t, "--tables with FOR ALL TABLES", code, out, fault.ExitConfig, "bad_config", `"everything" is FOR ALL TABLES`, "Omit --tables", `FOR TABLE "public"."accounts"`, "--publication")
	pg.Exec(t, srcURL, `CREATE PUBLICATION listed FOR TABLE public.accounts`)

	// A table whose declared merge key cannot key it, in the --tables
	// list of the publication tidemark creates: refused, and the
	// publication dropped.
	code, out = run("--name", "fifth", "--tables", "public.accounts,public.history", "--merge-keys", "public.history=nope")
	wantRefusal(t, "bad merge key, listed in --tables", code, out, fault.ExitConfig, "bad_config", `"public"."history"`, `"nope" is not a column`, "leave it out of tables: (--tables)")
	if strings.Contains(out, "DROP TABLE") {
		t.Errorf("the advice for the publication this start created and drops suggests DROP TABLE:\n%s", out)
	}

	// --tables naming a table the database does not have.
	code, out = run("--name", "fourth", "--tables", "public.accounts,public.acounts")
	wantRefusal(t, "--tables names a missing table", code, out, fault.ExitConfig, "bad_config", `"public"."acounts"`, "check the name")

	pubs, slots := sourceObjects(t, srcURL)
	if want := []string{"everything", "listed", "tidemark_src"}; fmt.Sprint(pubs) != fmt.Sprint(want) {
		t.Errorf("publications %v, want %v (those of the operator kept, none left by a refused start)", pubs, want)
	}
	if want := []string{"tidemark_src"}; fmt.Sprint(slots) != fmt.Sprint(want) {
		t.Errorf("slots %v, want %v", slots, want)
	}
}
