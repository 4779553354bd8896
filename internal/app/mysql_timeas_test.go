package app_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// TestMySQLTimeAsText: under time_as text a MariaDB TIME column, negative
// and beyond 24 hours included, lands in silver as a string, from the
// snapshot and from the binlog, and tidemark verify (given the same
// time_as) finds silver equal to the source. A start under time_as micros
// is refused naming time_as and the recovery; `tidemark resnapshot
// --replace` (writes before and after it) rebuilds the table as long
// microseconds, which verify finds equal.
func TestMySQLTimeAsText(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	m := testenv.StartMariaDB(t)
	dbname := m.CreateDB(t, "mytimeas")
	m.ExecIn(t, dbname, `CREATE TABLE spans (id int PRIMARY KEY, d time(6), s time);
		INSERT INTO spans VALUES (1, '-838:59:59.000000', '838:59:59'), (2, '25:00:00.5', '-00:00:01'), (3, NULL, '00:00:00')`)
	srcURL := m.URL(dbname)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "500ms", "--time-as", "text")
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	s := r.Start()
	myWaitFor(t, s, 2*time.Minute, "the snapshot to finish", func() bool { st, _ := l.snapshot("spans"); return st == "done" })
	published := func() bool {
		ok := false
		l.read(func(cat *lake.Catalog) {
			_, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, "spans"))
			ok = err == nil
		})
		return ok
	}
	myWaitFor(t, s, 2*time.Minute, "silver spans to be published", published)
	m.ExecIn(t, dbname, `UPDATE spans SET d = '-01:02:03.4' WHERE id = 1; INSERT INTO spans VALUES (4, '100:00:00.000001', '-12:00:00')`)
	rep, code, out := myVerify(t, srcURL, wh, dbname, "--time-as", "text")
	if code != 0 {
		t.Fatalf("verify under time_as text: exit %d\n%s", code, out)
	}
	if tr := myTableReport(t, rep, "spans"); tr.SourceRows != 4 {
		t.Errorf("verify compared %d source rows, want 4: %+v", tr.SourceRows, tr)
	}
	l.read(func(cat *lake.Catalog) {
		tb, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, "spans"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"d", "s"} {
			f, ok := tb.Schema().FindFieldByName(c)
			if !ok || !f.Type.Equals(iceberg.PrimitiveTypes.String) {
				t.Errorf("silver column %s: %v, want string", c, f.Type)
			}
		}
	})
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Errorf("run exited %d", code)
	}

	// Another time_as on the same lake: refused at start, naming time_as
	// and the recovery, nothing mixed.
	r.Args = append(r.Args, "--time-as", "micros")
	s = r.Start()
	select {
	case <-s.Done:
	case <-time.After(2 * time.Minute):
		t.Fatal("tidemark did not stop when time_as changed")
	}
	if code := s.Cmd.ProcessState.ExitCode(); code != fault.ExitFatal {
		t.Errorf("exit code %d under a changed time_as, want %d", code, fault.ExitFatal)
	}
	log, _ := os.ReadFile(r.LogPath)
	for _, w := range []string{"[incompatible_schema]", `column "d"`, "time_as text", "time_as micros", "tidemark resnapshot --replace " + dbname + ".spans"} {
		if !strings.Contains(string(log[s.Offset:]), w) {
			t.Errorf("the log of the refused start does not say %q:\n%s", w, log[s.Offset:])
		}
	}

	// The recovery the error names, under time_as micros: the table is
	// rebuilt, its changes from before the request skipped (the
	// re-snapshot holds them), and verify finds it equal.
	// A change while stopped, before the request: the new table's stream
	// skips it (the re-snapshot, read after it, holds its effect).
	m.ExecIn(t, dbname, `UPDATE spans SET d = '-05:05:05' WHERE id = 1`)
	out, code = tidemarkArgs(t, r.As("resnapshot", "--replace", dbname+".spans")...)
	if code != 0 || !strings.Contains(out, "moved to bronze_replaced.") {
		t.Fatalf("tidemark resnapshot --replace %s.spans exited %d:\n%s", dbname, code, out)
	}
	t.Logf("tidemark resnapshot --replace:\n%s", out)
	m.ExecIn(t, dbname, `UPDATE spans SET s = '-00:00:02' WHERE id = 2; INSERT INTO spans VALUES (5, '01:00:00', NULL)`)
	s = r.Start()
	myWaitFor(t, s, 2*time.Minute, "the re-snapshot of spans", func() bool { st, _ := l.snapshot("spans"); return st == "done" })
	myWaitFor(t, s, 2*time.Minute, "the new silver spans to be published", published)
	m.ExecIn(t, dbname, `DELETE FROM spans WHERE id = 3; INSERT INTO spans VALUES (6, '-00:00:00.5', '838:00:00')`)
	rep, code, out = myVerify(t, srcURL, wh, dbname, "--time-as", "micros")
	if code != 0 {
		t.Fatalf("verify under time_as micros after resnapshot --replace: exit %d\n%s", code, out)
	}
	if tr := myTableReport(t, rep, "spans"); tr.SourceRows != 5 || tr.Status != verify.StatusEqual {
		t.Errorf("verify after resnapshot --replace: %+v, want 5 rows equal", tr)
	}
	l.read(func(cat *lake.Catalog) {
		tb, err := cat.LoadTable(context.Background(), silver.Ident(dbname, dbname, "spans"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"d", "s"} {
			f, ok := tb.Schema().FindFieldByName(c)
			if !ok || !f.Type.Equals(iceberg.PrimitiveTypes.Int64) {
				t.Errorf("silver column %s after resnapshot --replace under micros: %v, want long", c, f.Type)
			}
		}
	})
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Errorf("run exited %d", code)
	}
	for _, row := range bronzetest.Read(t, wh, "bronze", dbname, dbname, "spans") {
		if row.Op() != "r" && fmt.Sprint(row["d"]) == "-18305000000" {
			t.Errorf("the new bronze spans holds the change from before resnapshot --replace: %v", row)
		}
	}
}
