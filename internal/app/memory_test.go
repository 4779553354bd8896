package app_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestE2EBigValuesUnderSmallBudget runs a pipeline with the smallest
// memory_budget (64MiB: commit_bytes and snapshot chunks 4MiB) on a table
// of 6 MiB values, each bigger than a snapshot chunk and most of a commit:
// a snapshot of them, then one streamed transaction of 48 MiB (streamed in
// progress by PostgreSQL and spooled), then updates and a delete. Bronze
// must replay to the source and silver must verify against it. This checks
// correctness under the budget, not the process's size.
func TestE2EBigValuesUnderSmallBudget(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_bigbudget")
	source := sourceName(t, srcURL)
	const valueMiB = 6
	// Each value distinct (md5 of its key, repeated) and stored out of line,
	// uncompressed, so that the WAL carries every byte of it.
	value := func(expr string) string {
		return "repeat(md5((" + expr + ")::text), " + strconv.Itoa(valueMiB<<20/32) + ")"
	}
	pg.Exec(t, srcURL, `
		CREATE TABLE big (id int PRIMARY KEY, note text, v text);
		ALTER TABLE big ALTER COLUMN v SET STORAGE EXTERNAL;
		INSERT INTO big SELECT g, 'snap', `+value("g")+` FROM generate_series(1, 4) g;
		DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET logical_decoding_work_mem = %L', current_database(), '64kB'); END $$;`)
	r, wh := newRunner(t, bin, srcURL, "--memory-budget", "64MiB", "--tables", "public.big")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 5*time.Minute, "big")

	// One transaction of 8 × 6 MiB: with logical_decoding_work_mem at 64kB
	// PostgreSQL streams it before its commit and tidemark spools it.
	pg.Exec(t, srcURL, `INSERT INTO big SELECT g, 'stream', `+value("g * 7")+` FROM generate_series(11, 18) g`)
	pg.Exec(t, srcURL, `
		UPDATE big SET v = `+value("id * 13")+`, note = 'updated' WHERE id IN (2, 12);
		UPDATE big SET note = 'unchanged toast' WHERE id = 3;
		DELETE FROM big WHERE id = 14;`)
	lk.waitCaughtUp(s, walLSN(t, srcURL), 5*time.Minute, "big")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	log, err := os.ReadFile(r.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"memory_budget=64MiB", "commit_bytes=4MiB", "snapshot_chunk_bytes=4MiB"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("tidemark's log lacks %q: the budget was not applied", want)
		}
	}
	verifyTable(t, srcURL, wh, source, "big", []string{"id"}, nil)
	checkSilver(t, r, srcURL, wh, source, []string{"big"})
}
