package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cdc"
)

// TestSnapshotReconciled: a table with existing rows is snapshotted in
// small chunks while a writer updates, deletes and inserts rows. Every
// row that existed before Open and was never touched arrives as op r; a
// consumer that applies the events in arrival order, by key, ends equal
// to the source row for row; and for one key positions never go down.
func TestSnapshotReconciled(t *testing.T) {
	const rows, last = 3000, 3000 // the writer never touches row last
	url := database(t, fmt.Sprintf(`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL);
		INSERT INTO t SELECT g, 0 FROM generate_series(1, %d) g`, rows))
	ctx := context.Background()
	s, err := cdc.Open(ctx, cdc.Config{Source: url, Tables: []string{"public.t"}, Snapshot: true,
		SnapshotChunkRows: 100, MaxRuntime: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The writer runs until the last chunk arrived.
	var stop atomic.Bool
	touched := map[int32]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	var werr error
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			werr = err
			return
		}
		defer c.Close(ctx)
		r := rand.New(rand.NewSource(1))
		next := int32(rows + 1)
		for !stop.Load() {
			id := int32(1 + r.Intn(rows-1))
			touched[id] = true
			switch r.Intn(3) {
			case 0:
				_, err = c.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = $1`, id)
			case 1:
				_, err = c.Exec(ctx, `DELETE FROM t WHERE id = $1`, id)
			default:
				_, err = c.Exec(ctx, `INSERT INTO t VALUES ($1, 7)`, next)
				next++
			}
			if err != nil {
				werr = err
				return
			}
		}
	}()

	replica := map[int32]int32{}
	lastPos := map[int32]cdc.Position{}
	reads := map[int32]bool{}
	sentinel := false
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			t.Fatal("the stream ended before the sentinel arrived")
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Ack(ev); err != nil {
			t.Fatal(err)
		}
		var id int32
		switch ev.Op {
		case cdc.Snapshot, cdc.Insert, cdc.Update:
			id = ev.After["id"].(int32)
		case cdc.Delete:
			id = ev.Before["id"].(int32)
		default:
			t.Fatalf("unexpected event %+v", ev)
		}
		// Applied in arrival order; for one key positions only go up (a
		// chunk row whose key the stream changed in its window is dropped).
		if p, ok := lastPos[id]; ok && ev.Position.Less(p) {
			t.Errorf("key %d: %s event at %v after one at %v", id, ev.Op, ev.Position, p)
		}
		lastPos[id] = ev.Position
		if ev.Op == cdc.Delete {
			delete(replica, id)
		} else {
			replica[id] = ev.After["v"].(int32)
		}
		if ev.Op == cdc.Snapshot {
			reads[id] = true
			if id == last && !stop.Load() {
				stop.Store(true)
				wg.Wait()
				if werr != nil {
					t.Fatal(werr)
				}
				exampleWrite(url, fmt.Sprintf(`UPDATE t SET v = -1 WHERE id = %d`, last))
			}
		}
		if ev.Op == cdc.Update && id == last && ev.After["v"] == int32(-1) {
			sentinel = true
			break
		}
	}
	if !sentinel {
		t.Fatal("no sentinel")
	}
	for id := int32(1); id <= rows; id++ {
		if !touched[id] && !reads[id] {
			t.Errorf("row %d existed before Open, untouched, and did not arrive as r", id)
		}
	}
	if len(touched) == 0 {
		t.Fatal("the writer wrote nothing during the snapshot: the test checks no reconciliation")
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rs, err := c.Query(ctx, `SELECT id, v FROM t`)
	if err != nil {
		t.Fatal(err)
	}
	source := map[int32]int32{}
	for rs.Next() {
		var id, v int32
		if err := rs.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		source[id] = v
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
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
