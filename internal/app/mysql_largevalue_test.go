package app_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// randomBlob is MariaDB SQL for about mb MiB of incompressible bytes (16
// bytes of MD5 per row of a sequence; RANDOM_BYTES is MariaDB 10.10+ and
// 1 KiB at most). The session's group_concat_max_len must allow it.
func randomBlob(mb int) string {
	return fmt.Sprintf(`(SELECT UNHEX(GROUP_CONCAT(MD5(RAND()) SEPARATOR '')) FROM seq_1_to_%d)`, mb<<20/16)
}

// TestMySQLLargeValue: a row holding a LONGBLOB of random bytes (largeValueMB
// MiB, 96 by default: its Parquet page is over the 64 MiB arrow-go's readers
// accept by default) and a LONGTEXT of base64 goes through the snapshot,
// bronze, streamed updates (the binlog's full row images carry the value
// twice: before and after) and silver, copy-on-write; tidemark verify finds silver equal to
// the source, tidemark maintain rewrites the files of large values, and verify
// finds silver equal again.
func TestMySQLLargeValue(t *testing.T) {
	if testing.Short() {
		t.Skip("about 2 GiB of memory and 2-3 minutes")
	}
	mb := largeValueMB(t)
	bin := testenv.Tidemark(t)
	// A server of its own: packets and InnoDB's redo log sized for the
	// value (a BLOB's redo must fit in a tenth of the log).
	m := testenv.StartMariaDB(t,
		testenv.MariaDBSetting("max_allowed_packet", "1G"),
		testenv.MariaDBSetting("innodb_log_file_size", fmt.Sprintf("%dM", max(48, 12*mb))))
	dbname := m.CreateDB(t, "mylarge")
	m.ExecIn(t, dbname, `CREATE TABLE big (id int PRIMARY KEY, n int, b longblob, t longtext)`)
	const bigConcat = `SET SESSION group_concat_max_len = 4294967295; `
	m.ExecIn(t, dbname, bigConcat+`INSERT INTO big VALUES (1, 1, `+randomBlob(mb)+`, NULL), (2, 1, 'small', 'small')`)
	srcURL := m.URL(dbname)
	// Silver copy-on-write (TestLargeValue has the default, merge-on-read):
	// each merge rewrites the file holding the value.
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "1s", "--log-level", "info", "--silver-delete-mode", "copy-on-write")
	s := r.Start()
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	myWaitFor(t, s, 3*time.Minute, "the snapshot of big", func() bool {
		st, _ := l.snapshot("big")
		return st == "done"
	})
	snapHWM := peakRSS(s.Cmd.Process.Pid)
	// A streamed update of the large value (and a large text), and one of
	// another column (the binlog sends the value again: FULL row image).
	m.ExecIn(t, dbname, bigConcat+`UPDATE big SET b = `+randomBlob(mb)+`, t = TO_BASE64(`+randomBlob(max(1, mb/4))+`), n = 2 WHERE id = 1`)
	m.ExecIn(t, dbname, `UPDATE big SET n = 3 WHERE id = 1`)
	rep, code, out := myVerify(t, srcURL, wh, dbname)
	hwm := peakRSS(s.Cmd.Process.Pid)
	if st := myTableReport(t, rep, "big"); code != 0 || st.Status != verify.StatusEqual || st.SourceRows != 2 {
		t.Fatalf("tidemark verify exited %d, big %s with %d source rows, want 0, equal, 2:\n%s", code, st.Status, st.SourceRows, out)
	}
	if code := s.Stop(t, 2*time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("value %d MiB: peak RSS of tidemark run %s when the snapshot was done, %s in all (memory_budget 256 MiB)", mb, snapHWM, hwm)
	logs, _ := os.ReadFile(r.LogPath)
	if strings.Contains(string(logs), "silver merge failed") {
		t.Errorf("a silver merge failed on the way")
	}
	maintainLargeValues(t, bin, wh, dbname, int64(mb)<<20*7/4) // b, and t: base64 of mb/4
	s = r.Start()
	rep, code, out = myVerify(t, srcURL, wh, dbname)
	if code := s.Stop(t, 2*time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	if st := myTableReport(t, rep, "big"); code != 0 || st.Status != verify.StatusEqual {
		t.Fatalf("tidemark verify after tidemark maintain exited %d, want 0 (equal):\n%s", code, out)
	}
}
