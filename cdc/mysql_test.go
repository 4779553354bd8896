package cdc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cdc"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMySQLReadyAtOpenAndResumable: on MariaDB, a change committed right
// after Open returns is delivered (Open waits until the capture's start is
// fixed), and a named position continues after the last acknowledged
// event: changes committed while no stream ran come with the next Open.
func TestMySQLReadyAtOpenAndResumable(t *testing.T) {
	m := testenv.StartMariaDB(t)
	db := m.CreateDB(t, "cdcmy")
	m.ExecIn(t, db, `CREATE TABLE t (id int PRIMARY KEY, v varchar(10))`)
	dir := t.TempDir()
	cfg := cdc.Config{Source: m.URL(db), PositionName: "shop_orders", PositionDir: dir, MaxRuntime: time.Minute}
	ctx := context.Background()

	// next returns the ids of the inserts delivered until want are all
	// seen (acknowledging each), failing on an id not in allowed.
	next := func(s *cdc.Stream, want []int, allowed map[int]bool) {
		t.Helper()
		seen := map[int]bool{}
		for _, id := range want {
			allowed[id] = true
		}
		for missing := len(want); missing > 0; {
			ev, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				t.Fatalf("the stream ended before ids %v all came (seen %v)", want, seen)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Ack(ev); err != nil {
				t.Fatal(err)
			}
			if ev.Op != cdc.Insert {
				continue
			}
			var id int
			fmt.Sscan(fmt.Sprint(ev.After["id"]), &id)
			if !allowed[id] {
				t.Fatalf("unexpected event %+v", ev)
			}
			if !seen[id] {
				for _, w := range want {
					if w == id {
						missing--
					}
				}
			}
			seen[id] = true
		}
	}

	s, err := cdc.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// At once: a stream that opened before its start was fixed misses it.
	m.ExecIn(t, db, `INSERT INTO t VALUES (1, 'a')`)
	m.ExecIn(t, db, `INSERT INTO t VALUES (2, 'b')`)
	next(s, []int{1, 2}, map[int]bool{})
	time.Sleep(500 * time.Millisecond) // a checkpoint interval: the acks are saved
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "shop_orders.json")); err != nil {
		t.Fatalf("no checkpoint file: %v", err)
	}

	// Committed while no stream ran.
	m.ExecIn(t, db, `INSERT INTO t VALUES (3, 'c')`)
	m.ExecIn(t, db, `INSERT INTO t VALUES (4, 'd')`)
	s, err = cdc.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// At least once: 1 and 2 may come again only if their ack was not
	// saved; 3 and 4 must come.
	next(s, []int{3, 4}, map[int]bool{1: true, 2: true})
	s.Close()

	if err := cdc.DropPosition(ctx, cfg); err != nil {
		t.Fatalf("DropPosition: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "shop_orders.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DropPosition left the checkpoint file: %v", err)
	}
}

// TestMySQLSnapshotReconciled: on MariaDB, Config.Snapshot delivers the
// existing rows as op r through the pipeline's chunked, watermark-
// reconciled snapshot while a writer changes rows; applying the events in
// arrival order by key ends equal to the source, and for one key
// positions never go down.
func TestMySQLSnapshotReconciled(t *testing.T) {
	const rows, last = 2000, 2000 // the writer never touches row last
	m := testenv.StartMariaDB(t)
	db := m.CreateDB(t, "cdcsnap")
	m.ExecIn(t, db, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	m.ExecIn(t, db, fmt.Sprintf(`INSERT INTO t SELECT seq, 0 FROM seq_1_to_%d`, rows))
	conn, err := sql.Open("mysql", m.RootDSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	s, err := cdc.Open(ctx, cdc.Config{Source: m.URL(db), Tables: []string{"t"}, Snapshot: true,
		SnapshotChunkRows: 100, MaxRuntime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var stop atomic.Bool
	touched := map[int]bool{}
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		next := rows + 1
		for !stop.Load() {
			id := 1 + r.IntN(rows-1)
			touched[id] = true
			var err error
			switch r.IntN(3) {
			case 0:
				_, err = conn.Exec(`UPDATE t SET v = v + 1 WHERE id = ?`, id)
			case 1:
				_, err = conn.Exec(`DELETE FROM t WHERE id = ?`, id)
			default:
				_, err = conn.Exec(`INSERT INTO t VALUES (?, 7)`, next)
				next++
			}
			if err != nil {
				werr = err
				return
			}
		}
	}()
	toInt := func(v any) int {
		var n int
		fmt.Sscan(fmt.Sprint(v), &n)
		return n
	}
	replica, lastPos, reads := map[int]int{}, map[int]cdc.Position{}, map[int]bool{}
	for sentinel := false; !sentinel; {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("before the sentinel: %v", err)
		}
		if err := s.Ack(ev); err != nil {
			t.Fatal(err)
		}
		var id int
		switch ev.Op {
		case cdc.Snapshot, cdc.Insert, cdc.Update:
			id = toInt(ev.After["id"])
		case cdc.Delete:
			id = toInt(ev.Before["id"])
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
		if p, ok := lastPos[id]; ok && ev.Position.Less(p) {
			t.Errorf("key %d: %s event at %v after one at %v", id, ev.Op, ev.Position, p)
		}
		lastPos[id] = ev.Position
		if ev.Op == cdc.Delete {
			delete(replica, id)
		} else {
			replica[id] = toInt(ev.After["v"])
		}
		if ev.Op == cdc.Snapshot {
			reads[id] = true
			if id == last && !stop.Load() {
				stop.Store(true)
				wg.Wait()
				if werr != nil {
					t.Fatal(werr)
				}
				if _, err := conn.Exec(`UPDATE t SET v = -1 WHERE id = ?`, last); err != nil {
					t.Fatal(err)
				}
			}
		}
		sentinel = ev.Op == cdc.Update && id == last && toInt(ev.After["v"]) == -1
	}
	for id := 1; id <= rows; id++ {
		if !touched[id] && !reads[id] {
			t.Errorf("row %d existed before Open, untouched, and did not arrive as r", id)
		}
	}
	if len(touched) == 0 {
		t.Fatal("the writer wrote nothing during the snapshot: the test checks no reconciliation")
	}
	rs, err := conn.Query(`SELECT id, v FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	source := map[int]int{}
	for rs.Next() {
		var id, v int
		if err := rs.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		source[id] = v
	}
	for id, v := range source {
		if rv, ok := replica[id]; !ok || rv != v {
			t.Errorf("key %d: source v=%d, replica v=%d (present %v)", id, v, rv, ok)
		}
	}
	for id, v := range replica {
		if _, ok := source[id]; !ok {
			t.Errorf("key %d: in the replica (v=%d), not in the source", id, v)
		}
	}
	t.Logf("%d rows, %d touched by the writer during the snapshot, %d snapshot reads", len(source), len(touched), len(reads))
}
