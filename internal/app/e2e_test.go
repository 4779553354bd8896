package app_test

// The end-to-end crash test: the real binary, a real PostgreSQL, a random
// concurrent workload, SIGKILL at random moments, and at the end a row by
// row comparison of the source with the replay of bronze.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// ---------------------------------------------------------------------------
// The binary

// ---------------------------------------------------------------------------
// Running tidemark as a subprocess

// runner and session are testenv's: tidemark run as a subprocess.
type (
	runner  = testenv.Runner
	session = testenv.Session
)

// newRunner prepares tidemark sessions of srcURL into a fresh warehouse.
func newRunner(t *testing.T, bin, srcURL string, extraArgs ...string) (*runner, string) {
	t.Helper()
	return testenv.NewRunner(t, bin, srcURL, extraArgs...)
}

// ---------------------------------------------------------------------------
// The test

type e2eParams struct {
	kills           int
	preloadItems    int
	preloadAccounts int
	bigTxnRows      int
	workers         int
}

func TestE2ECrashRecovery(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	// The tables are big enough that the snapshot (500-row chunks) spans the
	// first kills: a chunk takes a few tens of milliseconds.
	p := e2eParams{kills: 5, preloadItems: 100000, preloadAccounts: 25000, bigTxnRows: 5000, workers: 2}
	if testing.Short() {
		p = e2eParams{kills: 3, preloadItems: 20000, preloadAccounts: 5000, bigTxnRows: 2000, workers: 2}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TIDEMARK_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set TIDEMARK_E2E_SEED to reuse the kill schedule and workload choices)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	began := time.Now()

	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e")
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	dbname := strings.TrimPrefix(u.Path, "/")
	source := strings.ToLower(dbname)

	pg.Exec(t, srcURL, `
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload text, amount numeric(12,2), tags text[], updated_at timestamptz);
		CREATE TABLE accounts (tenant int, id int, balance bigint, note text, PRIMARY KEY (tenant, id));`)
	// Small enough that the big transactions are streamed to tidemark while
	// in progress (pgoutput streaming, spooled to disk); the walsender picks
	// up per-database settings.
	pg.Exec(t, srcURL, `ALTER DATABASE `+pgx.Identifier{dbname}.Sanitize()+` SET logical_decoding_work_mem = '64kB'`)
	pg.Exec(t, srcURL, fmt.Sprintf(`
		INSERT INTO items
		SELECT g, 1,
		       CASE WHEN g %% 200 = 0
		            THEN (SELECT string_agg(md5(random()::text || g || s), '') FROM generate_series(1, 700) s)
		            ELSE md5(g::text) END,
		       round((random() * 20000 - 1000)::numeric, 2),
		       CASE g %% 5 WHEN 0 THEN NULL WHEN 1 THEN '{}'::text[] WHEN 2 THEN ARRAY['a', NULL, 'c,d'] ELSE ARRAY['t' || g %% 7] END,
		       timestamptz '2024-01-01 00:00:00.123456+00' + g * interval '1.000001 second'
		FROM generate_series(1, %d) g;
		INSERT INTO accounts
		SELECT 1 + g %% 5, g, (random() * 1e9)::bigint, CASE WHEN g %% 3 = 0 THEN NULL ELSE 'note ' || g END
		FROM generate_series(1, %d) g;`, p.preloadItems, p.preloadAccounts))
	t.Logf("setup done in %s", time.Since(began).Round(time.Millisecond))

	r, wh := newRunner(t, bin, srcURL, "--snapshot-chunk-rows", "500", "--snapshot-parallelism", "2")
	lk := openLake(t, wh, source)

	// The workload starts once the first session has created the slot, so
	// that its changes are streamed (before that, only the snapshot sees them).
	// The first session pauses between snapshot chunks (failpoint
	// snapshot-between-chunks) so that its snapshot of items lasts at
	// least 4 s, and the first kill, within 1.2 s, lands inside it.
	pause := 4000 / (p.preloadItems / 500)
	r.Env = []string{fmt.Sprintf("%s=snapshot-between-chunks=sleep(%d)", failpoint.EnvVar, pause)}
	first := r.Start()
	r.Env = nil
	for {
		if first.Exited() {
			t.Fatalf("tidemark session 1 exited by itself: %v", first.Err)
		}
		if _, ok := lk.checkpoint(); ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wl := startWorkload(ctx, t, srcURL, p, seed, func() (int64, bool) { return lk.snapshotFrontier("items") })
	defer wl.stop() // before lk is closed, on every path

	// Kill tidemark at random moments, the first ones early so that they
	// land while the snapshot is still running.
	midSnapshot := 0
	for i := 0; i < p.kills; i++ {
		s := first
		if i > 0 {
			s = r.Start()
		}
		d := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		if i == 0 {
			d = time.Duration(400+rng.IntN(800)) * time.Millisecond
		}
		time.Sleep(d)
		st := lk.snapshotStatus("items") + "/" + lk.snapshotStatus("accounts")
		if st != "done/done" {
			midSnapshot++
		}
		s.Kill(t)
		t.Logf("kill %d after %s (snapshot items/accounts: %s; workload ops so far: %d)", i+1, d.Round(time.Millisecond), st, wl.ops.Load())
		wl.kills.Store(int32(i + 1))
		if rng.IntN(2) == 0 { // sometimes stay down a while: an outage is a delay
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		}
	}
	if midSnapshot == 0 {
		t.Errorf("no kill landed while a snapshot was running")
	}
	// Let the workload finish its one-off events, then stop it.
	select {
	case <-wl.eventsDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the workload did not finish its one-off events within 2 minutes")
	}
	wl.stop()
	if wl.err != nil {
		t.Fatalf("workload: %v", wl.err)
	}
	target := walLSN(t, srcURL)
	t.Logf("workload stopped after %d operations (%d transactions rolled back/aborted); WAL at %s", wl.ops.Load(), wl.aborted.Load(), postgres.FormatLSN(target))

	// Final session: wait until it has caught up and both snapshots are done.
	s := r.Start()
	catchUp := time.Now()
	lk.waitCaughtUp(s, target, 3*time.Minute, "items", "accounts")
	t.Logf("caught up in %s", time.Since(catchUp).Round(time.Millisecond))
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()
	// Spool files of transactions streamed while a session was killed are
	// garbage once a clean session has run.
	if ents, err := os.ReadDir(filepath.Join(wh, "_tidemark", "spool")); err == nil && len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("spool files left behind after a clean stop: %v", names)
	}

	// The oracle.
	verifyTable(t, srcURL, wh, source, "items", []string{"id"}, func(rows []bronzetest.Row) {
		n, keyChanges := 0, 0
		for _, row := range rows {
			if len(row.Unchanged()) > 0 {
				switch row.Op() {
				case "u":
					n++
				case "c":
					keyChanges++
				}
			}
		}
		if n == 0 {
			t.Errorf("items: no update row with a non-empty cdc_unchanged: the unchanged-TOAST case never happened")
		}
		if keyChanges == 0 {
			t.Errorf("items: no key change of a row with an unchanged TOAST payload happened")
		}
		t.Logf("items: %d update rows with unchanged TOAST columns, %d key changes carrying them, %s",
			n, keyChanges, windowCollisions(r.LogPath, rows))
	})
	verifyTable(t, srcURL, wh, source, "accounts", []string{"tenant", "id"}, func(rows []bronzetest.Row) {
		n := 0
		for _, row := range rows {
			if row.Op() == "t" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("accounts: %d truncate rows in bronze, want 1", n)
		}
	})
	if dl := bronzetest.Read(t, wh, append(bronze.SourceNamespace(source), bronze.DeadLetterTable)...); len(dl) > 0 {
		for i, row := range dl {
			if i == 10 {
				break
			}
			t.Errorf("dead letter: table %v op %v at %s: %v", row[bronze.ColTable], row.Op(), row.Pos(), row[bronze.ColError])
		}
		t.Errorf("%d rows in the dead-letter table, want none", len(dl))
	}
	verifyMessages(t, wh, source, wl.msgs, wl.maybeMsgs)
	logStreamedTxns(t, srcURL)

	// Silver, merged by the killed sessions (kills landed inside merges too)
	// and drained here, equals the source: tidemark verify says so, and an
	// independent reader agrees on the row counts.
	checkSilver(t, r, srcURL, wh, source, []string{"items", "accounts"})
	t.Logf("total %s", time.Since(began).Round(time.Millisecond))
}

