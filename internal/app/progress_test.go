package app_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestProgressLineReportsLagFromTheFirstLine (issue 14): a run restarted
// behind a WAL backlog reports that backlog in its first "capture
// progress" line (lag_bytes, measured against the server's WAL end, not
// the walsender's own position) with a rate that is not zero.
func TestProgressLineReportsLagFromTheFirstLine(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "progress_lag")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE events (id bigint PRIMARY KEY, payload text)`)
	r, wh := newRunner(t, bin, srcURL)
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "events")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	// A backlog of 40 transactions, about 40 MB of WAL, while stopped.
	for i := range 40 {
		pg.Exec(t, srcURL, `INSERT INTO events SELECT g, repeat(md5(g::text), 8) FROM generate_series(`+
			strconv.Itoa(i*5000+1)+`, `+strconv.Itoa((i+1)*5000)+`) g`)
	}
	s = r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 3*time.Minute, "events")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	data, err := os.ReadFile(r.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`msg="capture progress".* rows_per_sec=(\d+) lag_bytes=(\d+)`).FindSubmatch(data[s.Offset:])
	if m == nil {
		t.Fatalf("the restarted session logged no capture progress line:\n%s", data[s.Offset:])
	}
	rate, _ := strconv.ParseInt(string(m[1]), 10, 64)
	lag, _ := strconv.ParseInt(string(m[2]), 10, 64)
	t.Logf("first progress line of the restarted session: %s", m[0])
	if lag < 10<<20 { // a quarter of the backlog: the first flush comes long before the end
		t.Errorf("the first progress line reports lag_bytes=%d while the session started about 40 MB behind", lag)
	}
	if rate == 0 {
		t.Errorf("the first progress line reports rows_per_sec=0 after committing rows")
	}
}
