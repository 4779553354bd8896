package app_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
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

// TestMySQLMaxValueBytes: with max_value_bytes 1 MiB on MariaDB, a row with
// a 2 MiB LONGBLOB or LONGTEXT value (in the snapshot, inserted or updated
// while streaming) goes to bronze.<source>._dead_letter with its table, key,
// position and the reason value_too_large, without the value; a value of
// exactly the maximum passes; a delete of a row with such a value is
// written without it (named in cdc_unchanged); the table's other rows
// reach silver equal to the source, and a key whose update was refused
// keeps its earlier row, never half of the new one.
func TestMySQLMaxValueBytes(t *testing.T) {
	bin := testenv.Tidemark(t)
	m := testenv.SharedMariaDB(t)
	dbname := m.CreateDB(t, "mymaxvalue")
	const bigConcat = `SET SESSION group_concat_max_len = 4294967295; `
	const atMax = `REPEAT('m', 1048576)` // exactly max_value_bytes
	m.ExecIn(t, dbname, `CREATE TABLE docs (id int PRIMARY KEY, n int, b longblob, t longtext)`)
	m.ExecIn(t, dbname, bigConcat+`INSERT INTO docs VALUES
		(1, 1, `+randomBlob(2)+`, 'one'),
		(2, 1, 'small', 'two'),
		(3, 1, NULL, `+atMax+`),
		(4, 1, 'four', NULL),
		(7, 1, NULL, REPEAT('s', 2 << 20))`)
	db, err := sql.Open("mysql", m.RootDSN(dbname))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	docs := myTable{"docs", []string{"id"}, []string{"id", "n", "b", "t"}}
	row2 := myRows(t, db, docs)["2"]

	r, wh := newRunner(t, bin, m.URL(dbname), "--max-value-bytes", "1MiB")
	s := r.Start()
	l := myLake{t: t, wh: wh, source: dbname, dbname: dbname}
	myWaitFor(t, s, 2*time.Minute, "the snapshot of docs", func() bool {
		st, _ := l.snapshot("docs")
		return st == "done"
	})
	m.ExecIn(t, dbname, bigConcat+`INSERT INTO docs VALUES (5, 1, NULL, REPEAT('x', 2 << 20)), (6, 1, 'six', `+atMax+`)`)
	m.ExecIn(t, dbname, bigConcat+`UPDATE docs SET b = `+randomBlob(2)+`, n = 2 WHERE id = 2`)
	m.ExecIn(t, dbname, `UPDATE docs SET b = 'one, small now', n = 2 WHERE id = 1`) // its old row holds 2 MiB
	m.ExecIn(t, dbname, `UPDATE docs SET n = 2 WHERE id = 4; DELETE FROM docs WHERE id = 7`)
	target := binlogLSN(t, db)
	myWaitFor(t, s, 2*time.Minute, "the checkpoint to reach the binlog end", func() bool { return l.position() >= target })
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// The dead letters: one per refused row, with what a user needs to find
	// the row again, and never the value.
	seen := map[string]string{}
	for _, row := range bronzetest.Read(t, wh, append(bronze.SourceNamespace(dbname), bronze.DeadLetterTable)...) {
		rawText, _ := row[bronze.ColRaw].(string)
		var raw map[string]any
		if err := json.Unmarshal([]byte(rawText), &raw); err != nil {
			t.Errorf("dead letter raw is not JSON: %.200s", rawText)
			continue
		}
		id := fmt.Sprint(raw["id"])
		seen[id] = fmt.Sprint(row[bronze.ColOp])
		if want := dbname + ".docs"; row[bronze.ColTable] != want {
			t.Errorf("dead letter of id %s: source_table %v, want %s", id, row[bronze.ColTable], want)
		}
		msg, _ := row[bronze.ColError].(string)
		col := map[string]string{"1": "b", "2": "b", "5": "t", "7": "t"}[id]
		if !strings.Contains(msg, fmt.Sprintf("column %q", col)) || !strings.Contains(msg, "value_too_large") || !strings.Contains(msg, "max_value_bytes (1048576)") {
			t.Errorf("dead letter of id %s: error %q does not name the column %s, the reason value_too_large and the maximum", id, msg, col)
		}
		if _, ok := raw[col]; ok || len(rawText) > 4096 {
			t.Errorf("dead letter of id %s: raw (%d bytes) holds the value over the maximum", id, len(rawText))
		}
		if lsn, _ := row[bronze.ColLSN].(int64); lsn <= 0 {
			t.Errorf("dead letter of id %s: no position (cdc_source_lsn %v)", id, row[bronze.ColLSN])
		}
	}
	if want := map[string]string{"1": "r", "7": "r", "5": "c", "2": "u"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("dead letters (id: op) %v, want %v", seen, want)
	}
	// The delete of 7 is in bronze, its 2 MiB value left out.
	deleted := false
	for _, row := range bronzetest.Read(t, wh, "bronze", dbname, dbname, "docs") {
		if row[bronze.ColOp] != "d" {
			continue
		}
		if fmt.Sprint(row["id"]) == "7" {
			deleted = true
		}
		if row["t"] != nil || !strings.Contains(fmt.Sprint(row[bronze.ColUnchanged]), "t") {
			t.Errorf("bronze delete of id %v: t = %.20v, cdc_unchanged %v; want the value left out and named", row["id"], row["t"], row[bronze.ColUnchanged])
		}
	}
	if !deleted {
		t.Errorf("bronze docs has no delete of id 7")
	}

	// Silver: the source's rows, but for 2, whose refused update leaves its
	// earlier row, and 5, whose insert was refused.
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", dbname).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	want := myRows(t, db, docs)
	want["2"] = row2
	delete(want, "5")
	got := map[string][]string{}
	for _, r := range bronzetest.Read(t, wh, "silver", dbname, dbname, "docs") {
		vals := make([]string, len(docs.cols))
		for i, c := range docs.cols {
			if b, ok := r[c].([]byte); ok {
				vals[i] = string(b)
			} else {
				vals[i] = lakeText(r[c])
			}
		}
		got[vals[0]] = vals
	}
	short := func(v []string) string {
		var b strings.Builder
		for _, s := range v {
			fmt.Fprintf(&b, "%.12s(%d) ", s, len(s))
		}
		return b.String()
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || strings.Join(g, "|") != strings.Join(w, "|") {
			t.Errorf("silver docs id %s: %s, want %s", k, short(g), short(w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("silver docs id %s: %s, want no row", k, short(g))
		}
	}
}