// checkSilver drains bronze into silver with `tidemark merge`, requires
// `tidemark verify` to exit 0, and, when PyIceberg is available, compares
// each silver table's row count with the source.
func checkSilver(t *testing.T, r *runner, srcURL, wh, source string, tables []string) {
	t.Helper()
	bin := testenv.Tidemark(t)
	// The one-shot merge drains bronze into silver while nothing else runs.
	if out, err := exec.Command(bin, "merge", "--warehouse", wh, "--name", source).CombinedOutput(); err != nil {
		t.Fatalf("tidemark merge: %v\n%s", err, out)
	} else {
		t.Logf("tidemark merge:\n%s", strings.TrimSpace(string(out)))
	}
	// verify compares at a source position: a running pipeline must carry
	// silver to it (the server's WAL moves with other databases' work too).
	s := r.Start()
	for _, args := range [][]string{
		{"verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "2m"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			s.Stop(t, time.Minute)
			t.Fatalf("tidemark %s: %v\n%s", args[0], err, out)
		}
		t.Logf("tidemark %s:\n%s", args[0], strings.TrimSpace(string(out)))
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		return
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, srcURL)
	defer conn.Close(context.Background())
	for _, table := range tables {
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
			Rows []map[string]any `json:"rows"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Rows) != want {
			t.Errorf("PyIceberg reads %d rows in silver.%s.public.%s, the source has %d", len(res.Rows), source, table, want)
		}
	}
}

// verifyMessages checks that every logical message the workload emitted is
// in bronze's _messages table exactly once, and that tidemark's own
// heartbeats and watermarks are not.
func verifyMessages(t *testing.T, wh, source string, emitted, maybe []string) {
	t.Helper()
	rows := bronzetest.Read(t, wh, append(bronze.SourceNamespace(source), bronze.MessagesTable)...)
	seen := map[string]int{}
	for _, row := range rows {
		prefix, _ := row[bronze.ColPrefix].(string)
		if strings.HasPrefix(prefix, "tidemark.") {
			t.Errorf("_messages holds tidemark's own message %q at %s", prefix, row.Pos())
			continue
		}
		if prefix != "e2e" {
			t.Errorf("_messages holds an unexpected message with prefix %q at %s", prefix, row.Pos())
			continue
		}
		content, _ := row[bronze.ColContentText].(string)
		seen[content]++
	}
	bad := 0
	for _, c := range emitted {
		if n := seen[c]; n != 1 {
			if bad++; bad <= 10 {
				t.Errorf("_messages: message %q appears %d times, want exactly once", c, n)
			}
		}
		delete(seen, c)
	}
	for _, c := range maybe {
		if n := seen[c]; n > 1 {
			t.Errorf("_messages: message %q appears %d times, want at most once", c, n)
		}
		delete(seen, c)
	}
	for c, n := range seen {
		t.Errorf("_messages: message %q (x%d) was never emitted", c, n)
	}
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		t.Errorf("_messages: duplicate positions: %v", d)
	}
	t.Logf("_messages: %d messages emitted, %d rows in bronze, %d wrong", len(emitted), len(rows), bad)
}

// verifyTable compares the replay of a bronze table with the source table.
func verifyTable(t *testing.T, srcURL, wh, source, table string, key []string, extra func([]bronzetest.Row)) {
	t.Helper()
	ident := bronze.Ident(source, change.TableID{Schema: "public", Name: table})
	rows := bronzetest.Read(t, wh, ident...)
	ops := map[string]int{}
	for _, row := range rows {
		ops[row.Op()]++
	}
	t.Logf("%s: %d bronze rows %v", table, len(rows), ops)

	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		for i, s := range d {
			if i == 20 {
				t.Errorf("%s: ... and %d more duplicates", table, len(d)-i)
				break
			}
			t.Errorf("%s: duplicate change: %s", table, s)
		}
	}
	reads := map[string][]string{}
	for _, row := range rows {
		if row.Op() == "r" {
			k := bronzetest.KeyOf(row, key)
			reads[k] = append(reads[k], row.Pos())
		}
	}
	bad := 0
	for _, k := range sortedKeys(reads) {
		if len(reads[k]) > 1 {
			if bad++; bad <= 20 {
				t.Errorf("%s: key %s was read by the snapshot %d times (positions %v), want at most once", table, k, len(reads[k]), reads[k])
			}
		}
	}

	lk := openLake(t, wh, source)
	if st := lk.snapshotStatus(table); st != "done" {
		t.Errorf("%s: snapshot status in the latest bronze commit = %q, want done", table, st)
	}
	lk.close()

	want := readSource(t, srcURL, table, key)
	// bronzetest.Replay, but going on after a hole to show the evidence.
	got, holes := bronzetest.Fold(rows, key)
	history := func(k string) string { return describeHistory(rows, key, k) }
	for i, h := range holes {
		if i == 10 {
			t.Errorf("%s: ... %d unfillable TOAST values in all", table, len(holes))
			break
		}
		k, _, _ := strings.Cut(strings.TrimPrefix(h, "key "), ":")
		t.Errorf("%s: %s; bronze history of the key: %s", table, h, history(k))
	}
	if extra != nil {
		extra(rows)
	}
	mismatches := 0
	report := func(format string, args ...any) {
		if mismatches++; mismatches <= 30 {
			t.Errorf(format, args...)
		}
	}
	for _, k := range sortedKeys(want) {
		w := want[k]
		g, ok := got[k]
		if !ok {
			report("%s: key %s is in the source but not in bronze's replay (source row %s); bronze history of the key: %s", table, k, show(w), history(k))
			continue
		}
		for _, col := range sortedKeys(w) {
			gv, present := g[col]
			if !present {
				report("%s: key %s: column %q is missing from bronze's replay", table, k, col)
				continue
			}
			if !sameValue(w[col], gv) {
				report("%s: key %s: column %q: expected %s, got %s; bronze history of the key: %s", table, k, col, showValue(w[col]), showValue(gv), history(k))
			}
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			report("%s: key %s is in bronze's replay but not in the source (bronze row %s); bronze history of the key: %s", table, k, show(got[k]), history(k))
		}
	}
	if mismatches > 30 {
		t.Errorf("%s: ... %d mismatches in all", table, mismatches)
	}
	t.Logf("%s: %d source rows, %d replayed keys, %d mismatches", table, len(want), len(got), mismatches)
}

// windowCollisions counts, from tidemark's debug log, the updates with
// unchanged TOAST columns that committed inside the snapshot window of the
// chunk that read their key: the case the low-watermark placement of chunk
// rows exists for. It is coverage information only.
func windowCollisions(logPath string, rows []bronzetest.Row) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return "window collisions unknown: " + err.Error()
	}
	low := map[string]uint64{}  // window id -> low watermark commit LSN
	high := map[uint64]uint64{} // low LSN -> high LSN
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, `msg="snapshot watermark"`) {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		lsn, err := postgres.ParseLSN(f["commit_lsn"])
		if err != nil {
			continue
		}
		switch f["kind"] {
		case "low":
			low[f["window"]] = lsn
		case "high":
			if l, ok := low[f["window"]]; ok {
				high[l] = lsn
			}
		}
	}
	if len(high) == 0 {
		return "window collisions unknown (no snapshot watermark lines in the debug log)"
	}
	readAt := map[string]int64{} // key -> LSN of its r row
	for _, row := range rows {
		if row.Op() == "r" {
			readAt[bronzetest.KeyOf(row, []string{"id"})] = row.LSN()
		}
	}
	n := 0
	for _, row := range rows {
		if row.Op() != "u" || len(row.Unchanged()) == 0 {
			continue
		}
		r, ok := readAt[bronzetest.KeyOf(row, []string{"id"})]
		if h, ok2 := high[uint64(r)]; ok && ok2 && row.LSN() > r && uint64(row.LSN()) < h {
			n++
		}
	}
	return fmt.Sprintf("%d of them inside the snapshot window of their key's chunk", n)
}

// describeHistory lists the bronze changes of one key, in order.
func describeHistory(rows []bronzetest.Row, key []string, k string) string {
	var parts []string
	for _, row := range rows { // sorted by Replay
		if row.Op() == "t" {
			parts = append(parts, "t@"+row.Pos())
			continue
		}
		if bronzetest.KeyOf(row, key) != k {
			continue
		}
		s := row.Op() + "@" + row.Pos()
		if v, ok := row["version"]; ok {
			s += fmt.Sprintf(" version=%v", v)
		}
		if u := row.Unchanged(); len(u) > 0 {
			s += fmt.Sprintf(" unchanged=%v", u)
		}
		parts = append(parts, s)
	}
	if len(parts) > 40 {
		parts = append(parts[:5], append([]string{"..."}, parts[len(parts)-30:]...)...)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// TestE2EUnchangedToastAcrossKeyChange changes the primary key of rows whose
// out-of-line payload the update leaves untouched. PostgreSQL then sends the
// payload as "unchanged TOAST" in the new tuple; bronze writes d(old key),
// c(new key) with the payload in cdc_unchanged, and a replica must be able to
// rebuild the row under its new key (docs/bronze.md, "Key changes"). One
// table has the default replica identity, the other REPLICA IDENTITY FULL.
func TestE2EUnchangedToastAcrossKeyChange(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_toastkey")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE big (id int PRIMARY KEY, v int NOT NULL, payload text);
		ALTER TABLE big ALTER COLUMN payload SET STORAGE EXTERNAL;
		CREATE TABLE bigfull (id int PRIMARY KEY, v int NOT NULL, payload text);
		ALTER TABLE bigfull ALTER COLUMN payload SET STORAGE EXTERNAL;
		ALTER TABLE bigfull REPLICA IDENTITY FULL;`)
	r, wh := newRunner(t, bin, srcURL)
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "big", "bigfull")

	for _, tbl := range []string{"big", "bigfull"} {
		pg.Exec(t, srcURL, `INSERT INTO `+tbl+` SELECT g, 1, repeat(md5(g::text), 200) FROM generate_series(1, 3) g`)
		pg.Exec(t, srcURL, strings.ReplaceAll(`
			UPDATE $T SET id = id + 100 WHERE id = 1;
			UPDATE $T SET id = id + 100, v = v + 1 WHERE id = 2;
			UPDATE $T SET v = v + 1 WHERE id = 3;`, "$T", tbl))
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "big", "bigfull")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()
	verifyTable(t, srcURL, wh, source, "big", []string{"id"}, nil)
	verifyTable(t, srcURL, wh, source, "bigfull", []string{"id"}, nil)
}

