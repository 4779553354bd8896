package app_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// largeValueMB is the size of the large value, in MiB of text:
// TIDEMARK_LARGE_VALUE_MB, default 96 — base64 of random bytes, which
// compresses to about 75%, so its Parquet page is over the 64 MiB that
// arrow-go's readers accept by default. 200 and 1024 (PostgreSQL's limit)
// are opt-in sizes (docs/benchmarks.md).
func largeValueMB(t *testing.T) int {
	s := os.Getenv("TIDEMARK_LARGE_VALUE_MB")
	if s == "" {
		return 96
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("TIDEMARK_LARGE_VALUE_MB=%q: want a number of MiB", s)
	}
	return n
}

// randomText is SQL for mb MiB of incompressible text (base64 of random
// bytes; pgcrypto is not needed): 64-character pieces (48 random bytes
// each) joined, so no intermediate is larger than the value and a value up
// to PostgreSQL's limit (1 GB: TIDEMARK_LARGE_VALUE_MB=1000) can be made.
func randomText(mb int) string {
	return fmt.Sprintf(`(SELECT string_agg(encode(decode(md5(random()::text) || md5(random()::text) || md5(random()::text), 'hex'), 'base64'), '') FROM generate_series(1, %d))`, mb<<20/64)
}

// TestLargeValue: one row with a large incompressible text value goes
// through snapshot, bronze, a streamed update and silver; verify finds
// silver equal to the source. It logs the peak RSS of the run.
func TestLargeValue(t *testing.T) {
	if testing.Short() {
		t.Skip("about 1.5 GiB of memory and 1-2 minutes")
	}
	mb := largeValueMB(t)
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "large")
	pg.Exec(t, srcURL, `CREATE TABLE big (id int PRIMARY KEY, n int, v text);
		ALTER TABLE big ALTER COLUMN v SET STORAGE EXTERNAL;
		INSERT INTO big VALUES (1, 1, `+randomText(mb)+`), (2, 1, 'small');`)
	source := sourceName(t, srcURL)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "1s", "--log-level", "info")
	s := r.Start()
	// The waits grow with the value: 3 minutes per 96 MiB.
	wait := 3 * time.Minute * time.Duration(max(1, mb/96))
	deadline := time.Now().Add(wait)
	lv := openLake(t, wh, source)
	for lv.snapshotStatus("big") != "done" {
		if s.Exited() || time.Now().After(deadline) {
			t.Fatalf("the snapshot of big did not complete (exited: %v)", s.Exited())
		}
		time.Sleep(200 * time.Millisecond)
	}
	snapHWM := peakRSS(s.Cmd.Process.Pid)
	// A streamed update of the large value, and one of another column (the
	// value is unchanged TOAST: silver keeps it).
	pg.Exec(t, srcURL, `UPDATE big SET v = `+randomText(mb)+`, n = 2 WHERE id = 1`)
	pg.Exec(t, srcURL, `UPDATE big SET n = 3 WHERE id = 1`)
	out, err := exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", wait.String()).CombinedOutput()
	hwm := peakRSS(s.Cmd.Process.Pid)
	code := s.Stop(t, wait)
	if err != nil {
		t.Fatalf("tidemark verify: %v\n%s", err, out)
	}
	if code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("tidemark verify:\n%s", strings.TrimSpace(string(out)))
	t.Logf("value %d MiB: peak RSS of tidemark run %s when the snapshot was done, %s in all (memory_budget 256 MiB)", mb, snapHWM, hwm)
	logs, _ := os.ReadFile(r.LogPath)
	if strings.Contains(string(logs), "silver merge failed") {
		t.Errorf("a silver merge failed on the way")
	}
	maintainLargeValues(t, bin, wh, source, int64(mb)<<20*3/2)
	// Verify again, with a session running (verify compares at the
	// source's current position, which the pipeline must reach).
	s = r.Start()
	out, err = exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", wait.String()).CombinedOutput()
	code = s.Stop(t, wait)
	if err != nil {
		t.Fatalf("tidemark verify after tidemark maintain: %v\n%s", err, out)
	}
	if code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
}

