package app_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

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

// randomText is SQL for about mb MiB of incompressible text (base64 of
// random bytes; pgcrypto is not needed).
func randomText(mb int) string {
	md5s := mb << 20 * 3 / 4 / 16 // 16 random bytes per md5
	return fmt.Sprintf(`(SELECT encode(decode(string_agg(md5(random()::text), ''), 'hex'), 'base64') FROM generate_series(1, %d))`, md5s)
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
	s := r.start()
	deadline := time.Now().Add(3 * time.Minute)
	lv := openLake(t, wh, source)
	for lv.snapshotStatus("big") != "done" {
		if s.exited() || time.Now().After(deadline) {
			t.Fatalf("the snapshot of big did not complete (exited: %v)", s.exited())
		}
		time.Sleep(200 * time.Millisecond)
	}
	snapHWM := peakRSS(s.cmd.Process.Pid)
	// A streamed update of the large value, and one of another column (the
	// value is unchanged TOAST: silver keeps it).
	pg.Exec(t, srcURL, `UPDATE big SET v = `+randomText(mb)+`, n = 2 WHERE id = 1`)
	pg.Exec(t, srcURL, `UPDATE big SET n = 3 WHERE id = 1`)
	out, err := exec.Command(bin, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "3m").CombinedOutput()
	hwm := peakRSS(s.cmd.Process.Pid)
	code := s.stop(t, 2*time.Minute)
	if err != nil {
		t.Fatalf("tidemark verify: %v\n%s", err, out)
	}
	if code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("tidemark verify:\n%s", strings.TrimSpace(string(out)))
	t.Logf("value %d MiB: peak RSS of tidemark run %s when the snapshot was done, %s in all (memory_budget 256 MiB)", mb, snapHWM, hwm)
	// Maintenance leaves the files of large values alone (iceberg-go's
	// rewrite cannot read them) and must not fail on them.
	if out, err := exec.Command(bin, "maintain", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Errorf("tidemark maintain: %v\n%s", err, out)
	} else {
		t.Logf("tidemark maintain:\n%s", strings.TrimSpace(string(out)))
	}
	logs, _ := os.ReadFile(r.logPath)
	if strings.Contains(string(logs), "silver merge failed") {
		t.Errorf("a silver merge failed on the way")
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
