package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
