//go:build faults

package faults_test

// One source transaction larger than a silver merge step (issue 22): a
// million updates in one PostgreSQL transaction was merged in one step,
// the heap at 1.8-2 GiB against the 256 MiB default memory_budget. It is
// merged in parts committed once (internal/silver/parts.go): the session's
// peak RSS stays within memory_budget, a SIGKILL in the middle of the
// merge leaves silver at its previous commit (no half of the transaction),
// and the next session merges it whole: silver equals the source by
// `tidemark verify`.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bench"
)

// The transaction: every row of a table of bigTxRows updated, a tenth of
// them deleted, bigTxInserts rows inserted: at the default budget's merge
// step (about 50,000 changes of these rows) several steps, merged in parts.
const (
	bigTxRows    = 200_000
	bigTxInserts = 50_000
)

func TestQuickBigTransaction(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "1 process crash (kill -9 inside the merge of one transaction larger than a merge step)", &injections, &lost, &note)
	e := newEnv(t, "bigtx", envOptions{preload: bigTxRows})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 3*time.Minute)
	e.waitSilverPublished(s, 3*time.Minute)

	start := time.Now()
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`BEGIN;
UPDATE %[1]s SET version = version + 1, payload = md5(payload);
DELETE FROM %[1]s WHERE pk %% 10 = 0;
INSERT INTO %[1]s SELECT g, 1, md5(g::text) FROM generate_series(%[2]d, %[3]d) g;
COMMIT`, workTable, bigTxRows+1, bigTxRows+bigTxInserts))
	changes := bigTxRows + bigTxRows/10 + bigTxInserts
	t.Logf("one transaction of %d changes committed in %s", changes, time.Since(start).Round(time.Millisecond))

	// Killed once the merge of the transaction has staged a part.
	s.waitLog(t, "silver merge part staged", 3*time.Minute)
	peak, err := vmHWM(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	s.kill()
	injections++
	if peak > stormRSS {
		t.Errorf("session %d (killed inside the merge in parts): peak RSS %d MiB, above memory_budget %d MiB + %d MiB",
			s.n, peak>>20, stormBudget>>20, bench.BudgetSlack>>20)
	}
	if b := e.backlog(); b.drained(workTable) {
		t.Fatalf("silver merged the transaction before the kill (backlog %s): the kill did not land inside the merge", b)
	}

	s = e.start()
	restart := time.Now()
	e.waitCaughtUp(s, e.walLSN(), 3*time.Minute)
	for !e.backlog().drained(workTable) {
		if s.exited() {
			t.Fatalf("session %d exited by itself: %v", s.n, s.err)
		}
		if time.Since(restart) > 3*time.Minute {
			t.Fatalf("silver did not merge the transaction within 3m of the restart (backlog %s)", e.backlog())
		}
		time.Sleep(500 * time.Millisecond)
	}
	took := time.Since(restart)
	out, code := e.tidemark(nil, "verify", "--source", e.srcURL, "--warehouse", e.wh, "--name", e.source, "--wait", "1m")
	if code != 0 {
		t.Errorf("tidemark verify exited %d:\n%s", code, out)
	} else {
		t.Logf("tidemark verify: %s", lastLine(out))
	}
	peak2, err := vmHWM(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if peak2 > stormRSS {
		t.Errorf("session %d (merged the transaction in parts): peak RSS %d MiB, above memory_budget %d MiB + %d MiB",
			s.n, peak2>>20, stormBudget>>20, bench.BudgetSlack>>20)
	}
	log := s.output()
	parts := strings.Count(log, "silver merge part staged")
	if !strings.Contains(log, "silver merge step in parts") {
		t.Errorf("session %d did not merge the transaction in parts", s.n)
	}
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("session %d: exit code %d after SIGTERM, want 0", s.n, code)
	}
	note = fmt.Sprintf("one transaction of %d changes; killed inside its merge at peak RSS %d MiB; merged after the restart in %s, %d parts, peak RSS %d MiB; limit %d MiB",
		changes, peak>>20, took.Round(time.Second), parts, peak2>>20, stormRSS>>20)
	t.Log(note)
	lost = 0
}