// sourceName is tidemark's default source name for a database URL: the
// database name, lower-cased.
func sourceName(t *testing.T, srcURL string) string {
	t.Helper()
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(strings.TrimPrefix(u.Path, "/"))
}

// ---------------------------------------------------------------------------
// Reading the lake while tidemark runs

type lakeView struct {
	t      *testing.T
	cat    *lake.Catalog
	source string
}

func openLake(t *testing.T, wh, source string) *lakeView {
	t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatalf("open the lake at %s: %v", wh, err)
	}
	lv := &lakeView{t: t, cat: cat, source: source}
	t.Cleanup(lv.close)
	return lv
}

func (l *lakeView) close() {
	if l.cat != nil {
		l.cat.Close()
		l.cat = nil
	}
}

func (l *lakeView) checkpoint() (pipeline.Checkpoint, bool) {
	cp, ok, err := bronze.LoadCheckpoint(context.Background(), l.cat, l.source)
	if err != nil {
		l.t.Logf("read checkpoint: %v", err)
		return cp, false
	}
	return cp, ok
}

// waitCaughtUp waits until the source checkpoint's acknowledged LSN has
// reached target and the snapshots of tables are done.
func (l *lakeView) waitCaughtUp(s *session, target uint64, timeout time.Duration, tables ...string) {
	l.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if s.Exited() {
			l.t.Fatalf("tidemark session %d exited by itself while catching up: %v", s.N, s.Err)
		}
		cp, ok := l.checkpoint()
		done := ok && postgres.AckedLSN(cp) >= target
		var states []string
		for _, tb := range tables {
			st := l.snapshotStatus(tb)
			done = done && st == "done"
			states = append(states, tb+"="+st)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("tidemark did not catch up to %s with the snapshots done within %s: checkpoint %+v, snapshots %v",
				postgres.FormatLSN(target), timeout, cp, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshotFrontier returns the first key column of the last row of the
// table's committed snapshot progress, while its snapshot is running.
// Safe to call from any goroutine.
func (l *lakeView) snapshotFrontier(table string) (int64, bool) {
	tbl, err := l.cat.LoadTable(context.Background(), bronze.Ident(l.source, change.TableID{Schema: "public", Name: table}))
	if err != nil {
		return 0, false
	}
	var st struct {
		Status  string   `json:"status"`
		LastKey []string `json:"last_key"`
	}
	if json.Unmarshal([]byte(tbl.Summary()[pipeline.PropSnapshot]), &st) != nil || st.Status != "running" || len(st.LastKey) == 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(st.LastKey[0], 10, 64)
	return n, err == nil
}

// snapshotStatus is the "status" of tidemark.snapshot in the table's
// latest bronze commit ("" if there is none yet).
func (l *lakeView) snapshotStatus(table string) string {
	tbl, err := l.cat.LoadTable(context.Background(), bronze.Ident(l.source, change.TableID{Schema: "public", Name: table}))
	if err != nil {
		return ""
	}
	var st struct {
		Status string `json:"status"`
	}
	if s := tbl.Summary()[pipeline.PropSnapshot]; s != "" {
		if err := json.Unmarshal([]byte(s), &st); err != nil {
			l.t.Errorf("table %s: %s is not JSON: %q", table, pipeline.PropSnapshot, s)
		}
	}
	return st.Status
}

// ---------------------------------------------------------------------------
// Reading the source

func connect(t *testing.T, srcURL string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), srcURL)
	if err != nil {
		t.Fatalf("connect to the source: %v", err)
	}
	return c
}

// walLSN is the source's WAL insert position: with synchronous_commit=off
// (the test server), pg_current_wal_lsn() can be behind a commit that has
// already returned, and a catch-up target below it proves nothing.
func walLSN(t *testing.T, srcURL string) uint64 {
	t.Helper()
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	var s string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := postgres.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// readSource reads a whole table as rows normalised like bronzetest values:
// integers int64, numeric exact text with its scale, timestamps UTC µs,
// arrays []any.
func readSource(t *testing.T, srcURL, table string, key []string) map[string]bronzetest.Row {
	t.Helper()
	ctx := context.Background()
	c := connect(t, srcURL)
	defer c.Close(ctx)
	crows, err := c.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		t.Fatal(err)
	}
	var sel []string
	for crows.Next() {
		var name, typ string
		if err := crows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		q := pgx.Identifier{name}.Sanitize()
		if typ == "numeric" {
			sel = append(sel, q+"::text AS "+q)
		} else {
			sel = append(sel, q)
		}
	}
	if err := crows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	return sourceRows(t, rows, key)
}

func normalize(v any) any {
	switch x := v.(type) {
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case float32:
		return float64(x)
	case time.Time:
		return x.UTC().Truncate(time.Microsecond)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func showValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		if len(x) > 48 {
			return fmt.Sprintf("%q...(%d bytes)", x[:40], len(x))
		}
		return strconv.Quote(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

func show(r bronzetest.Row) string {
	var parts []string
	for _, k := range sortedKeys(r) {
		parts = append(parts, k+"="+showValue(r[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// logStreamedTxns reports whether PostgreSQL streamed in-progress
// transactions to tidemark (it needs logical_decoding_work_mem to be exceeded).
func logStreamedTxns(t *testing.T, srcURL string) {
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	var txns, spills int64
	err := c.QueryRow(context.Background(), `SELECT coalesce(sum(stream_txns), 0)::bigint, coalesce(sum(spill_txns), 0)::bigint
		FROM pg_stat_replication_slots s JOIN pg_replication_slots r USING (slot_name) WHERE r.database = current_database()`).Scan(&txns, &spills)
	if err != nil {
		t.Logf("pg_stat_replication_slots: %v", err)
		return
	}
	t.Logf("transactions streamed in progress to tidemark: %d (spilled: %d)", txns, spills)
}

// ---------------------------------------------------------------------------
// The workload

type workload struct {
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	err        error
	errOnce    sync.Once
	ops        atomic.Int64
	aborted    atomic.Int64
	kills      atomic.Int32
	eventsDone chan struct{}

	p         e2eParams
	maxID     atomic.Int64 // highest items id handed out
	acctID    atomic.Int64 // highest accounts id handed out
	acctLow   atomic.Int64 // accounts ids at or below it were truncated
	mu        sync.Mutex
	bigIDs    []int64  // items rows inserted with an out-of-line (TOAST) payload
	msgs      []string // contents of the logical messages emitted (each committed once)
	maybeMsgs []string // messages whose statement failed (e.g. cancelled at the end)
	msgSeq    atomic.Int64
	// frontier returns the last items key the snapshot has committed
	// (ok=false once it is done or before it starts).
	frontier func() (int64, bool)
	altered  atomic.Bool
}

func startWorkload(parent context.Context, t *testing.T, srcURL string, p e2eParams, seed uint64, frontier func() (int64, bool)) *workload {
	ctx, cancel := context.WithCancel(parent)
	w := &workload{cancel: cancel, p: p, eventsDone: make(chan struct{}), frontier: frontier}
	w.maxID.Store(int64(p.preloadItems))
	w.acctID.Store(int64(p.preloadAccounts))
	for id := int64(200); id <= int64(p.preloadItems); id += 200 {
		w.bigIDs = append(w.bigIDs, id)
	}
	for i := 0; i < p.workers; i++ {
		conn, err := pgx.Connect(ctx, srcURL)
		if err != nil {
			t.Fatalf("workload: connect: %v", err)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		w.wg.Add(1)
		go func(i int) {
			defer w.wg.Done()
			defer conn.Close(context.Background())
			if err := w.run(ctx, conn, rng, i == 0); err != nil && ctx.Err() == nil {
				w.fail(fmt.Errorf("worker %d: %w", i, err))
			}
		}(i)
	}
	// One more worker keeps updating hot keys, so that snapshot chunk
	// windows certainly see changes of keys they read (the case the
	// watermark reconciliation exists for). While the items snapshot runs,
	// the hot items keys are the preloaded rows with an out-of-line payload
	// just ahead of the snapshot's frontier, and the updates leave the
	// payload unchanged.
	conn, err := pgx.Connect(ctx, srcURL)
	if err != nil {
		t.Fatalf("workload: connect: %v", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer conn.Close(context.Background())
		if err := w.hot(ctx, conn); err != nil && ctx.Err() == nil {
			w.fail(fmt.Errorf("hot-key worker: %w", err))
		}
	}()
	return w
}

// hotKeys returns the items ids the hot-key worker updates: preloaded rows
// whose payload is stored out of line (id % 200 == 0), just ahead of the
// snapshot's committed frontier (chunks are read a little ahead of what is
// committed), or spread over the table when no snapshot runs.
func (w *workload) hotKeys() []int64 {
	var ids []int64
	if last, ok := w.frontier(); ok {
		for id := last - last%200 + 200; id <= last+8000 && id <= int64(w.p.preloadItems); id += 200 {
			ids = append(ids, id)
		}
		if len(ids) > 0 {
			return ids
		}
	}
	step := int64(w.p.preloadItems / 20)
	step -= step % 200
	for id := step; id <= int64(w.p.preloadItems); id += step {
		ids = append(ids, id)
	}
	return ids
}

func (w *workload) hot(ctx context.Context, conn *pgx.Conn) error {
	var ids []int64
	var refreshed time.Time
	for i := 0; ctx.Err() == nil; i++ {
		if time.Since(refreshed) > 100*time.Millisecond {
			ids, refreshed = w.hotKeys(), time.Now()
		}
		var err error
		if i%2 == 0 {
			_, err = conn.Exec(ctx, `UPDATE items SET version = version + 1 WHERE id = $1`, ids[(i/2)%len(ids)])
		} else {
			low := w.acctLow.Load()
			id := low + 1 + int64((i/2)*97)%max(1, w.acctID.Load()-low)
			tenant := 1 + id%5
			_, err = conn.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE tenant = $1 AND id = $2`, tenant, id)
		}
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
				w.aborted.Add(1)
				continue
			}
			return err
		}
		w.ops.Add(1)
		time.Sleep(300 * time.Microsecond)
	}
	return nil
}

func (w *workload) fail(err error) {
	w.errOnce.Do(func() {
		w.err = err
		w.cancel()
	})
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

// event is a one-off step of the workload, run by worker 0 once the given
// number of kills has happened.
type event struct {
	afterKills int32
	name       string
	sql        func(w *workload, rng *rand.Rand) []string
}

func (w *workload) events() []event {
	n := int32(w.p.kills)
	big := int64(w.p.bigTxnRows)
	bigUpdate := func(set string) func(w *workload, rng *rand.Rand) []string {
		return func(w *workload, rng *rand.Rand) []string {
			lo := 1 + rng.Int64N(max(1, int64(w.p.preloadItems)-big))
			return []string{fmt.Sprintf(`UPDATE items SET version = version + 1%s WHERE id BETWEEN %d AND %d`, set, lo, lo+big-1)}
		}
	}
	return []event{
		{0, "large transaction (during the snapshot)", bigUpdate(", amount = amount + 1")},
		// Early, so that it lands while the accounts snapshot runs: chunks
		// read before it are cleared by it, a chunk whose window it falls
		// in is read again, later chunks read the re-inserted rows.
		{0, "truncate accounts and re-insert", func(w *workload, rng *rand.Rand) []string {
			base := w.acctID.Add(1000) - 1000
			w.acctLow.Store(base)
			return []string{`TRUNCATE accounts`,
				fmt.Sprintf(`INSERT INTO accounts SELECT 1 + g %% 5, g, g * 10, 'reinserted' FROM generate_series(%d, %d) g`, base+1, base+1000)}
		}},
		{n / 2, "alter table items add column extra", func(*workload, *rand.Rand) []string {
			return []string{`ALTER TABLE items ADD COLUMN extra text`, `UPDATE items SET extra = 'after-alter ' || id, version = version + 1 WHERE id % 97 = 0`}
		}},
		{n / 2, "large transaction rolled back", func(w *workload, rng *rand.Rand) []string {
			return []string{"BEGIN", bigUpdate(", payload = 'rolled back'")(w, rng)[0], "ROLLBACK"}
		}},
		{n, "large transaction with the new column", bigUpdate(", extra = 'bulk'")},
	}
}

func (w *workload) run(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, leader bool) error {
	var evs []event
	if leader {
		evs = w.events()
	}
	for ctx.Err() == nil {
		if leader && len(evs) > 0 && w.kills.Load() >= evs[0].afterKills {
			ev := evs[0]
			evs = evs[1:]
			if err := w.runEvent(ctx, conn, ev, rng); err != nil {
				return err
			}
			if strings.HasPrefix(ev.name, "alter") {
				w.altered.Store(true)
			}
			w.ops.Add(1)
			if len(evs) == 0 {
				close(w.eventsDone)
			}
			continue
		}
		if err := w.step(ctx, conn, rng); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001" || pgErr.Code == "23505") {
				w.aborted.Add(1) // deadlock between the workers: the transaction is rolled back
				continue
			}
			return err
		}
		w.ops.Add(1)
		time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
	}
	return nil
}

// runEvent runs a one-off event, again if it lost a deadlock to a worker.
func (w *workload) runEvent(ctx context.Context, conn *pgx.Conn, ev event, rng *rand.Rand) error {
	stmts := ev.sql(w, rng)
	for attempt := 1; ; attempt++ {
		var err error
		for _, q := range stmts {
			if _, err = conn.Exec(ctx, q); err != nil {
				err = fmt.Errorf("%s: %s: %w", ev.name, q, err)
				break
			}
		}
		if err == nil {
			return nil
		}
		_, _ = conn.Exec(ctx, "ROLLBACK") // if the error left a transaction open
		var pgErr *pgconn.PgError
		if attempt < 5 && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			w.aborted.Add(1)
			continue
		}
		return err
	}
}

// step runs one random operation: most are single statements in their own
// transaction; some are multi-statement transactions, some of them rolled
// back entirely or to a savepoint.
func (w *workload) step(ctx context.Context, conn *pgx.Conn, rng *rand.Rand) error {
	if rng.IntN(100) < 12 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		n := 2 + rng.IntN(6)
		savepoint := rng.IntN(4) == 0
		for i := 0; i < n; i++ {
			if savepoint && i == n/2 {
				if _, err := tx.Exec(ctx, "SAVEPOINT sp"); err != nil {
					return err
				}
			}
			q, args := w.statement(rng)
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		if savepoint {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT sp"); err != nil {
				return err
			}
		}
		if rng.IntN(10) == 0 {
			w.aborted.Add(1)
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}
	if rng.IntN(100) < 3 {
		// A logical message of its own, transactional or not: bronze's
		// _messages table must hold it exactly once.
		content := fmt.Sprintf("msg-%d", w.msgSeq.Add(1))
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message($1, 'e2e', $2)`, rng.IntN(2) == 0, content)
		w.mu.Lock()
		if err == nil {
			w.msgs = append(w.msgs, content)
		} else {
			w.maybeMsgs = append(w.maybeMsgs, content) // interrupted: it may or may not have landed
		}
		w.mu.Unlock()
		return err
	}
	q, args := w.statement(rng)
	_, err := conn.Exec(ctx, q, args...)
	return err
}

func (w *workload) randomTags(rng *rand.Rand) any {
	switch rng.IntN(5) {
	case 0:
		return nil
	case 1:
		return []string{}
	case 2:
		return []*string{ptr("x"), nil, ptr(`quote " and , comma`)}
	default:
		n := 1 + rng.IntN(4)
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("tag%d", rng.IntN(50))
		}
		return out
	}
}

func ptr[T any](v T) *T { return &v }

func (w *workload) randomAmount(rng *rand.Rand) string {
	return fmt.Sprintf("%d.%02d", rng.IntN(200000)-50000, rng.IntN(100))
}

func (w *workload) randomTime(rng *rand.Rand) any {
	if rng.IntN(10) == 0 {
		return nil
	}
	return time.Date(2020+rng.IntN(6), time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1e6)*1000, time.UTC)
}

// randomAccount returns an accounts id that may exist.
func (w *workload) randomAccount(rng *rand.Rand) int64 {
	low := w.acctLow.Load()
	return low + 1 + rng.Int64N(max(1, w.acctID.Load()-low))
}

// statement returns one random write.
func (w *workload) statement(rng *rand.Rand) (string, []any) {
	existing := func() int64 { return 1 + rng.Int64N(w.maxID.Load()) }
	extra := func() any {
		if rng.IntN(3) == 0 {
			return nil
		}
		return fmt.Sprintf("extra-%d", rng.IntN(1000))
	}
	switch x := rng.IntN(100); {
	case x < 22: // insert an item, sometimes with a payload stored out of line
		id := w.maxID.Add(1)
		if rng.IntN(8) == 0 {
			w.mu.Lock()
			w.bigIDs = append(w.bigIDs, id)
			w.mu.Unlock()
			return `INSERT INTO items (id, version, payload, amount, tags, updated_at)
				SELECT $1, 1, string_agg(md5(random()::text || s), ''), $2::numeric, $3::text[], $4 FROM generate_series(1, 700) s`,
				[]any{id, w.randomAmount(rng), w.randomTags(rng), w.randomTime(rng)}
		}
		return `INSERT INTO items (id, version, payload, amount, tags, updated_at) VALUES ($1, 1, $2, $3::numeric, $4::text[], $5)`,
			[]any{id, fmt.Sprintf("small payload %d", rng.IntN(1e6)), w.randomAmount(rng), w.randomTags(rng), w.randomTime(rng)}
	case x < 44: // update an item (all columns but payload)
		if w.altered.Load() && rng.IntN(2) == 0 {
			return `UPDATE items SET version = version + 1, amount = $2::numeric, extra = $3 WHERE id = $1`,
				[]any{existing(), w.randomAmount(rng), extra()}
		}
		return `UPDATE items SET version = version + 1, amount = $2::numeric, tags = $3::text[], updated_at = $4 WHERE id = $1`,
			[]any{existing(), w.randomAmount(rng), w.randomTags(rng), w.randomTime(rng)}
	case x < 56: // update an item with a big payload, leaving the payload (TOAST) unchanged
		w.mu.Lock()
		id := w.bigIDs[rng.IntN(len(w.bigIDs))]
		w.mu.Unlock()
		return `UPDATE items SET version = version + 1 WHERE id = $1`, []any{id}
	case x < 57: // change the key of an item with a big payload (d + c whose payload is unchanged TOAST)
		w.mu.Lock()
		i := rng.IntN(len(w.bigIDs))
		id, nid := w.bigIDs[i], w.maxID.Add(1)
		w.bigIDs[i] = nid
		w.mu.Unlock()
		return `UPDATE items SET id = $2, version = version + 1 WHERE id = $1`, []any{id, nid}
	case x < 60: // rewrite a payload
		return `UPDATE items SET version = version + 1, payload = $2 WHERE id = $1`, []any{existing(), fmt.Sprintf("rewritten %d", rng.IntN(1e6))}
	case x < 68:
		return `DELETE FROM items WHERE id = $1`, []any{existing()}
	case x < 78:
		id := w.acctID.Add(1)
		return `INSERT INTO accounts VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
			[]any{1 + id%5, id, rng.Int64N(1e12) - 5e11, fmt.Sprintf("n%d", rng.IntN(100))}
	case x < 92:
		id := w.randomAccount(rng)
		return `UPDATE accounts SET balance = balance + $3, note = $4 WHERE tenant = $1 AND id = $2`,
			[]any{1 + id%5, id, rng.Int64N(1000) - 500, nil}
	case x < 97:
		id := w.randomAccount(rng)
		return `DELETE FROM accounts WHERE tenant = $1 AND id = $2`, []any{1 + id%5, id}
	default: // change an account's key
		id := w.randomAccount(rng)
		nid := w.acctID.Add(1)
		return `UPDATE accounts SET id = $3, tenant = $4 WHERE tenant = $1 AND id = $2`, []any{1 + id%5, id, nid, 1 + nid%5}
	}
}

// sourceRows reads a source query's rows, normalized, by key.
func sourceRows(t *testing.T, rows pgx.Rows, key []string) map[string]bronzetest.Row {
	t.Helper()
	defer rows.Close()
	out := map[string]bronzetest.Row{}
	fds := rows.FieldDescriptions()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		r := bronzetest.Row{}
		for i, v := range vals {
			r[fds[i].Name] = normalize(v)
		}
		out[bronzetest.KeyOf(r, key)] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
