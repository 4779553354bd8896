package maintain_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func testLogger() *slog.Logger {
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// env is a real capture of one database into one warehouse (the pattern
// of internal/silver/capture_test.go).
type env struct {
	t   *testing.T
	pg  *testenv.PG
	url string
	wh  string
	// commitInterval of the capture (0: 100ms).
	commitInterval time.Duration
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "maintain")
	pg.Exec(t, url, `CREATE TABLE items (id bigint PRIMARY KEY, v text, n bigint);
		INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1, 600) g;`)
	return &env{t: t, pg: pg, url: url, wh: t.TempDir()}
}

type capture struct {
	cancel context.CancelFunc
	done   chan error
	cat    *lake.Catalog
	mu     sync.Mutex
	acked  uint64
}

func (e *env) start() *capture {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		e.t.Fatal(err)
	}
	c := &capture{cancel: cancel, done: make(chan error, 1), cat: cat}
	opts := postgres.Options{
		Slot: "tidemark_test", Publication: "tidemark_test", SpoolDir: filepath.Join(e.wh, "spool"),
		CommitInterval: cmp.Or(e.commitInterval, 100*time.Millisecond), CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		PublicationPoll: 300 * time.Millisecond,
		Snapshot:        postgres.SnapshotOptions{Enabled: true, Parallelism: 1, ChunkRows: 200, ChunkBytes: 8 << 20},
		OnProgress: func(cp pipeline.Checkpoint) {
			c.mu.Lock()
			c.acked = postgres.AckedLSN(cp)
			c.mu.Unlock()
		},
	}
	d, err := postgres.NewDialer(e.url, func(string) string { return "redacted" })
	if err != nil {
		e.t.Fatal(err)
	}
	// Sessions as tidemark run has them: a transient end (the walsender
	// reset under a loaded CI machine) starts a new session with a new
	// writer, from the lake's checkpoint; anything else ends the capture.
	session := func() error {
		w, err := bronze.NewWriter(ctx, cat, "src", opts.Slot, testLogger())
		if err != nil {
			return err
		}
		cp := postgres.New(d, w, opts, testLogger())
		err = cp.Run(ctx)
		cp.Close()
		w.Close()
		return err
	}
	go func() {
		for attempt := 1; ; attempt++ {
			err := session()
			if err == nil || ctx.Err() != nil || fault.ClassOf(err) != fault.Transient || attempt == 5 {
				c.done <- err
				return
			}
			e.t.Logf("capture session %d ended (transient, a new one starts): %v", attempt, err)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	e.t.Cleanup(func() { c.stop() })
	return c
}

func (c *capture) stop() error {
	c.cancel()
	select {
	case err := <-c.done:
		c.done <- err
		c.cat.Close()
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(60 * time.Second):
		return errors.New("capture did not stop within 60s")
	}
}

func (c *capture) ackedLSN() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (e *env) exec(sql string) { e.t.Helper(); e.pg.Exec(e.t, e.url, sql) }

func (e *env) walLSN() uint64 {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	l, err := postgres.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// waitCaughtUp waits for the snapshot to be done and the capture to
// confirm the source's current WAL position.
func (e *env) waitCaughtUp(c *capture) {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	bid := append(bronze.Namespace("src", "public"), "items")
	for {
		if tbl, err := c.cat.LoadTable(context.Background(), bid); err == nil {
			sp, _ := pipeline.ParseSnapshotState(tbl.Summary()[pipeline.PropSnapshot])
			if sp.Status == "done" {
				break
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatal("snapshot not done within 90s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	target := e.walLSN()
	for c.ackedLSN() < target {
		select {
		case err := <-c.done:
			e.t.Fatalf("capture stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("capture did not reach %s", postgres.FormatLSN(target))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// source renders the source table, sorted.
func (e *env) source() []string {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT id, v, n FROM items")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var id int64
		var v *string
		var n *int64
		if err := rows.Scan(&id, &v, &n); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, render(id, deref(v), deref(n)))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func render(id, v, n any) string { return fmt.Sprintf("id=%v v=%v n=%v", id, v, n) }

func renderRows(rows []bronzetest.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, render(r["id"], r["v"], r["n"]))
	}
	sort.Strings(out)
	return out
}

// allLines renders every row of a table with every column, sorted.
func allLines(t *testing.T, tbl *lake.Table) []string {
	t.Helper()
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			if k == bronze.ColProcessedAt {
				continue
			}
			fmt.Fprintf(&b, "%s=%v ", k, r[k])
		}
		out = append(out, b.String())
	}
	sort.Strings(out)
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("%s: first difference at %d: got %q, want %q", what, i, g, w)
			return
		}
	}
}

func load(t *testing.T, cat *lake.Catalog, ident []string) *lake.Table {
	t.Helper()
	tbl, err := cat.LoadTable(context.Background(), ident)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func footprint(t *testing.T, tbl *lake.Table) lake.Footprint {
	t.Helper()
	if err := tbl.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	fp, err := tbl.Footprint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// workload makes one round of changes: updates, deletes, inserts.
func (e *env) workload(round int) {
	e.exec(fmt.Sprintf(`UPDATE items SET v = 'r%[1]d-' || id, n = n + 1 WHERE id %% 7 = %[2]d;
		DELETE FROM items WHERE id %% 53 = %[3]d;
		INSERT INTO items SELECT g, 'new%[1]d', g FROM generate_series(%[4]d, %[4]d + 9) g`,
		round, round%7, round%53, 10000+round*10))
}

var (
	bronzeID = []string{"bronze", "src", "public", "items"}
	silverID = silver.Ident("src", "public", "items")
)

// TestMaintainShrinksTheFootprintAndKeepsTheRows builds a silver table
// with many position-delete files and a bronze table with many snapshots,
// maintains both, and checks that data files, delete files and snapshots
// went down, that both read the same rows (iceberg-go and PyIceberg), that
// bronze kept silver's cursor, and that capture and merge carry on with no
// duplicate after a restart.
func TestMaintainShrinksTheFootprintAndKeepsTheRows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.start()
	e.waitCaughtUp(c)
	// The merger's own compaction off: the footprint builds up for
	// maintenance to shrink.
	m := silver.NewMerger(c.cat, silver.Options{Buckets: 2, NoAutoCompact: true}, testLogger())
	for round := 0; round < 12; round++ {
		e.workload(round)
		e.waitCaughtUp(c)
		if _, err := m.MergeTable(ctx, "src", "public", "items"); err != nil {
			t.Fatal(err)
		}
	}
	// Bronze moves on past silver's cursor: those snapshots must stay.
	e.exec(`UPDATE items SET v = 'unmerged' WHERE id = 1`)
	e.waitCaughtUp(c)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}

	cat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	s, b := load(t, cat, silverID), load(t, cat, bronzeID)
	sBefore, bBefore := footprint(t, s), footprint(t, b)
	sLines, bLines := allLines(t, s), allLines(t, b)
	bSummary := b.Summary()
	sSummary := s.Summary()
	cursor := sSummary[silver.PropBronzeSnapshot]
	if sBefore.DeleteFiles < 5 || sBefore.Snapshots < 10 || bBefore.Snapshots < 10 {
		t.Fatalf("the workload did not build up a footprint: silver %+v, bronze %+v", sBefore, bBefore)
	}

	// Orphans: an old unreferenced file goes, a young one stays.
	dataDir := filepath.Join(e.wh, "bronze.src.public.db", "items", "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	oldOrphan, youngOrphan := filepath.Join(dataDir, "old-orphan.parquet"), filepath.Join(dataDir, "young-orphan.parquet")
	for _, f := range []string{oldOrphan, youngOrphan} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(oldOrphan, old, old); err != nil {
		t.Fatal(err)
	}

	// A dry run changes nothing.
	dry := maintain.New(cat, maintain.Options{OlderThan: time.Nanosecond, RetainLast: 1, DryRun: true}, testLogger())
	if _, err := dry.Run(ctx, "src", nil); err != nil {
		t.Fatal(err)
	}
	if fp := footprint(t, s); fp != sBefore {
		t.Errorf("dry run changed silver: %+v -> %+v", sBefore, fp)
	}
	if _, err := os.Stat(oldOrphan); err != nil {
		t.Errorf("dry run removed an orphan: %v", err)
	}

	mt := maintain.New(cat, maintain.Options{OlderThan: time.Nanosecond, RetainLast: 1}, testLogger())
	results, err := mt.Run(ctx, "src", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Logf("%s: before %+v after %+v compact %+v expired %d kept-from %d (%s) orphans %d",
			r.Table, r.Before, r.After, r.Compact, r.Expired, r.KeptFrom, r.ExpireNote, r.Orphans)
	}

	sAfter, bAfter := footprint(t, s), footprint(t, b)
	if sAfter.DeleteFiles != 0 || sAfter.DataFiles >= sBefore.DataFiles || sAfter.Snapshots >= sBefore.Snapshots {
		t.Errorf("silver footprint %+v -> %+v: want no delete file, fewer data files and snapshots", sBefore, sAfter)
	}
	if bAfter.DataFiles >= bBefore.DataFiles || bAfter.Snapshots >= bBefore.Snapshots {
		t.Errorf("bronze footprint %+v -> %+v: want fewer data files and snapshots", bBefore, bAfter)
	}
	equal(t, "silver after maintenance", allLines(t, s), sLines)
	equal(t, "bronze after maintenance", allLines(t, b), bLines)
	pyCompare(t, e.wh, "silver.src.public.items", s)
	pyCompare(t, e.wh, "bronze.src.public.items", b)

	// Writer state survives: the compaction snapshot carries every key.
	for _, pair := range []struct {
		name      string
		got, want map[string]string
	}{{"bronze", b.Summary(), bSummary}, {"silver", s.Summary(), sSummary}} {
		for k, v := range pair.want {
			if strings.HasPrefix(k, "tidemark.") && pair.got[k] != v {
				t.Errorf("%s summary %s = %q after maintenance, was %q", pair.name, k, pair.got[k], v)
			}
		}
	}
	// Bronze kept silver's cursor and everything after it.
	var cur int64
	fmt.Sscan(cursor, &cur)
	if _, err := b.Snapshot(cur); err != nil {
		t.Fatalf("bronze expired silver's cursor %s: %v", cursor, err)
	}
	if _, err := os.Stat(oldOrphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old orphan file not removed: %v", err)
	}
	if _, err := os.Stat(youngOrphan); err != nil {
		t.Errorf("young orphan file removed: %v", err)
	}

	// Capture restarts from the cursor of the compaction snapshot; silver
	// merges on top of the compacted table.
	c = e.start()
	e.workload(100)
	e.exec(`DELETE FROM items WHERE id BETWEEN 100 AND 120`)
	e.waitCaughtUp(c)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	m = silver.NewMerger(cat, silver.Options{}, testLogger())
	if _, err := m.MergeTable(ctx, "src", "public", "items"); err != nil {
		t.Fatalf("merge after maintenance: %v", err)
	}
	checkAgainstSource(t, e, cat)
}

// checkAgainstSource checks that silver and the replay of bronze equal the
// source, and that bronze holds no change twice.
func checkAgainstSource(t *testing.T, e *env, cat *lake.Catalog) {
	t.Helper()
	want := e.source()
	s, b := load(t, cat, silverID), load(t, cat, bronzeID)
	srows, err := bronzetest.ReadTable(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "silver vs source", renderRows(srows), want)
	brows, err := bronzetest.ReadTable(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range bronzetest.Duplicates(brows) {
		t.Errorf("bronze duplicate: %s", d)
	}
	var replayed []bronzetest.Row
	for _, r := range bronzetest.Replay(t, brows, []string{"id"}) {
		replayed = append(replayed, r)
	}
	equal(t, "bronze replay vs source", renderRows(replayed), want)
}

// TestMaintainWhileRunning maintains in a loop while capture and merges
// run under a workload, then restarts the capture and checks that nothing
// was lost or duplicated.
func TestMaintainWhileRunning(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.start()
	e.waitCaughtUp(c)
	mcat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer mcat.Close()
	m := silver.NewMerger(mcat, silver.Options{Buckets: 2}, testLogger())
	mctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	var mergeErr error
	go func() { defer wg.Done(); mergeErr = m.Run(mctx, "src", 100*time.Millisecond) }()
	var (
		mu        sync.Mutex
		compacted = map[string]int{}
		maintErrs []error
	)
	go func() {
		defer wg.Done()
		mt := maintain.New(mcat, maintain.Options{OlderThan: time.Nanosecond, RetainLast: 2}, testLogger())
		for mctx.Err() == nil {
			res, err := mt.Run(mctx, "src", nil)
			mu.Lock()
			if err != nil && mctx.Err() == nil {
				maintErrs = append(maintErrs, err)
			}
			for _, r := range res {
				if r.Compact.Snapshot != 0 {
					compacted[r.Table]++
				}
			}
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
		}
	}()
	for round := 0; round < 25; round++ {
		e.workload(round)
		time.Sleep(80 * time.Millisecond)
		if round == 12 {
			// Restart the capture mid-way: it must resume from the cursor
			// a maintenance commit may have carried.
			if err := c.stop(); err != nil {
				t.Fatal(err)
			}
			c = e.start()
		}
	}
	e.waitCaughtUp(c)
	// Let merges and maintenance interleave a little more, until the
	// maintenance loop committed a bronze compaction while the capture
	// runs (on a loaded machine the rounds above may end before the
	// first; the deadline only bounds a broken run).
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := compacted["bronze.src.public.items"]
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	wg.Wait()
	if mergeErr != nil {
		t.Fatalf("merge loop: %v", mergeErr)
	}
	for _, err := range maintErrs {
		t.Errorf("maintenance: %v", err)
	}
	t.Logf("compactions committed: %v", compacted)
	if compacted["bronze.src.public.items"] == 0 {
		t.Errorf("no bronze compaction committed while capture ran")
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	// Restart once more, after the last maintenance: no duplicates.
	c = e.start()
	e.workload(200)
	e.waitCaughtUp(c)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	cat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if _, err := silver.NewMerger(cat, silver.Options{}, testLogger()).MergeTable(ctx, "src", "public", "items"); err != nil {
		t.Fatal(err)
	}
	checkAgainstSource(t, e, cat)
}

// pyCompare checks that PyIceberg reads the same rows as iceberg-go.
func pyCompare(t *testing.T, wh, name string, tbl *lake.Table) {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		if os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") == "1" {
			t.Fatal("TIDEMARK_PYTHON is not set but TIDEMARK_REQUIRE_PYICEBERG=1")
		}
		t.Log("TIDEMARK_PYTHON not set: skipping the PyIceberg check")
		return
	}
	script, _ := filepath.Abs(filepath.Join("..", "..", "scripts", "pyiceberg_read.py"))
	cmd := exec.Command(py, script, "--warehouse", wh, name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyiceberg_read.py: %v\n%s", err, stderr.String())
	}
	var res struct {
		Rows []map[string]any `json:"rows"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	var py_ []string
	for _, r := range res.Rows {
		py_ = append(py_, fmt.Sprintf("%v %v %v %v %v %v", r["id"], r["v"], r["n"], r["cdc_op"], r["cdc_source_lsn"], r["cdc_seq"]))
	}
	sort.Strings(py_)
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	var gos []string
	for _, r := range rows {
		gos = append(gos, fmt.Sprintf("%v %v %v %v %v %v", none(r["id"]), none(r["v"]), none(r["n"]),
			none(r["cdc_op"]), none(r["cdc_source_lsn"]), none(r["cdc_seq"])))
	}
	sort.Strings(gos)
	equal(t, "PyIceberg vs iceberg-go "+name, py_, gos)
}

func none(v any) any {
	if v == nil {
		return "<nil>"
	}
	return v
}
