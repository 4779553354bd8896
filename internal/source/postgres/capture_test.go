package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// harness runs captures of one database into one warehouse.
type harness struct {
	t      *testing.T
	pg     *testenv.PG
	url    string
	wh     string
	source string
	log    *slog.Logger
}

func newHarness(t *testing.T, pg *testenv.PG, setup string) *harness {
	t.Helper()
	url := pg.CreateDB(t, "cap")
	if setup != "" {
		pg.Exec(t, url, setup)
	}
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	return &harness{t: t, pg: pg, url: url, wh: t.TempDir(), source: "src",
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))}
}

func (h *harness) opts() postgres.Options {
	return postgres.Options{
		Slot: "tidemark_test", Publication: "tidemark_test", SpoolDir: filepath.Join(h.wh, "spool"),
		CommitInterval: 100 * time.Millisecond, CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		PublicationPoll: 300 * time.Millisecond,
		Snapshot:        postgres.SnapshotOptions{Enabled: true, Parallelism: 2, ChunkRows: 100, ChunkBytes: 8 << 20},
	}
}

// running is a capture session in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
	cat    *lake.Catalog
	mu     sync.Mutex
	acked  uint64
}

func (h *harness) start(opts postgres.Options) *running {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	r := &running{cancel: cancel, done: make(chan error, 1), cat: cat}
	w, err := bronze.NewWriter(ctx, cat, h.source, opts.Slot, h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	opts.OnProgress = func(cp pipeline.Checkpoint) {
		r.mu.Lock()
		r.acked = postgres.AckedLSN(cp)
		r.mu.Unlock()
	}
	d, err := postgres.NewDialer(h.url, func(s string) string { return "redacted" })
	if err != nil {
		h.t.Fatal(err)
	}
	c := postgres.New(d, w, opts, h.log)
	go func() {
		err := c.Run(ctx)
		c.Close()
		w.Close()
		r.done <- err
	}()
	h.t.Cleanup(func() { r.stop() })
	// Wait until the session streams (slot created, first flush done), so
	// that the test's changes go through the stream.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		a := r.acked
		r.mu.Unlock()
		if a != 0 {
			return r
		}
		select {
		case err := <-r.done:
			r.done <- err
			return r
		case <-time.After(20 * time.Millisecond):
		}
	}
	h.t.Fatal("capture did not start streaming within 30s")
	return r
}

func (r *running) stop() error {
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		r.cat.Close()
		return err
	case <-time.After(60 * time.Second):
		return errors.New("capture did not stop within 60s")
	}
}

// runErr runs a capture expected to fail and returns its error.
func (h *harness) runErr(opts postgres.Options) error {
	h.t.Helper()
	r := h.start(opts)
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		h.t.Fatal("capture did not fail within 30s")
		return nil
	}
}

// waitCaughtUp waits until the capture has confirmed the source's current
// WAL position and every bronze table's snapshot is done.
func (h *harness) waitCaughtUp(r *running) {
	h.t.Helper()
	h.waitLSN(r, h.walLSN())
	deadline := time.Now().Add(60 * time.Second)
	for !h.snapshotsDone() {
		if time.Now().After(deadline) {
			h.t.Fatal("snapshots not done within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.waitLSN(r, h.walLSN())
}

func (h *harness) snapshotsDone() bool {
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	defer cat.Close()
	ids, err := cat.ListTables(ctx, []string{"bronze", h.source, "public"})
	if err != nil {
		return false
	}
	for _, id := range ids {
		tbl, err := cat.LoadTable(ctx, id)
		if err != nil {
			return false
		}
		if !strings.Contains(tbl.Summary()[pipeline.PropSnapshot], `"status":"done"`) {
			return false
		}
	}
	return true
}

func (h *harness) waitLSN(r *running, target uint64) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-r.done:
			h.t.Fatalf("capture stopped while waiting to catch up: %v", err)
		default:
		}
		r.mu.Lock()
		a := r.acked
		r.mu.Unlock()
		if a >= target {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("capture did not reach %s within 60s", postgres.FormatLSN(target))
}

func (h *harness) walLSN() uint64 {
	h.t.Helper()
	var s string
	h.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s)
	})
	l, err := postgres.ParseLSN(s)
	if err != nil {
		h.t.Fatal(err)
	}
	return l
}

