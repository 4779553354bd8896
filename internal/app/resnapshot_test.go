package app_test

// `tidemark resnapshot` end to end: the real binary, a real PostgreSQL, and
// `tidemark verify` (plus PyIceberg) as the judge of silver.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// tidemarkArgs runs the binary to completion and returns its combined
// output and exit code.
func tidemarkArgs(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.Tidemark(t), args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("tidemark %s: %v\n%s", args[0], err, out)
	return "", -1
}

// verifyWhileRunning runs `tidemark verify` against the running pipeline and
// returns its output and exit code.
func verifyWhileRunning(t *testing.T, srcURL, wh, source string) (string, int) {
	t.Helper()
	return tidemarkArgs(t, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "3m")
}

// mustVerify starts a session, waits for verify to pass, and stops it.
func mustVerify(t *testing.T, r *runner, srcURL, wh, source, when string, tables ...string) {
	t.Helper()
	s := r.Start()
	waitLake(t, s, wh)
	lv := openLake(t, wh, source)
	lv.waitCaughtUp(s, walLSN(t, srcURL), 4*time.Minute, tables...)
	lv.close()
	// verify waits for silver to catch up, not for it to be published.
	deadline := time.Now().Add(4 * time.Minute)
	for _, tb := range tables {
		for !silverState(t, wh, source, tb).Published {
			if s.Exited() || time.Now().After(deadline) {
				t.Fatalf("%s: silver of %s was not published (exited: %v)", when, tb, s.Exited())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	out, code := verifyWhileRunning(t, srcURL, wh, source)
	if code != 0 {
		s.Stop(t, 2*time.Minute)
		t.Fatalf("%s: tidemark verify exited %d, want 0:\n%s", when, code, out)
	}
	if stop := s.Stop(t, 2*time.Minute); stop != 0 {
		t.Fatalf("%s: tidemark run exited %d after SIGTERM, want 0", when, stop)
	}
	if code != 0 {
		t.Fatalf("%s: tidemark verify exited %d, want 0:\n%s", when, code, out)
	}
}

// waitLake waits until the session has created the lake's catalog.
func waitLake(t *testing.T, s *session, wh string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(wh, "catalog.db")); err == nil {
			return
		}
		if s.Exited() || time.Now().After(deadline) {
			t.Fatalf("tidemark session %d created no lake at %s (exited: %v)", s.N, wh, s.Exited())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// silverCount reads silver.<source>.public.<table> with PyIceberg (if
// available) and compares its row count with the source's.
func silverCountMatches(t *testing.T, srcURL, wh, source, table string) {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		t.Log("TIDEMARK_PYTHON unset: silver not read with PyIceberg")
		return
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	var want int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&want); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, filepath.Join(root, "scripts", "pyiceberg_read.py"), "--warehouse", wh,
		"silver."+source+".public."+table).Output()
	if err != nil {
		t.Fatalf("PyIceberg reading silver.%s.public.%s: %v", source, table, err)
	}
	var res struct {
		Rows    []map[string]any  `json:"rows"`
		Summary map[string]string `json:"summary"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != want {
		t.Errorf("PyIceberg reads %d rows in silver.%s.public.%s, the source has %d", len(res.Rows), source, table, want)
	}
}

// advanceSlot moves slot past every change committed so far, as a foreign
// consumer would. pg_replication_slot_advance stops at the flushed WAL and
// the test server commits asynchronously, so it first waits for the WAL
// writer (once seen: the slot did not move and the run streamed the gap).
func advanceSlot(t *testing.T, srcURL, slot string) {
	t.Helper()
	target := walLSN(t, srcURL)
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Minute)
	for {
		var flushed, confirmed string
		if err := conn.QueryRow(context.Background(), `SELECT pg_current_wal_flush_lsn()::text,
				(SELECT coalesce(confirmed_flush_lsn, '0/0')::text FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&flushed, &confirmed); err != nil {
			t.Fatal(err)
		}
		if c, err := postgres.ParseLSN(confirmed); err == nil && c >= target {
			return
		}
		if f, err := postgres.ParseLSN(flushed); err == nil && f >= target {
			// Only once a just-stopped run's walsender has gone.
			if _, err := conn.Exec(context.Background(), `SELECT pg_replication_slot_advance(slot_name, $2::text::pg_lsn) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`,
				slot, postgres.FormatLSN(target)); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s did not advance to %s (flushed %s, confirmed %s)", slot, postgres.FormatLSN(target), flushed, confirmed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dropSlot(t *testing.T, srcURL, slot string) {
	t.Helper()
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Minute)
	for {
		// Only once its walsender has gone (a just-stopped run's may linger).
		_, err := conn.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !hasSlot(t, srcURL, slot) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s stayed active", slot)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func bronzeSummary(t *testing.T, wh, source, table string) map[string]string {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(context.Background(), bronze.Ident(source, change.TableID{Schema: "public", Name: table}))
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Summary()
}

// TestResnapshotRecoversBrokenSlot: while tidemark is stopped the slot is
// dropped (slot_lost), advanced past what tidemark confirmed (slot_moved),
// or the publication is dropped (publication_missing), and rows are
// inserted, updated and deleted meanwhile. run refuses (exit 3) naming
// `tidemark resnapshot --all`; resnapshot of one table refuses and asks for
// --all; `resnapshot --all` replaces the slot; the next run re-reads the
// tables and silver equals the source, the rows deleted in the gap included,
// as `tidemark verify` and PyIceberg see it.
func TestResnapshotRecoversBrokenSlot(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	for _, tc := range []struct {
		code   string
		break_ func(t *testing.T, pg *testenv.PG, src, source string)
	}{
		{"slot_lost", func(t *testing.T, pg *testenv.PG, src, source string) {
			dropSlot(t, src, "tidemark_"+source)
		}},
		{"slot_moved", func(t *testing.T, pg *testenv.PG, src, source string) {
			// Someone consumes the slot past the gap's changes behind our back.
			advanceSlot(t, src, "tidemark_"+source)
		}},
		{"publication_missing", func(t *testing.T, pg *testenv.PG, src, source string) {
			pg.Exec(t, src, `DROP PUBLICATION tidemark_`+source)
		}},
	} {
		t.Run(tc.code, func(t *testing.T) {
			pg := testenv.Shared(t)
			src := pg.CreateDB(t, "rs"+strings.ReplaceAll(tc.code, "_", ""))
			pg.Exec(t, src, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text);
				INSERT INTO items SELECT g, g, 'row ' || g FROM generate_series(1, 300) g;
				CREATE TABLE tags (k text PRIMARY KEY, n int);
				INSERT INTO tags SELECT 'k' || g, g FROM generate_series(1, 50) g;`)
			source := sourceName(t, src)
			r, wh := newRunner(t, testenv.Tidemark(t), src, "--silver-every", "300ms", "--snapshot-chunk-rows", "64")
			mustVerify(t, r, src, wh, source, "first run", "items", "tags")

			if tc.code == "slot_lost" {
				tc.break_(t, pg, src, source)
			}
			// The gap: deletes, inserts and updates that no stream will deliver.
			pg.Exec(t, src, `DELETE FROM items WHERE id <= 40;
				INSERT INTO items SELECT g, g, 'new ' || g FROM generate_series(1001, 1030) g;
				UPDATE items SET v = v * 100, note = 'changed' WHERE id BETWEEN 100 AND 120;
				DELETE FROM tags WHERE n % 5 = 0;`)
			if tc.code != "slot_lost" {
				tc.break_(t, pg, src, source)
			}

			out, code := tidemarkArgs(t, r.As("run")...)
			if code != 3 || !strings.Contains(out, "["+tc.code+"]") || !strings.Contains(out, "tidemark resnapshot --all") {
				t.Fatalf("run after the break: exit %d, want 3 with [%s] naming `tidemark resnapshot --all`:\n%s", code, tc.code, out)
			}
			out, code = tidemarkArgs(t, r.As("resnapshot", "public.items")...)
			if code != 2 || !strings.Contains(out, "--all") || !strings.Contains(out, tc.code) {
				t.Fatalf("resnapshot of one table: exit %d, want 2 asking for --all:\n%s", code, out)
			}
			out, code = tidemarkArgs(t, r.As("resnapshot", "--all")...)
			if code != 0 {
				t.Fatalf("resnapshot --all: exit %d:\n%s", code, out)
			}
			t.Logf("tidemark resnapshot --all:\n%s", out)
			for _, want := range []string{"public.items: snapshot state reset to pending", "public.tags: snapshot state reset to pending", "created at", "tidemark run"} {
				if !strings.Contains(out, want) {
					t.Errorf("resnapshot output lacks %q", want)
				}
			}
			if !hasSlot(t, src, "tidemark_"+source) {
				t.Fatal("resnapshot --all left no slot")
			}
			// Before the next run: silver is gated, and says why.
			out, _ = tidemarkArgs(t, "status", "--warehouse", wh, "--format", "json")
			if !strings.Contains(out, "re-snapshot") {
				t.Errorf("tidemark status does not show the pending re-snapshot:\n%s", out)
			}
			// More changes after the request: the new slot streams them.
			pg.Exec(t, src, `DELETE FROM items WHERE id BETWEEN 41 AND 45; UPDATE tags SET n = -n WHERE k = 'k1';`)
			s := r.Start()
			pg.Exec(t, src, `INSERT INTO items VALUES (2001, 1, 'during'); DELETE FROM items WHERE id = 1001; UPDATE items SET v = 7 WHERE id = 200;`)
			out, code = verifyWhileRunning(t, src, wh, source)
			if stop := s.Stop(t, 2*time.Minute); stop != 0 {
				t.Fatalf("run after resnapshot exited %d after SIGTERM", stop)
			}
			if code != 0 {
				t.Fatalf("verify after the re-snapshot: exit %d, want 0:\n%s", code, out)
			}
			sum := bronzeSummary(t, wh, source, "items")
			if sum[pipeline.PropResnapshot] == "" || !strings.Contains(sum[pipeline.PropSnapshot], `"done"`) {
				t.Errorf("bronze items summary: %s=%q %s=%q; want the request id and a done snapshot",
					pipeline.PropResnapshot, sum[pipeline.PropResnapshot], pipeline.PropSnapshot, sum[pipeline.PropSnapshot])
			}
			silverCountMatches(t, src, wh, source, "items")
			silverCountMatches(t, src, wh, source, "tags")
		})
	}
}

// TestResnapshotOneTableRepairsDrift: silver of one table drifts (rows
// removed from it by hand, and a ghost row of a key the source deleted);
// verify says so (exit 5); `resnapshot public.a` re-reads that table only,
// the slot untouched, and verify passes again. Rows deleted at the source
// after the request are gone from silver too.
func TestResnapshotOneTableRepairsDrift(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	pg := testenv.Shared(t)
	src := pg.CreateDB(t, "rsdrift")
	pg.Exec(t, src, `CREATE TABLE a (id bigint PRIMARY KEY, v text);
		INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 200) g;
		CREATE TABLE b (id bigint PRIMARY KEY, v text);
		INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 20) g;`)
	source := sourceName(t, src)
	r, wh := newRunner(t, testenv.Tidemark(t), src, "--silver-every", "300ms")
	mustVerify(t, r, src, wh, source, "first run", "a", "b")

	// Keep silver's row of key 5, then delete key 5 at the source and let
	// the pipeline remove it from silver.
	ghost := silverRows(t, wh, source, "a", 5)
	defer ghost.Release()
	pg.Exec(t, src, `DELETE FROM a WHERE id = 5`)
	mustVerify(t, r, src, wh, source, "after deleting key 5", "a", "b")

	// Drift: keys 1..3 vanish from silver, key 5 comes back.
	tamperSilver(t, wh, source, "a", []any{int64(1), int64(2), int64(3)}, ghost)
	s := r.Start()
	out, code := verifyWhileRunning(t, src, wh, source)
	s.Stop(t, 2*time.Minute)
	if code != 5 {
		t.Fatalf("verify of tampered silver: exit %d, want 5:\n%s", code, out)
	}

	slotBefore := slotConfirmed(t, src, "tidemark_"+source)
	out, code = tidemarkArgs(t, r.As("resnapshot", "public.a")...)
	if code != 0 {
		t.Fatalf("resnapshot public.a: exit %d:\n%s", code, out)
	}
	t.Logf("tidemark resnapshot public.a:\n%s", out)
	if strings.Contains(out, "public.b") || strings.Contains(out, "dropped") {
		t.Errorf("resnapshot of public.a touched more than public.a:\n%s", out)
	}
	if got := slotConfirmed(t, src, "tidemark_"+source); got != slotBefore {
		t.Errorf("a one-table resnapshot moved or replaced the slot: confirmed_flush_lsn %s, was %s", got, slotBefore)
	}
	// Deleted at the source after the request, before the run.
	pg.Exec(t, src, `DELETE FROM a WHERE id BETWEEN 10 AND 14; UPDATE a SET v = 'x' WHERE id = 100;`)
	// An explicit request is read even with snapshots switched off.
	r.Args = append(r.Args, "--snapshot-enabled=false")
	mustVerify(t, r, src, wh, source, "after the re-snapshot of public.a", "a", "b")
	if id := bronzeSummary(t, wh, source, "b")[pipeline.PropResnapshot]; id != "" {
		t.Errorf("public.b was not asked for, but its bronze records re-snapshot %q", id)
	}
	silverCountMatches(t, src, wh, source, "a")
}

// TestResnapshotRefusesWhileRunning: the one-writer lock of run keeps
// resnapshot out.
func TestResnapshotRefusesWhileRunning(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	pg := testenv.Shared(t)
	src := pg.CreateDB(t, "rsbusy")
	pg.Exec(t, src, `CREATE TABLE a (id int PRIMARY KEY)`)
	source := sourceName(t, src)
	r, wh := newRunner(t, testenv.Tidemark(t), src)
	s := r.Start()
	lv := openLake(t, wh, source)
	lv.waitCaughtUp(s, 0, 2*time.Minute, "a")
	out, code := tidemarkArgs(t, r.As("resnapshot", "--all")...)
	if code != 2 || !strings.Contains(out, "[already_running]") {
		t.Errorf("resnapshot while run runs: exit %d, want 2 with [already_running]:\n%s", code, out)
	}
	if code := s.Stop(t, 2*time.Minute); code != 0 {
		t.Fatalf("run exited %d after SIGTERM", code)
	}
	if id := bronzeSummary(t, wh, source, "a")[pipeline.PropResnapshot]; id != "" {
		t.Errorf("a refused resnapshot still recorded request %q", id)
	}
}

// TestResnapshotSurvivesKill: kill -9 in the middle of a re-snapshot, with
// silver still showing the state from before the request; the restart
// finishes the re-snapshot and silver equals the source.
func TestResnapshotSurvivesKill(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	pg := testenv.Shared(t)
	src := pg.CreateDB(t, "rskill")
	const rows, chunkRows = 20000, 100
	pg.Exec(t, src, fmt.Sprintf(`CREATE TABLE big (id int PRIMARY KEY, v text);
		INSERT INTO big SELECT g, repeat('x', 200) FROM generate_series(1, %d) g;`, rows))
	source := sourceName(t, src)
	r, wh := newRunner(t, testenv.Tidemark(t), src, "--silver-every", "300ms", "--snapshot-chunk-rows", fmt.Sprint(chunkRows))
	mustVerify(t, r, src, wh, source, "first run", "big")

	out, code := tidemarkArgs(t, r.As("resnapshot", "public.big")...)
	if code != 0 {
		t.Fatalf("resnapshot: exit %d:\n%s", code, out)
	}
	pg.Exec(t, src, `DELETE FROM big WHERE id % 10 = 0; UPDATE big SET v = 'y' WHERE id % 7 = 0;`)
	// The re-snapshot reads 20,000 rows in well under a second: the session
	// that runs it pauses 30 ms at each of its 200 chunk boundaries
	// (failpoint snapshot-between-chunks), so that it lasts at least 6 s
	// and the kill, once 2,000 rows of its progress are committed, lands
	// seconds before its end.
	const pause = 30 * time.Millisecond
	r.Env = []string{fmt.Sprintf("%s=snapshot-between-chunks=sleep(%d)", failpoint.EnvVar, pause.Milliseconds())}
	s := r.Start()
	r.Env = nil
	lv := openLake(t, wh, source)
	deadline := time.Now().Add(3 * time.Minute) // bounds a broken run only
	for {
		if n, ok := lv.snapshotFrontier("big"); ok && n > 2000 {
			t.Logf("kill -9 with the re-snapshot's progress committed up to key %d of %d", n, rows)
			break
		}
		if time.Now().After(deadline) || s.Exited() {
			t.Fatalf("the re-snapshot of big did not get going (exited: %v, status %q)", s.Exited(), lv.snapshotStatus("big"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill(t)
	if st := lv.snapshotStatus("big"); st == "done" {
		t.Fatalf("the re-snapshot finished before the kill, though its %d chunks paused %s each", rows/chunkRows, pause)
	}
	// Gated: silver still holds every row it had (the deletes are not applied
	// half-way), and has not applied the request.
	ss := silverState(t, wh, source, "big")
	if !ss.Gated || !strings.Contains(ss.Reason, "re-snapshot") {
		t.Errorf("silver of big during the re-snapshot: gated=%v reason=%q; want gated by the re-snapshot", ss.Gated, ss.Reason)
	}
	mustVerify(t, r, src, wh, source, "after kill -9 during the re-snapshot", "big")
	silverCountMatches(t, src, wh, source, "big")
}

// silverRows returns the silver rows of table whose id is id, as one batch.
func silverRows(t *testing.T, wh, source, table string, id int64) arrow.RecordBatch {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, err := cat.LoadTable(context.Background(), silver.Ident(source, "public", table))
	if err != nil {
		t.Fatal(err)
	}
	var got arrow.RecordBatch
	err = s.ScanWhere(context.Background(), lake.Equal("id", id), func(rec arrow.RecordBatch) error {
		if rec.NumRows() > 0 && got == nil {
			rec.Retain()
			got = rec
		}
		return nil
	})
	if err != nil || got == nil {
		t.Fatalf("silver row %d of %s: %v (found: %v)", id, table, err, got != nil)
	}
	return got
}

// tamperSilver deletes the rows of keys del from silver and appends add,
// keeping silver's cursor: drift no tidemark merge would cause.
func tamperSilver(t *testing.T, wh, source, table string, del []any, add arrow.RecordBatch) {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, err := cat.LoadTable(context.Background(), silver.Ident(source, "public", table))
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{}
	for k, v := range s.Summary() {
		if strings.HasPrefix(k, "tidemark.") {
			props[k] = v
		}
	}
	if err := s.Merge(context.Background(), lake.In("id", del), []arrow.RecordBatch{add}, props); err != nil {
		t.Fatalf("tamper with silver: %v", err)
	}
}

func silverState(t *testing.T, wh, source, table string) silver.TableState {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	st, err := silver.State(context.Background(), cat, source, "public", table)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// slotConfirmed returns the slot's confirmed_flush_lsn.
func slotConfirmed(t *testing.T, srcURL, slot string) string {
	t.Helper()
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	var s string
	err := conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s)
	if err != nil {
		t.Fatalf("slot %s: %v", slot, err)
	}
	return s
}

// TestResnapshotAfterWALLost: PostgreSQL removes WAL the stopped pipeline
// had not read (max_slot_wal_keep_size); run stops with wal_lost (exit 3);
// `resnapshot --all` drops the lost slot and creates a new one; the next run
// re-reads the tables and verify passes, rows deleted in the gap included.
func TestResnapshotAfterWALLost(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	pg, err := testenv.Start(testenv.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB", "min_wal_size": "32MB", "max_wal_size": "32MB"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	src := pg.CreateDB(t, "rswal")
	pg.Exec(t, src, `CREATE TABLE items (id int PRIMARY KEY, v text);
		INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 500) g;`)
	source := sourceName(t, src)
	r, wh := newRunner(t, testenv.Tidemark(t), src, "--silver-every", "300ms")
	mustVerify(t, r, src, wh, source, "first run", "items")

	pg.Exec(t, src, `DELETE FROM items WHERE id % 3 = 0; UPDATE items SET v = 'gap' WHERE id % 5 = 0;`)
	conn := connect(t, src)
	defer conn.Close(context.Background())
	lost := false
	for i := 0; i < 40 && !lost; i++ {
		pg.Exec(t, src, `INSERT INTO items SELECT g, repeat('x', 1000) FROM generate_series(10001, 12000) g
			ON CONFLICT (id) DO UPDATE SET v = excluded.v || 'y'; SELECT pg_switch_wal(); CHECKPOINT;`)
		var status string
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`,
			"tidemark_"+source).Scan(&status); err != nil {
			t.Fatal(err)
		}
		lost = status == "lost"
	}
	if !lost {
		t.Fatal("the slot's WAL was never lost")
	}
	out, code := tidemarkArgs(t, r.As("run")...)
	if code != 3 || !strings.Contains(out, "[wal_lost]") || !strings.Contains(out, "tidemark resnapshot --all") {
		t.Fatalf("run with the WAL lost: exit %d, want 3 with [wal_lost] naming `tidemark resnapshot --all`:\n%s", code, out)
	}
	out, code = tidemarkArgs(t, r.As("resnapshot", "--all")...)
	if code != 0 || !strings.Contains(out, "dropped") || !strings.Contains(out, "created at") {
		t.Fatalf("resnapshot --all: exit %d, want 0 dropping and recreating the slot:\n%s", code, out)
	}
	pg.Exec(t, src, `DELETE FROM items WHERE id BETWEEN 10001 AND 10100`)
	mustVerify(t, r, src, wh, source, "after the re-snapshot", "items")
	silverCountMatches(t, src, wh, source, "items")
}
