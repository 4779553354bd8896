package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/testenv"
)

// RELIABILITY row 16, while stopped: ADD, DROP, RENAME COLUMN (renamed in
// bronze) and int -> bigint between two sessions, with a change made before the DDL still
// waiting in the slot. Every value lands in the column it belongs to; an
// incompatible change is a named error.
func TestSchemaChangeWhileStopped(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE s (id int primary key, a text, n int, gone text);
		INSERT INTO s SELECT g, 'a' || g, g, 'g' || g FROM generate_series(1, 10) g;`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	h.exec(`INSERT INTO s VALUES (100, 'before the DDL', 100, 'still here')`)
	h.exec(`ALTER TABLE s ADD COLUMN added text;
		ALTER TABLE s DROP COLUMN gone;
		ALTER TABLE s RENAME COLUMN a TO renamed;
		ALTER TABLE s ALTER COLUMN n TYPE bigint;`)
	h.exec(`INSERT INTO s VALUES (101, 'after the DDL', 5000000000, 'new column')`)
	h.exec(`UPDATE s SET added = 'set later' WHERE id = 1`)
	r = h.start(h.opts())
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	rows := h.rows(bronzeIdent("s")...)
	find := func(id int32, op string) map[string]any {
		for _, r := range rows {
			if r["id"] == id && r["cdc_op"] == op {
				return r
			}
		}
		t.Fatalf("no %s row for id %d in bronze", op, id)
		return nil
	}
	check := func(row map[string]any, want map[string]any) {
		t.Helper()
		for col, w := range want {
			if fmt.Sprint(row[col]) != fmt.Sprint(w) {
				t.Errorf("id %v (%s): column %s = %v, want %v", row["id"], row["cdc_op"], col, row[col], w)
			}
		}
	}
	// Decoded with the table as it was when the change was made; the
	// renamed column is the same bronze column (renamed by field id, no
	// column a left beside it).
	check(find(100, "c"), map[string]any{"renamed": "before the DDL", "n": 100, "gone": "still here", "a": nil, "added": nil})
	for _, r := range rows {
		if _, ok := r["a"]; ok {
			t.Fatalf("bronze still has column a after RENAME COLUMN a TO renamed: %v", r)
		}
	}
	// Decoded with the new layout: nothing shifted into a neighbour.
	check(find(101, "c"), map[string]any{"renamed": "after the DDL", "n": int64(5000000000), "added": "new column", "a": nil, "gone": nil})
	check(find(1, "u"), map[string]any{"renamed": "a1", "n": 1, "added": "set later", "a": nil, "gone": nil})

	// An incompatible change while stopped: named, with the column.
	h.exec(`ALTER TABLE s ALTER COLUMN renamed TYPE int USING length(renamed)`)
	err := h.runErr(h.opts())
	if !errors.Is(err, fault.ErrIncompatibleSchema) || fault.ExitCode(err) != fault.ExitFatal || !strings.Contains(err.Error(), `"renamed"`) {
		t.Fatalf("text -> int while stopped: err = %v, want incompatible_schema naming the column", err)
	}
}

// RELIABILITY row 17: several writers and ALTER TABLEs while the initial
// snapshot runs; at the hand-off the replay of bronze equals the source.
// The race is forced, not hoped for: the writers start between two chunks
// (failpoint snapshot-between-chunks: a chunk written, the next one read,
// its window open), and each ALTER TABLE with its UPDATE runs between two
// later chunks, inside a window, while the writers go on; hundreds of
// chunks are read after it.
func TestWritesAndDDLDuringTheSnapshot(t *testing.T) {
	pg := testenv.Shared(t)
	const (
		rows    = 30000
		writers = 3
		writes  = 300 // per writer
	)
	h := newHarness(t, pg, fmt.Sprintf(`CREATE TABLE d (id int primary key, v text, n int);
		INSERT INTO d SELECT g, 'v' || g, g FROM generate_series(1, %d) g;`, rows))
	opts := h.opts()
	opts.Snapshot.ChunkRows = 100 // at least 300 chunks

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, writers+2)
	// The DDL, at the chunk boundary where it runs, once the writers made
	// that many writes each (they keep writing during and after it).
	ddls := []struct {
		chunk, afterWrites int
		sql                string
	}{
		{10, writes / 3, `ALTER TABLE d ADD COLUMN extra text; UPDATE d SET extra = 'x' || id WHERE id % 500 = 0`},
		{20, 2 * writes / 3, `ALTER TABLE d ALTER COLUMN n TYPE bigint; UPDATE d SET n = n + 10000000000 WHERE id % 700 = 0`},
	}
	reached := make([]chan struct{}, len(ddls)) // one send per writer past ddls[i].afterWrites
	for i := range reached {
		reached[i] = make(chan struct{}, writers)
	}
	started, ddlDone := make(chan struct{}), make(chan struct{})
	var hits atomic.Int64
	defer failpoint.OnHit("snapshot-between-chunks", func() {
		n := int(hits.Add(1))
		if n == 1 {
			close(started)
		}
		for i, d := range ddls {
			if n != d.chunk {
				continue
			}
			for w := 0; w < writers; w++ {
				<-reached[i]
			}
			c, err := pgx.Connect(ctx, h.url)
			if err == nil {
				_, err = c.Exec(ctx, d.sql)
				c.Close(context.Background())
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", d.sql, err)
			}
			if i == len(ddls)-1 {
				close(ddlDone)
			}
		}
	})()
	r := h.start(opts)

	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			next := 0 // the next milestone to report
			defer func() {
				for ; next < len(ddls); next++ {
					reached[next] <- struct{}{}
				}
			}()
			select {
			case <-ctx.Done():
				return
			case <-started:
			}
			c, err := pgx.Connect(ctx, h.url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < writes && ctx.Err() == nil; i++ {
				for next < len(ddls) && i == ddls[next].afterWrites {
					reached[next] <- struct{}{}
					next++
				}
				id := 1 + rng.IntN(rows)
				var sql string
				switch rng.IntN(4) {
				case 0:
					sql = fmt.Sprintf(`DELETE FROM d WHERE id = %d`, id)
				case 1:
					sql = fmt.Sprintf(`INSERT INTO d VALUES (%d, 'new', 0) ON CONFLICT (id) DO UPDATE SET v = 'reinserted'`, rows+1+w*1000+i)
				default:
					sql = fmt.Sprintf(`UPDATE d SET v = 'w%d-%d', n = n + 1 WHERE id = %d`, w, i, id)
				}
				if _, err := c.Exec(ctx, sql); err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("writer %d: %s: %w", w, sql, err)
					}
					return
				}
			}
		}(w)
	}
	select {
	case <-ddlDone:
	case err := <-r.done:
		t.Fatalf("capture stopped before the DDL ran during the snapshot (%d chunk boundaries): %v", hits.Load(), err)
	case <-time.After(5 * time.Minute): // bounds a broken run only
		t.Fatalf("the DDL did not run during the snapshot: %d chunk boundaries in 5 minutes", hits.Load())
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h.waitCaughtUp(r)
	if n := hits.Load(); n < 100 {
		t.Fatalf("the snapshot had %d chunk boundaries, want hundreds (chunks read after the DDL)", n)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := replay(t, h.rows(bronzeIdent("d")...), "id")
	want := h.sourceRows(`SELECT id::text, v || '|' || n || '|' || coalesce(extra, '<null>') FROM d`)
	bad := 0
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			bad++
			if bad < 10 {
				t.Errorf("key %s: in the source, missing from bronze", k)
			}
			continue
		}
		if s := fmt.Sprintf("%v|%v|%v", g["v"], g["n"], orNull(g["extra"])); s != w {
			bad++
			if bad < 10 {
				t.Errorf("key %s: source %q, bronze replay %q", k, w, s)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			bad++
			if bad < 10 {
				t.Errorf("key %s: in bronze, deleted at the source", k)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d keys differ of %d", bad, len(want))
	}
}

// RELIABILITY row 12, while running: a table without a key that joins the
// publication (FOR ALL TABLES) is captured into bronze only, recorded
// with no_primary_key and its fix (bronze.BronzeOnly), while the other
// tables go on; once it has a key, bronze records it (tidemark.key) and
// the table is no longer named.
func TestKeylessTableJoiningThePublication(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE k (id int primary key)`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)
	h.exec(`CREATE TABLE nokey (a int, b text); INSERT INTO nokey VALUES (1, 'x'); INSERT INTO k VALUES (1)`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		only, err := bronze.BronzeOnly(context.Background(), r.cat, h.source)
		if err != nil {
			t.Fatal(err)
		}
		if len(only) == 1 && only[0].Table == "nokey" && strings.Contains(only[0].Reason, "[no_primary_key]") &&
			strings.Contains(only[0].Reason, "REPLICA IDENTITY FULL") {
			break
		}
		select {
		case err := <-r.done:
			t.Fatalf("capture stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keyless table is not recorded as bronze only: %+v", only)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.waitCaughtUp(r)
	if n := len(h.rows("bronze", h.source, "public", "k")); n != 1 {
		t.Errorf("bronze k has %d rows, want 1", n)
	}
	if refused, _ := bronze.Refused(context.Background(), r.cat, h.source); len(refused) != 0 {
		t.Errorf("recorded as refused: %+v", refused)
	}
	h.exec(`INSERT INTO nokey VALUES (3, 'z')`)
	h.exec(`ALTER TABLE nokey REPLICA IDENTITY FULL; ALTER TABLE nokey ALTER a SET NOT NULL, ALTER b SET NOT NULL; INSERT INTO nokey VALUES (2, 'y')`)
	h.waitCaughtUp(r)
	seen := map[string]bool{}
	for _, row := range h.rows("bronze", h.source, "public", "nokey") {
		seen[fmt.Sprintf("%v %v", row["a"], row["b"])] = true
	}
	if !seen["1 x"] || !seen["2 y"] || !seen["3 z"] || len(seen) != 3 {
		t.Errorf("bronze nokey holds %v after its fix, want the rows (1, x), (2, y) and (3, z)", seen)
	}
	if only, _ := bronze.BronzeOnly(context.Background(), r.cat, h.source); len(only) != 0 {
		t.Errorf("still recorded as bronze only after its fix: %+v", only)
	}
	if key := h.props("bronze", h.source, "public", "nokey")[bronze.PropKey]; key != `["a","b"]` {
		t.Errorf("bronze nokey records %s = %s after its fix, want its whole row", bronze.PropKey, key)
	}
	h.checkAckNotAheadOfLake()
}

// props returns the table properties of a lake table.
func (h *harness) props(ident ...string) map[string]string {
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
	return tbl.Properties()
}

// TestKeylessSnapshotInRowPositions: a keyless table's snapshot is read in
// ctid ranges, in chunks that stop mid-range at chunk_rows; a partitioned
// table's leaves share ctids, so the chunks order (and stop) by ctid and
// leaf. Every row is read exactly once, for a plain and a partitioned
// table, with rows deleted from the middle (empty blocks) in between.
func TestKeylessSnapshotInRowPositions(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `
		CREATE TABLE plain (a int, b text);
		INSERT INTO plain SELECT g, repeat('p', g % 50) FROM generate_series(1, 3000) g;
		DELETE FROM plain WHERE a BETWEEN 1000 AND 2200;
		CREATE TABLE parted (a int, day date, b text) PARTITION BY RANGE (day);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
		CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM ('2024-02-01') TO ('2024-03-01');
		CREATE TABLE parted_3 PARTITION OF parted FOR VALUES FROM ('2024-03-01') TO ('2024-04-01');
		INSERT INTO parted SELECT g, date '2024-01-01' + (g % 90), 'r' || g FROM generate_series(1, 2500) g;`)
	opts := h.opts()
	opts.Tables = []change.TableID{{Schema: "public", Name: "plain"}, {Schema: "public", Name: "parted"}}
	opts.Snapshot.ChunkRows = 70
	r := h.start(opts)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		table string
		want  func(int) bool
		n     int
	}{
		{"plain", func(a int) bool { return a < 1000 || a > 2200 }, 3000},
		{"parted", func(int) bool { return true }, 2500},
	} {
		seen := map[int32]int{}
		for _, row := range h.rows("bronze", h.source, "public", tc.table) {
			if row["cdc_op"] != "r" {
				t.Errorf("bronze %s holds a %v row, want snapshot rows only: %v", tc.table, row["cdc_op"], row)
			}
			seen[row["a"].(int32)]++
		}
		for a := 1; a <= tc.n; a++ {
			want := 0
			if tc.want(a) {
				want = 1
			}
			if seen[int32(a)] != want {
				t.Errorf("bronze %s holds row %d %d times, want %d", tc.table, a, seen[int32(a)], want)
			}
		}
		st := h.summary("bronze", h.source, "public", tc.table)[pipeline.PropSnapshot]
		if !strings.Contains(st, `"status":"done"`) || !strings.Contains(st, `"last_key":["(`) {
			t.Errorf("bronze %s snapshot progress %s, want done with a row position", tc.table, st)
		}
	}
}