func (h *harness) query(fn func(*pgx.Conn) error) {
	h.t.Helper()
	c, err := pgx.Connect(context.Background(), h.url)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := fn(c); err != nil {
		h.t.Fatal(err)
	}
}

// dropSlot drops a slot once its walsender (of a session that just
// stopped) has gone away.
func (h *harness) dropSlot(name string) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		h.query(func(c *pgx.Conn) error {
			return c.QueryRow(context.Background(), `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&active)
		})
		if !active {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("slot %s still active 30s after the capture stopped", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.exec("SELECT pg_drop_replication_slot('" + name + "')")
}

func (h *harness) exec(sql string) { h.t.Helper(); h.pg.Exec(h.t, h.url, sql) }

// rows reads a lake table as maps.
func (h *harness) rows(ident ...string) []map[string]any {
	h.t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		h.t.Fatalf("load %s: %v", strings.Join(ident, "."), err)
	}
	var out []map[string]any
	err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			m := map[string]any{}
			for c, col := range rec.Columns() {
				if col.IsNull(i) {
					m[rec.ColumnName(c)] = nil
				} else {
					m[rec.ColumnName(c)] = col.GetOneForMarshal(i)
				}
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) summary(ident ...string) map[string]string {
	h.t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		h.t.Fatal(err)
	}
	return tbl.Summary()
}

func count(rows []map[string]any, pred func(map[string]any) bool) int {
	n := 0
	for _, r := range rows {
		if pred(r) {
			n++
		}
	}
	return n
}

func op(o string) func(map[string]any) bool {
	return func(r map[string]any) bool { return r["cdc_op"] == o }
}

func bronzeIdent(table string) []string { return []string{"bronze", "src", "public", table} }

func TestSnapshotAndStreamBasics(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `
		CREATE TABLE t (id int primary key, v text, big text);
		ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO t SELECT g, 'v' || g, NULL FROM generate_series(1, 1000) g;`)
	r := h.start(h.opts())
	// Changes while the snapshot runs and after it.
	h.exec(`UPDATE t SET v = 'updated' WHERE id <= 10;
		DELETE FROM t WHERE id BETWEEN 11 AND 20;
		INSERT INTO t VALUES (2000, 'new', repeat('x', 100000));`)
	h.exec(`UPDATE t SET v = 'toast-kept' WHERE id = 2000`)
	h.exec(`SELECT pg_logical_emit_message(true, 'audit', 'hello from the app')`)
	h.exec(`ALTER TABLE t ADD COLUMN extra bigint; UPDATE t SET extra = 42 WHERE id = 1`)
	h.exec(`UPDATE t SET id = 3000 WHERE id = 999`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	rows := h.rows(bronzeIdent("t")...)
	// Replaying bronze by key in (lsn, seq) order gives the source table.
	got := replay(t, rows, "id")
	want := map[string]string{}
	h.query(func(c *pgx.Conn) error {
		rs, err := c.Query(context.Background(), `SELECT id::text, coalesce(v, '<null>') || '|' || coalesce(length(big)::text, '<null>') || '|' || coalesce(extra::text, '<null>') FROM t`)
		if err != nil {
			return err
		}
		for rs.Next() {
			var k, v string
			rs.Scan(&k, &v)
			want[k] = v
		}
		return rs.Err()
	})
	for k, w := range want {
		r, ok := got[k]
		if !ok {
			t.Errorf("key %s: in the source, missing from bronze replay", k)
			continue
		}
		g := fmt.Sprintf("%v|%v|%v", orNull(r["v"]), lenOrNull(r["big"]), orNull(r["extra"]))
		if g != w {
			t.Errorf("key %s: bronze replay %q, source %q", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s: in bronze replay, deleted at the source", k)
		}
	}
	// TOAST: the update of id 2000 leaves big unchanged and says so.
	var toast map[string]any
	for _, r := range rows {
		if r["id"] == int32(2000) && r["cdc_op"] == "u" {
			toast = r
		}
	}
	if toast == nil {
		t.Fatal("no update row for id 2000")
	}
	if toast["big"] != nil || fmt.Sprintf("%s", toast["cdc_unchanged"]) != `["big"]` {
		t.Errorf("TOAST update: big=%v cdc_unchanged=%v, want NULL and [big]", toast["big"], toast["cdc_unchanged"])
	}
	// The added column reached bronze.
	if n := count(rows, func(r map[string]any) bool { return r["extra"] == int64(42) }); n != 1 {
		t.Errorf("rows with extra=42: %d, want 1", n)
	}
	// Key change: a delete of the old key and an insert of the new one.
	if count(rows, func(r map[string]any) bool { return r["id"] == int32(999) && r["cdc_op"] == "d" }) != 1 ||
		count(rows, func(r map[string]any) bool { return r["id"] == int32(3000) && r["cdc_op"] == "c" }) != 1 {
		t.Errorf("key change 999 -> 3000 not recorded as delete + insert")
	}
	msgs := h.rows("bronze", "src", "_messages")
	if count(msgs, func(r map[string]any) bool {
		return r["prefix"] == "audit" && r["content_text"] == "hello from the app"
	}) != 1 {
		t.Errorf("logical message not in _messages: %v", msgs)
	}
	if count(msgs, func(r map[string]any) bool { return strings.HasPrefix(fmt.Sprint(r["prefix"]), "tidemark.") }) != 0 {
		t.Errorf("tidemark's own heartbeat/watermark messages leaked into _messages")
	}
	sum := h.summary(bronzeIdent("t")...)
	for _, k := range []string{"tidemark.position", "tidemark.watermark", "tidemark.cursor"} {
		if sum[k] == "" {
			t.Errorf("summary lacks %s: %v", k, sum)
		}
	}
	if !strings.Contains(sum[pipeline.PropSnapshot], `"status":"done"`) {
		t.Errorf("snapshot state = %s, want done", sum[pipeline.PropSnapshot])
	}
	// Restart: nothing is written twice.
	before := len(rows)
	r2 := h.start(h.opts())
	h.waitCaughtUp(r2)
	r2.stop()
	if after := len(h.rows(bronzeIdent("t")...)); after != before {
		t.Errorf("restart changed bronze from %d to %d rows: a replay was written twice", before, after)
	}
}

func TestHugeValuePasses(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE huge (id int primary key, body text, blob bytea);
		INSERT INTO huge SELECT 1, string_agg(md5(g::text), ''), NULL FROM generate_series(1, 524288) g;`) // 16 MiB
	opts := h.opts()
	opts.CommitBytes = 4 << 20 // smaller than one row: the row still passes, alone
	r := h.start(opts)
	h.exec(`INSERT INTO huge SELECT 2, NULL, decode(string_agg(md5(g::text), ''), 'hex') FROM generate_series(1, 1048576) g`) // 16 MiB bytea
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// A row inserted while its chunk was read appears as the chunk's r row
	// and as the stream's c row: replay gives the state.
	state := replay(t, h.rows(bronzeIdent("huge")...), "id")
	if len(state) != 2 {
		t.Fatalf("replayed keys = %d, want 2", len(state))
	}
	for _, r := range state {
		switch r["id"] {
		case int32(1):
			if n := len(r["body"].(string)); n != 16<<20 {
				t.Errorf("16 MiB text arrived with %d bytes", n)
			}
		case int32(2):
			if b, ok := r["blob"].([]byte); !ok || len(b) != 16<<20 {
				t.Errorf("16 MiB bytea arrived as %T with %d bytes", r["blob"], len(fmt.Sprint(r["blob"])))
			}
		}
	}
}

func TestStreamedTransactionWithRolledBackSavepoint(t *testing.T) {
	pg, err := testenv.Start(testenv.Options{Settings: map[string]string{"logical_decoding_work_mem": "64kB"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	h := newHarness(t, pg, `CREATE TABLE s (id int primary key, pad text)`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	h.exec(`BEGIN;
		INSERT INTO s SELECT g, repeat('p', 200) FROM generate_series(1, 500) g;
		SAVEPOINT sp;
		INSERT INTO s SELECT g, repeat('q', 200) FROM generate_series(501, 1000) g;
		ROLLBACK TO SAVEPOINT sp;
		INSERT INTO s SELECT g, 'tail' FROM generate_series(1001, 1005) g;
		COMMIT;`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	rows := h.rows(bronzeIdent("s")...)
	if n := count(rows, op("c")); n != 505 {
		t.Fatalf("inserted rows in bronze = %d, want exactly 505 (500 + 5; the rolled-back savepoint's 500 discarded)", n)
	}
	lsns := map[any]bool{}
	for _, r := range rows {
		lsns[r["cdc_source_lsn"]] = true
	}
	if len(lsns) != 1 {
		t.Errorf("the transaction's rows carry %d commit positions, want 1", len(lsns))
	}
	if ents, _ := os.ReadDir(filepath.Join(h.wh, "spool")); len(ents) != 0 {
		t.Errorf("spool files left behind: %d", len(ents))
	}
}

func TestDeadLetterForUnrepresentableValue(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE d (id int primary key, amount numeric(10,2));
		INSERT INTO d VALUES (1, 'NaN'), (2, 1.5);`)
	r := h.start(h.opts())
	h.waitCaughtUp(r) // snapshot done: the insert below is captured once, by the stream
	h.exec(`INSERT INTO d VALUES (3, 'NaN'), (4, 2.25)`)
	h.waitCaughtUp(r)
	r.stop()
	rows := h.rows(bronzeIdent("d")...)
	if len(rows) != 2 {
		t.Errorf("bronze rows = %d, want 2 (ids 2 and 4): %v", len(rows), rows)
	}
	dl := h.rows("bronze", "src", "_dead_letter")
	if len(dl) != 2 {
		t.Fatalf("dead-letter rows = %d, want 2: %v", len(dl), dl)
	}
	for _, r := range dl {
		if r["source_table"] != "public.d" || !strings.Contains(fmt.Sprint(r["raw"]), `"NaN"`) || r["error"] == "" {
			t.Errorf("dead-letter row lacks table, raw value or error: %v", r)
		}
	}
}

func TestTableAddedLaterIsBackfilled(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE a (id int primary key)`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	h.exec(`CREATE TABLE later (id int primary key, v text);
		INSERT INTO later SELECT g, 'x' FROM generate_series(1, 250) g;`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.exec(`INSERT INTO later VALUES ((SELECT max(id) + 1 FROM later), 'streamed')`)
		h.waitCaughtUp(r)
		sum := h.summary(bronzeIdent("later")...)
		if strings.Contains(sum[pipeline.PropSnapshot], `"status":"done"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("table added later was not backfilled: %v", sum)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.stop()
	rows := h.rows(bronzeIdent("later")...)
	ids := map[any]bool{}
	for _, r := range rows {
		ids[r["id"]] = true
	}
	for i := int32(1); i <= 250; i++ {
		if !ids[i] {
			t.Fatalf("row %d of the table added later is missing from bronze", i)
		}
	}
}

func TestNamedErrors(t *testing.T) {
	pg := testenv.Shared(t)
	t.Run("no primary key", func(t *testing.T) {
		// Listed by name, a table without a key is captured into bronze
		// only (no refusal of the run): its rows reach bronze, its bronze
		// table records no key, and bronze.BronzeOnly names it with
		// no_primary_key and the fixes.
		h := newHarness(t, pg, `CREATE TABLE nokey (a int, b text); INSERT INTO nokey SELECT g, 'r' || g FROM generate_series(1, 300) g`)
		opts := h.opts()
		opts.Tables = []change.TableID{{Schema: "public", Name: "nokey"}}
		r := h.start(opts)
		h.waitCaughtUp(r)
		h.exec(`INSERT INTO nokey VALUES (1000, 'streamed')`)
		h.waitCaughtUp(r)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, row := range h.rows("bronze", h.source, "public", "nokey") {
			seen[fmt.Sprintf("%v %v", row["a"], row["b"])]++
		}
		for i := 1; i <= 300; i++ {
			if seen[fmt.Sprintf("%d r%d", i, i)] != 1 {
				t.Errorf("bronze nokey holds row %d %d times, want once (read by the snapshot)", i, seen[fmt.Sprintf("%d r%d", i, i)])
			}
		}
		if seen["1000 streamed"] != 1 || len(seen) != 301 {
			t.Errorf("bronze nokey holds %d distinct rows (the streamed one %d times), want 301 and once", len(seen), seen["1000 streamed"])
		}
		ctx := context.Background()
		cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
		if err != nil {
			t.Fatal(err)
		}
		defer cat.Close()
		tbl, err := cat.LoadTable(ctx, []string{"bronze", h.source, "public", "nokey"})
		if err != nil {
			t.Fatal(err)
		}
		if !bronze.Keyless(tbl.Summary(), tbl.Properties()) {
			t.Errorf("bronze nokey records %s = %q, want []", bronze.PropKey, tbl.Properties()[bronze.PropKey])
		}
		only, err := bronze.BronzeOnly(ctx, cat, h.source)
		if err != nil {
			t.Fatal(err)
		}
		if len(only) != 1 || only[0].Table != "nokey" || !strings.Contains(only[0].Reason, "[no_primary_key]") ||
			!strings.Contains(only[0].Reason, "bronze only") || !strings.Contains(only[0].Reason, "ADD PRIMARY KEY") {
			t.Errorf("bronze.BronzeOnly = %+v, want public.nokey with no_primary_key and its fix", only)
		}
		if refused, _ := bronze.Refused(ctx, cat, h.source); len(refused) != 0 {
			t.Errorf("bronze.Refused = %+v, want none", refused)
		}
	})
	t.Run("slot dropped", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE k (id int primary key)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		r.stop()
		h.dropSlot("tidemark_test")
		err := h.runErr(h.opts())
		if !errors.Is(err, fault.ErrSlotLost) || fault.ExitCode(err) != fault.ExitFatal {
			t.Fatalf("err = %v, want ErrSlotLost (fatal)", err)
		}
	})
	t.Run("slot recreated behind our back", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE k (id int primary key)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		r.stop()
		h.dropSlot("tidemark_test")
		h.exec(`INSERT INTO k VALUES (1)`)
		h.exec(`SELECT pg_create_logical_replication_slot('tidemark_test', 'pgoutput')`)
		err := h.runErr(h.opts())
		if !errors.Is(err, fault.ErrSlotMoved) {
			t.Fatalf("err = %v, want ErrSlotMoved", err)
		}
	})
	t.Run("publication dropped while running", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE k (id int primary key)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		h.exec(`DROP PUBLICATION tidemark_test`)
		h.exec(`INSERT INTO k VALUES (1)`)
		var err error
		select {
		case err = <-r.done:
			r.done <- err
		case <-time.After(30 * time.Second):
			t.Fatal("capture kept running after its publication was dropped")
		}
		if !errors.Is(err, fault.ErrPublicationMissing) || fault.ExitCode(err) != fault.ExitFatal {
			t.Fatalf("err = %v, want ErrPublicationMissing (fatal)", err)
		}
		// And a restart refuses too, instead of silently recreating it.
		if err := h.runErr(h.opts()); !errors.Is(err, fault.ErrPublicationMissing) {
			t.Fatalf("restart: err = %v, want ErrPublicationMissing", err)
		}
	})
	t.Run("key changed while stopped", func(t *testing.T) {
		// Followed (rekey.go): the table is read again under a marker
		// that records the new key.
		h := newHarness(t, pg, `CREATE TABLE kc (a int, b int, PRIMARY KEY (a)); INSERT INTO kc VALUES (1, 1)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		r.stop()
		h.exec(`ALTER TABLE kc DROP CONSTRAINT kc_pkey; ALTER TABLE kc ADD PRIMARY KEY (a, b)`)
		r = h.start(h.opts())
		h.exec(`INSERT INTO kc VALUES (2, 2)`)
		h.waitCaughtUp(r)
		h.exec(`INSERT INTO kc VALUES (3, 3)`)
		h.waitCaughtUp(r)
		if err := r.stop(); err != nil {
			t.Fatalf("capture after the key change: %v", err)
		}
		sum := h.summary(bronzeIdent("kc")...)
		if sum[bronze.PropKey] != `["a","b"]` || !strings.Contains(sum[pipeline.PropResnapshotReason], "primary key changed from (a) to (a, b)") {
			t.Fatalf("bronze summary after the key change: key %s, re-read reason %q; want the new key and why", sum[bronze.PropKey], sum[pipeline.PropResnapshotReason])
		}
	})
	t.Run("key changed while running", func(t *testing.T) {
		// Followed at the Relation message, in the middle of the DDL's
		// transaction: its delete (whose old row carries the new key's
		// columns only) is written after the marker.
		h := newHarness(t, pg, `CREATE TABLE kr (a int, b int NOT NULL, c text, PRIMARY KEY (a)); INSERT INTO kr VALUES (1, 1, 'x'), (2, 2, 'y')`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		h.exec(`BEGIN; ALTER TABLE kr DROP CONSTRAINT kr_pkey, ADD PRIMARY KEY (b, a); DELETE FROM kr WHERE a = 1; INSERT INTO kr VALUES (3, 3, 'z'); COMMIT`)
		h.waitCaughtUp(r)
		if err := r.stop(); err != nil {
			t.Fatalf("capture after the key change: %v", err)
		}
		sum := h.summary(bronzeIdent("kr")...)
		if sum[bronze.PropKey] != `["b","a"]` || !strings.Contains(sum[pipeline.PropResnapshotReason], "primary key changed from (a) to (b, a)") {
			t.Fatalf("bronze summary after the key change: key %s, re-read reason %q; want the new key and why", sum[bronze.PropKey], sum[pipeline.PropResnapshotReason])
		}
		// Every row after the marker, none before it, is by the new key.
		ctx := context.Background()
		cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
		if err != nil {
			t.Fatal(err)
		}
		defer cat.Close()
		tbl, err := cat.LoadTable(ctx, bronzeIdent("kr"))
		if err != nil {
			t.Fatal(err)
		}
		head, _ := tbl.CurrentSnapshot()
		hist, err := tbl.History(lake.NoSnapshot, head.ID)
		if err != nil {
			t.Fatal(err)
		}
		marker := lake.NoSnapshot
		for _, sn := range hist {
			if sn.Props[pipeline.PropResnapshot] != "" {
				marker = sn.ID
				break
			}
		}
		ops := func(after, to int64) string {
			var out []string
			if err := tbl.ScanAppended(ctx, after, to, func(rec arrow.RecordBatch) error {
				for i, f := range rec.Schema().Fields() {
					if f.Name == bronze.ColOp {
						col := rec.Column(i).(interface{ Value(int) string })
						for j := 0; j < int(rec.NumRows()); j++ {
							out = append(out, col.Value(j))
						}
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			sort.Strings(out)
			return strings.Join(out, "")
		}
		if marker == lake.NoSnapshot {
			t.Fatal("bronze holds no re-read marker")
		}
		if got := ops(lake.NoSnapshot, marker); strings.Contains(got, "d") {
			t.Errorf("bronze rows before the marker: ops %q; the delete by the new key belongs after it", got)
		}
		if got := ops(marker, head.ID); !strings.Contains(got, "d") || !strings.Contains(got, "c") {
			t.Errorf("bronze rows after the marker: ops %q, want the transaction's delete and insert (and the re-read)", got)
		}
	})
	t.Run("second writer on the same pipeline", func(t *testing.T) {
		h := newHarness(t, pg, `CREATE TABLE two (id int primary key)`)
		r := h.start(h.opts())
		h.waitCaughtUp(r)
		err := h.runErr(h.opts())
		if !errors.Is(err, fault.ErrAlreadyRunning) || fault.ExitCode(err) != fault.ExitConfig {
			t.Fatalf("err = %v, want ErrAlreadyRunning (exit 2)", err)
		}
		// The first keeps running and stops cleanly.
		if err := r.stop(); err != nil {
			t.Fatalf("first writer: %v", err)
		}
	})
	t.Run("column named like a cdc column", func(t *testing.T) {
		// Asked for by name, it refuses the run (left out on its own
		// otherwise: TestBadInputRefusedIdentifiers).
		h := newHarness(t, pg, `CREATE TABLE c (id int primary key, cdc_op text)`)
		opts := h.opts()
		opts.Tables = []change.TableID{{Schema: "public", Name: "c"}}
		err := h.runErr(opts)
		if !errors.Is(err, fault.ErrColumnCollision) || fault.ExitCode(err) != fault.ExitConfig {
			t.Fatalf("err = %v, want ErrColumnCollision (exit 2)", err)
		}
	})
}

func TestWALLostIsNamed(t *testing.T) {
	pg, err := testenv.Start(testenv.Options{Settings: map[string]string{"max_slot_wal_keep_size": "1MB", "min_wal_size": "32MB", "max_wal_size": "32MB"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	h := newHarness(t, pg, `CREATE TABLE w (id int primary key, pad text)`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// While tidemark is stopped, write and recycle WAL until the slot is lost.
	for i := 0; i < 20; i++ {
		h.exec(`INSERT INTO w SELECT g, repeat('x', 1000) FROM generate_series(1, 2000) g ON CONFLICT (id) DO UPDATE SET pad = excluded.pad || 'y'`)
		h.exec(`SELECT pg_switch_wal()`)
		h.exec(`CHECKPOINT`)
		var status string
		h.query(func(c *pgx.Conn) error {
			return c.QueryRow(context.Background(), `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = 'tidemark_test'`).Scan(&status)
		})
		if status == "lost" {
			break
		}
	}
	err = h.runErr(h.opts())
	if !errors.Is(err, fault.ErrWALLost) || fault.ExitCode(err) != fault.ExitFatal {
		t.Fatalf("err = %v, want ErrWALLost (fatal)", err)
	}
	if !strings.Contains(err.Error(), "re-snapshot") {
		t.Errorf("the error does not name the recovery: %v", err)
	}
}

var _ = change.OpRead
var _ = io.Discard

func orNull(v any) string {
	if v == nil {
		return "<null>"
	}
	return fmt.Sprint(v)
}

func lenOrNull(v any) string {
	if v == nil {
		return "<null>"
	}
	return fmt.Sprint(len(fmt.Sprint(v)))
}

// replay folds bronze rows per key in (lsn, seq) order; unchanged (TOAST)
// columns keep their previous value.
func replay(t *testing.T, rows []map[string]any, key string) map[string]map[string]any {
	t.Helper()
	sorted := append([]map[string]any(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a["cdc_source_lsn"].(int64) != b["cdc_source_lsn"].(int64) {
			return a["cdc_source_lsn"].(int64) < b["cdc_source_lsn"].(int64)
		}
		return a["cdc_seq"].(int64) < b["cdc_seq"].(int64)
	})
	out := map[string]map[string]any{}
	for _, r := range sorted {
		k := fmt.Sprint(r[key])
		switch r["cdc_op"] {
		case "t":
			out = map[string]map[string]any{}
		case "d":
			delete(out, k)
		default:
			next := map[string]any{}
			for c, v := range r {
				next[c] = v
			}
			var unchanged []string
			if u, ok := r["cdc_unchanged"]; ok && u != nil {
				json.Unmarshal([]byte(fmt.Sprintf("%s", u)), &unchanged)
			}
			for _, c := range unchanged {
				prev, ok := out[k]
				if !ok {
					t.Fatalf("key %s: unchanged column %s with no previous row", k, c)
				}
				next[c] = prev[c]
			}
			out[k] = next
		}
	}
	return out
}