// maintainLargeValues runs tidemark maintain on a lake whose silver table
// big holds a large value updated twice (data files of each version, the
// old ones deleted by position): compaction, by the run's merges or by
// maintain, must rewrite those files with the deletes folded in, whatever
// their page sizes, so that silver's files hold less than maxBytes (one
// copy of the live value, not one per version).
func maintainLargeValues(t *testing.T, bin, wh, source string, maxBytes int64) {
	t.Helper()
	cmd := exec.Command(bin, "maintain", "--warehouse", wh, "--name", source, "--format", "json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tidemark maintain: %v\n%s", err, out)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		// The child's own peak, as long as the test process is smaller
		// (Linux starts a child's peak at its parent's at fork).
		t.Logf("tidemark maintain: peak RSS %d MiB", ru.Maxrss>>10)
	}
	var results []maintain.Result
	if err := json.Unmarshal(out, &results); err != nil {
		t.Fatalf("tidemark maintain --format json: %v\n%s", err, out)
	}
	found := false
	for _, r := range results {
		if r.CompactError != "" {
			t.Errorf("tidemark maintain: %s: %s", r.Table, r.CompactError)
		}
		if !strings.HasPrefix(r.Table, "silver.") || !strings.HasSuffix(r.Table, ".big") {
			continue
		}
		found = true
		t.Logf("tidemark maintain: %s: data files %d -> %d (%d -> %d bytes), delete files %d -> %d, %d rewritten",
			r.Table, r.Before.DataFiles, r.After.DataFiles, r.Before.DataBytes, r.After.DataBytes,
			r.Before.DeleteFiles, r.After.DeleteFiles, r.Compact.RemovedDataFiles)
		if r.After.DeleteFiles != 0 || r.After.DataBytes >= maxBytes {
			t.Errorf("after tidemark maintain %s has %d delete files and %d data bytes, want none and under %d: "+
				"the files of the large value's old versions were not rewritten", r.Table, r.After.DeleteFiles, r.After.DataBytes, maxBytes)
		}
	}
	if !found {
		t.Errorf("tidemark maintain reported no silver table big:\n%s", out)
	}
}

// peakRSS returns VmHWM of process pid ("?" if unknown).
func peakRSS(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// TestMaxValueBytes: with max_value_bytes set, a row with a longer value
// (snapshot, insert, update) goes to bronze.<source>._dead_letter with its
// table, key, position and the reason value_too_large, without the value;
// the other rows, and the rows' earlier storable versions, reach silver.
func TestMaxValueBytes(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "maxvalue")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE mv (id int PRIMARY KEY, v text);
		INSERT INTO mv VALUES (1, repeat('x', 2000)), (2, 'small')`)
	tbl := change.TableID{Schema: "public", Name: "mv"}
	tables := []oddTable{{id: tbl, key: []string{"id"}}}
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms", "--max-value-bytes", "1KiB")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	pg.Exec(t, srcURL, `INSERT INTO mv VALUES (3, repeat('y', 1025)), (4, 'ok');
		UPDATE mv SET v = repeat('z', 5000) WHERE id = 2;
		INSERT INTO mv VALUES (5, repeat('w', 1024));`)
	lk.waitCaughtUpIDs(s, walLSN(t, srcURL), 2*time.Minute, tables)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	seen := map[string]string{}
	for _, row := range bronzetest.Read(t, wh, append(bronze.SourceNamespace(source), bronze.DeadLetterTable)...) {
		var raw map[string]any
		if err := json.Unmarshal([]byte(row[bronze.ColRaw].(string)), &raw); err != nil {
			t.Errorf("dead letter raw is not JSON: %v", row[bronze.ColRaw])
			continue
		}
		id := fmt.Sprint(raw["id"])
		seen[id] = row[bronze.ColOp].(string)
		if row[bronze.ColTable] != "public.mv" {
			t.Errorf("dead letter of id %s: source_table %v, want public.mv", id, row[bronze.ColTable])
		}
		msg, _ := row[bronze.ColError].(string)
		if !strings.Contains(msg, `"v"`) || !strings.Contains(msg, "value_too_large") || !strings.Contains(msg, "max_value_bytes (1024)") {
			t.Errorf("dead letter of id %s: error %q does not name the column, the reason value_too_large and the maximum", id, msg)
		}
		if _, ok := raw["v"]; ok {
			t.Errorf("dead letter of id %s: raw holds the value over the maximum: %.60s…", id, row[bronze.ColRaw])
		}
		if lsn, _ := row[bronze.ColLSN].(int64); lsn <= 0 {
			t.Errorf("dead letter of id %s: no position (cdc_source_lsn %v)", id, row[bronze.ColLSN])
		}
	}
	want := map[string]string{"1": "r", "3": "c", "2": "u"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("dead letters (id: op) %v, want %v", seen, want)
	}
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, row := range bronzetest.Read(t, wh, silver.Ident(source, "public", "mv")...) {
		v, _ := row["v"].(string)
		got[fmt.Sprint(row["id"])] = fmt.Sprintf("%.1s×%d", v, len(v))
	}
	// 2 keeps its last storable value; 5's value is exactly the maximum.
	wantSilver := map[string]string{"2": "s×5", "4": "o×2", "5": "w×1024"}
	if fmt.Sprint(got) != fmt.Sprint(wantSilver) {
		t.Errorf("silver mv = %v, want %v", got, wantSilver)
	}
}
