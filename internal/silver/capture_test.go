package silver_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// pgEnv runs a real capture of one database into one warehouse (the
// pattern of internal/source/postgres/capture_test.go).
type pgEnv struct {
	t   *testing.T
	pg  *testenv.PG
	url string
	wh  string
}

func newPGEnv(t *testing.T, setup string) *pgEnv {
	t.Helper()
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "silver")
	if setup != "" {
		pg.Exec(t, url, setup)
	}
	return &pgEnv{t: t, pg: pg, url: url, wh: t.TempDir()}
}

func (p *pgEnv) opts() postgres.Options {
	return postgres.Options{
		Slot: "tidemark_test", Publication: "tidemark_test", SpoolDir: filepath.Join(p.wh, "spool"),
		CommitInterval: 100 * time.Millisecond, CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		PublicationPoll: 300 * time.Millisecond,
		Snapshot:        postgres.SnapshotOptions{Enabled: true, Parallelism: 2, ChunkRows: 100, ChunkBytes: 8 << 20},
	}
}

// capture is a capture session in the background.
type capture struct {
	cancel context.CancelFunc
	done   chan error
	cat    *lake.Catalog
	mu     sync.Mutex
	acked  uint64
}

func (p *pgEnv) start(opts postgres.Options) *capture {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := lake.Open(ctx, lake.Config{Warehouse: p.wh})
	if err != nil {
		p.t.Fatal(err)
	}
	c := &capture{cancel: cancel, done: make(chan error, 1), cat: cat}
	log := testLogger()
	w, err := bronze.NewWriter(ctx, cat, "src", opts.Slot, log)
	if err != nil {
		p.t.Fatal(err)
	}
	opts.OnProgress = func(cp pipeline.Checkpoint) {
		c.mu.Lock()
		c.acked = postgres.AckedLSN(cp)
		c.mu.Unlock()
	}
	d, err := postgres.NewDialer(p.url, func(string) string { return "redacted" })
	if err != nil {
		p.t.Fatal(err)
	}
	cp := postgres.New(d, w, opts, log)
	go func() {
		err := cp.Run(ctx)
		cp.Close()
		w.Close()
		c.done <- err
	}()
	p.t.Cleanup(func() { c.stop() })
	return c
}

