package app_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMySQLTimeAsText: under time_as text a MariaDB TIME column, negative
// and beyond 24 hours included, lands in silver as a string, from the
// snapshot and from the binlog, and tidemark verify (given the same
// time_as) finds silver equal to the source.
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
}
