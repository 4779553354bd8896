package app_test

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestShowOrderAndPositions checks what a user reads in `tidemark show`: a
// bronze table in source order (the snapshot's r rows, then the changes in
// the order they were made), --limit taking the first changes, every
// cdc_source_lsn printed as stored and in the X/Y notation status uses, and
// a silver table by key.
func TestShowOrderAndPositions(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "show_order")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE t (id int PRIMARY KEY, v text);
		INSERT INTO t SELECT g, 'snap' FROM generate_series(1, 3) g;`)
	r, wh := newRunner(t, bin, srcURL)
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "t")
	for _, sql := range []string{ // one transaction each: c, u, d
		`INSERT INTO t VALUES (10, 'new')`,
		`UPDATE t SET v = 'changed' WHERE id = 1`,
		`DELETE FROM t WHERE id = 2`,
	} {
		pg.Exec(t, srcURL, sql)
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "t")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	bronzeName := "bronze." + source + ".public.t"

	// The table format: columns by header, cells split at tabwriter's gaps.
	show := func(args ...string) (header []string, rows []map[string]string) {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"show", "--warehouse", wh}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tidemark show %v: %v\n%s", args, err, out)
		}
		gap := regexp.MustCompile(`\s{2,}`)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		header = gap.Split(strings.TrimSpace(lines[0]), -1)
		for _, l := range lines[1:] {
			cells := gap.Split(strings.TrimSpace(l), -1)
			if len(cells) != len(header) {
				t.Fatalf("tidemark show %v: row %q has %d cells, the header %d:\n%s", args, l, len(cells), len(header), out)
			}
			row := map[string]string{}
			for i, h := range header {
				row[h] = cells[i]
			}
			rows = append(rows, row)
		}
		return header, rows
	}
	opsOf := func(rows []map[string]string) string {
		var b strings.Builder
		for _, r := range rows {
			b.WriteString(r["cdc_op"] + r["id"] + " ")
		}
		return strings.TrimSpace(b.String())
	}

	_, rows := show(bronzeName)
	if got, want := opsOf(rows), "r1 r2 r3 c10 u1 d2"; got != want {
		t.Errorf("bronze printed in the order %q, want %q (snapshot, then the changes as made)", got, want)
	}
	lsnCell := regexp.MustCompile(`^(\d+) \(([0-9A-F]+/[0-9A-F]+)\)$`)
	for _, r := range rows {
		m := lsnCell.FindStringSubmatch(r["cdc_source_lsn (pg_lsn)"])
		if m == nil {
			t.Errorf("cdc_source_lsn (pg_lsn) cell %q is not \"<integer> (X/Y)\"; row %v", r["cdc_source_lsn (pg_lsn)"], r)
			continue
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		if postgres.FormatLSN(n) != m[2] {
			t.Errorf("cdc_source_lsn %s is printed as %s, want %s", m[1], m[2], postgres.FormatLSN(n))
		}
	}
	if _, first := show(bronzeName, "--limit", "4"); opsOf(first) != "r1 r2 r3 c10" {
		t.Errorf("--limit 4 printed %q, want the first 4 changes r1 r2 r3 c10", opsOf(first))
	}

	// JSON keeps the stored integer, in the same order.
	out, err := exec.Command(bin, "show", "--warehouse", wh, "--format", "json", bronzeName).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark show --format json: %v\n%s", err, out)
	}
	var ops []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Op  string `json:"cdc_op"`
			ID  int    `json:"id"`
			LSN int64  `json:"cdc_source_lsn"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil || row.LSN <= 0 {
			t.Fatalf("JSON row %q: %v (cdc_source_lsn must be a positive integer)", line, err)
		}
		ops = append(ops, row.Op+strconv.Itoa(row.ID))
	}
	if got := strings.Join(ops, " "); got != "r1 r2 r3 c10 u1 d2" {
		t.Errorf("show --format json printed the order %q", got)
	}

	// Silver: the table as it is now, by key.
	if _, silverRows := show("silver." + source + ".public.t"); len(silverRows) != 3 ||
		silverRows[0]["id"]+silverRows[0]["v"] != "1changed" || silverRows[1]["id"] != "3" || silverRows[2]["id"] != "10" {
		t.Errorf("silver printed %v, want ids 1 (changed), 3, 10 in key order", silverRows)
	}
}