func (c *capture) stop() error {
	c.cancel()
	select {
	case err := <-c.done:
		c.done <- err
		c.cat.Close()
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

// waitCaughtUp waits until every table's snapshot is done and the capture
// confirmed the source's current WAL position.
func (p *pgEnv) waitCaughtUp(c *capture) {
	p.t.Helper()
	// Generous: a loaded CI machine takes minutes for a snapshot of
	// 30,000 rows in chunks of 50.
	deadline := time.Now().Add(5 * time.Minute)
	for !p.snapshotsDone(c.cat) {
		if time.Now().After(deadline) {
			p.t.Fatal("snapshots not done within 5 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	target := p.walLSN()
	for c.ackedLSN() < target {
		select {
		case err := <-c.done:
			p.t.Fatalf("capture stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("capture did not reach %s", postgres.FormatLSN(target))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *pgEnv) snapshotsDone(cat *lake.Catalog) bool {
	ids, err := cat.ListTables(context.Background(), bronze.Namespace("src", "public"))
	if err != nil || len(ids) == 0 {
		return false
	}
	for _, id := range ids {
		if p.snapshotStatus(cat, id) != "done" {
			return false
		}
	}
	return true
}

func (p *pgEnv) snapshotStatus(cat *lake.Catalog, ident []string) string {
	tbl, err := cat.LoadTable(context.Background(), ident)
	if err != nil {
		return ""
	}
	sp, _ := pipeline.ParseSnapshotState(tbl.Summary()[pipeline.PropSnapshot])
	return sp.Status
}

func (p *pgEnv) walLSN() uint64 {
	p.t.Helper()
	var s string
	p.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s)
	})
	l, err := postgres.ParseLSN(s)
	if err != nil {
		p.t.Fatal(err)
	}
	return l
}

func (p *pgEnv) query(fn func(*pgx.Conn) error) {
	p.t.Helper()
	c, err := pgx.Connect(context.Background(), p.url)
	if err != nil {
		p.t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := fn(c); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pgEnv) exec(sql string) { p.t.Helper(); p.pg.Exec(p.t, p.url, sql) }

// sourceRows reads a source table as rows of bronzetest values (numeric
// as text, integers as int64, timestamps in UTC), by key.
func (p *pgEnv) sourceRows(table string, key []string) map[string]bronzetest.Row {
	p.t.Helper()
	out := map[string]bronzetest.Row{}
	p.query(func(c *pgx.Conn) error {
		ctx := context.Background()
		crows, err := c.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
			WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, table)
		if err != nil {
			return err
		}
		var sel []string
		for crows.Next() {
			var name, typ string
			if err := crows.Scan(&name, &typ); err != nil {
				return err
			}
			q := pgx.Identifier{name}.Sanitize()
			if typ == "numeric" {
				q += "::text AS " + q
			}
			sel = append(sel, q)
		}
		if err := crows.Err(); err != nil {
			return err
		}
		rows, err := c.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+pgx.Identifier{table}.Sanitize())
		if err != nil {
			return err
		}
		defer rows.Close()
		fds := rows.FieldDescriptions()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			r := bronzetest.Row{}
			for i, v := range vals {
				r[fds[i].Name] = normalize(v)
			}
			out[bronzetest.KeyOf(r, key)] = r
		}
		return rows.Err()
	})
	return out
}

func normalize(v any) any {
	switch x := v.(type) {
	case int16:
		return int64(x)
	case int32:
		return int64(x)
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

func showValue(v any) string {
	if s, ok := v.(string); ok && len(s) > 40 {
		sum := md5.Sum([]byte(s))
		return fmt.Sprintf("%q...(%d bytes, md5 %s)", s[:20], len(s), hex.EncodeToString(sum[:4]))
	}
	if t, ok := v.(time.Time); ok {
		return t.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%#v", v)
}

// compareWithSource checks, row by row, that the silver table equals the
// source table: the same keys, and in every source column the same value.
func (p *pgEnv) compareWithSource(cat *lake.Catalog, table string, key []string) int {
	p.t.Helper()
	src := p.sourceRows(table, key)
	tbl, err := cat.LoadTable(context.Background(), silver.Ident("src", "public", table))
	if err != nil {
		p.t.Fatalf("silver table of %s: %v", table, err)
	}
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		p.t.Fatal(err)
	}
	got := map[string]bronzetest.Row{}
	for _, r := range rows {
		k := bronzetest.KeyOf(r, key)
		if _, dup := got[k]; dup {
			p.t.Errorf("%s: key %s appears twice in silver", table, k)
		}
		got[k] = r
	}
	diffs := 0
	keys := make([]string, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := src[k]
		g, ok := got[k]
		if !ok {
			p.t.Errorf("%s: key %s is in the source, not in silver", table, k)
			diffs++
			continue
		}
		for col, sv := range s {
			gv := g[col]
			st, sok := sv.(time.Time)
			gt, gok := gv.(time.Time)
			if (sok && gok && st.Equal(gt)) || reflect.DeepEqual(sv, gv) {
				continue
			}
			p.t.Errorf("%s: key %s column %s: silver %s, source %s", table, k, col, showValue(gv), showValue(sv))
			diffs++
		}
	}
	for k := range got {
		if _, ok := src[k]; !ok {
			p.t.Errorf("%s: key %s is in silver, not in the source (deleted there)", table, k)
			diffs++
		}
	}
	return len(src)
}

// TestSilverEqualsTheSource captures a database under changes made during
// and after the initial snapshot, merges continuously, and checks that each
// silver table equals its source table row by row; then that replaying the
// merged bronze range changes nothing, and that PyIceberg reads the same.
func TestSilverEqualsTheSource(t *testing.T) {
	p := newPGEnv(t, `
		CREATE TABLE items (id int PRIMARY KEY, v text, big text, amount numeric(10,2), at timestamptz, tags text[]);
		ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO items SELECT g, 'v' || g, CASE WHEN g % 50 = 0 THEN repeat(md5(g::text), 1000) END,
			g * 1.5, '2026-01-01'::timestamptz + g * interval '1 minute', ARRAY['a', g::text]
			FROM generate_series(1, 3000) g;
		CREATE TABLE lines (order_id bigint, line int, item text, PRIMARY KEY (order_id, line));
		INSERT INTO lines SELECT g / 4, g % 4, 'x' || g FROM generate_series(1, 400) g;
		CREATE TABLE scratch (id int PRIMARY KEY, v text);
		INSERT INTO scratch SELECT g, 'before' FROM generate_series(1, 50) g;`)
	c := p.start(p.opts())
	m := silver.NewMerger(c.cat, silver.Options{Buckets: 4}, testLogger())
	mctx, stopMerging := context.WithCancel(context.Background())
	merging := make(chan error, 1)
	go func() { merging <- m.Run(mctx, "src", 150*time.Millisecond) }()

	// During the snapshot.
	p.exec(`UPDATE items SET v = 'u-' || id WHERE id % 7 = 0;
		DELETE FROM items WHERE id % 11 = 0;
		INSERT INTO items SELECT g, 'new' || g, repeat('n', 5000), g, now(), NULL FROM generate_series(5001, 5050) g;
		UPDATE items SET id = id + 100000 WHERE id IN (100, 250);
		UPDATE lines SET item = 'changed' WHERE line = 1;
		DELETE FROM lines WHERE order_id = 3;
		TRUNCATE scratch;
		INSERT INTO scratch VALUES (1, 'after');`)
	p.exec(`ALTER TABLE items ADD COLUMN extra bigint; UPDATE items SET extra = id WHERE id % 13 = 0`)
	p.waitCaughtUp(c)
	// After the snapshot: TOAST-unchanged updates, key changes, re-inserts.
	p.exec(`UPDATE items SET v = 'later-' || id WHERE id % 50 = 0;
		UPDATE items SET id = 200000 WHERE id = 100100;
		DELETE FROM items WHERE id BETWEEN 20 AND 30;
		INSERT INTO items (id, v) VALUES (22, 'back');
		UPDATE items SET amount = amount + 0.01, tags = ARRAY['b'] WHERE id % 3 = 0;
		INSERT INTO lines VALUES (3, 1, 'again');
		UPDATE scratch SET v = 'updated';`)
	p.waitCaughtUp(c)
	if err := c.stop(); err != nil {
		t.Fatalf("capture: %v", err)
	}
	stopMerging()
	if err := <-merging; err != nil {
		t.Fatalf("silver.Run: %v", err)
	}

	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: p.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	m = silver.NewMerger(cat, silver.Options{Buckets: 4}, testLogger())
	if err := m.MergeAll(context.Background(), "src"); err != nil {
		t.Fatal(err)
	}
	states, err := silver.States(context.Background(), cat, "src")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if !st.Published || st.Gated || st.Behind != 0 {
			t.Errorf("state %+v: want published and caught up", st)
		}
	}
	if n := p.compareWithSource(cat, "items", []string{"id"}); n < 2000 {
		t.Errorf("items has %d rows, expected more", n)
	}
	p.compareWithSource(cat, "lines", []string{"order_id", "line"})
	p.compareWithSource(cat, "scratch", []string{"id"})
	if dl, err := cat.LoadTable(context.Background(), silver.DeadLetterIdent("src")); err == nil {
		rows, _ := bronzetest.ReadTable(context.Background(), dl)
		for _, r := range rows {
			t.Errorf("dead letter: %v", r)
		}
	}

	// Replaying everything merged since the first silver commit is a no-op.
	tbl, err := cat.LoadTable(context.Background(), silver.Ident("src", "public", "items"))
	if err != nil {
		t.Fatal(err)
	}
	before := scanLines(t, tbl)
	cur, _ := tbl.CurrentSnapshot()
	hist, err := tbl.History(lake.NoSnapshot, cur.ID)
	if err != nil {
		t.Fatal(err)
	}
	first := hist[0].Props[silver.PropBronzeSnapshot]
	if first == "" || first == cur.Props[silver.PropBronzeSnapshot] {
		t.Fatalf("silver history does not span several bronze snapshots: %v", hist)
	}
	if err := tbl.Merge(context.Background(), nil, nil, map[string]string{silver.PropBronzeSnapshot: first}); err != nil {
		t.Fatal(err)
	}
	res, err := m.MergeTable(context.Background(), "src", "public", "items")
	if err != nil || res.Changes == 0 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	if err := tbl.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := scanLines(t, tbl); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("replaying bronze changed silver: %d rows before, %d after", len(before), len(after))
	}
	p.compareWithSource(cat, "items", []string{"id"})

	// An independent reader sees the same rows (position deletes applied).
	pyCompare(t, p.wh, "silver.src.public.items", tbl)
}

// scanLines renders every row of a table, every column, sorted.
func scanLines(t *testing.T, tbl *lake.Table) []string {
	t.Helper()
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return renderRows(rows, nil)
}

// pyCompare reads the table with PyIceberg and compares ids and a few
// columns with iceberg-go's read.
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
		Rows    []map[string]any  `json:"rows"`
		Summary map[string]string `json:"summary"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatal(err)
	}
	var py_ []string
	for _, r := range res.Rows {
		py_ = append(py_, fmt.Sprintf("id=%v v=%v amount=%v extra=%v", r["id"], r["v"], r["amount"], r["extra"]))
	}
	sort.Strings(py_)
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	var gos []string
	for _, r := range rows {
		gos = append(gos, fmt.Sprintf("id=%v v=%v amount=%v extra=%v", r["id"], r["v"], r["amount"], nilAsNone(r["extra"])))
	}
	sort.Strings(gos)
	if len(py_) != len(gos) {
		t.Errorf("PyIceberg reads %d rows, iceberg-go %d", len(py_), len(gos))
	}
	for i := 0; i < len(py_) && i < len(gos); i++ {
		if py_[i] != gos[i] {
			t.Errorf("PyIceberg row %s, iceberg-go row %s", py_[i], gos[i])
			break
		}
	}
	if res.Summary[silver.PropBronzeSnapshot] == "" {
		t.Errorf("PyIceberg summary lacks the cursor: %v", res.Summary)
	}
}

func nilAsNone(v any) any {
	if v == nil {
		return "<nil>"
	}
	return v
}

// TestNoSilverTableBeforeTheSnapshotIsDone merges while an initial
// snapshot runs: no silver table exists until it is done.
func TestNoSilverTableBeforeTheSnapshotIsDone(t *testing.T) {
	p := newPGEnv(t, `CREATE TABLE big (id int PRIMARY KEY, v text);
		INSERT INTO big SELECT g, 'v' || g FROM generate_series(1, 3000) g;`)
	opts := p.opts()
	opts.Snapshot.Parallelism, opts.Snapshot.ChunkRows = 1, 50
	// The snapshot waits at its 5th chunk boundary (failpoint
	// snapshot-between-chunks) until the merge below has run: it is
	// running, with chunks committed, whatever the machine's speed.
	release := make(chan struct{})
	var hits atomic.Int64
	defer failpoint.OnHit("snapshot-between-chunks", func() {
		if hits.Add(1) == 5 {
			<-release
		}
	})()
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	c := p.start(opts)
	ctx := context.Background()
	m := silver.NewMerger(c.cat, silver.Options{}, testLogger())
	bid := append(bronze.Namespace("src", "public"), "big")
	deadline := time.Now().Add(60 * time.Second)
	for p.snapshotStatus(c.cat, bid) != "running" {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := m.MergeTable(ctx, "src", "public", "big")
	if err != nil {
		t.Fatal(err)
	}
	if st := p.snapshotStatus(c.cat, bid); st != "running" {
		t.Fatalf("the snapshot is %q while paused at a chunk boundary, want running", st)
	}
	if !res.Gated || !strings.Contains(res.Reason, "running") {
		t.Errorf("merge during the snapshot: %+v, want gated", res)
	}
	if _, err := c.cat.LoadTable(ctx, silver.Ident("src", "public", "big")); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Errorf("silver table during the snapshot: %v, want none", err)
	}
	st, err := silver.State(ctx, c.cat, "src", "public", "big")
	if err != nil || !st.Gated || st.Published {
		t.Errorf("State = %+v, %v", st, err)
	}
	unblock()
	p.waitCaughtUp(c)
	res, err = m.MergeTable(ctx, "src", "public", "big")
	if err != nil || !res.Published {
		t.Fatalf("merge after the snapshot: %+v, %v", res, err)
	}
	p.compareWithSource(c.cat, "big", []string{"id"})
}
